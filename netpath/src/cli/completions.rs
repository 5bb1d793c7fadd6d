//! `netpath completions SHELL`: the shell's completion script, from the same command tree
//! `--help` prints (clap_complete), so the two agree on every flag.

use std::io::Write as _;

use anyhow::Result;
use clap::CommandFactory as _;

/// Print the completion script of a shell (bash, zsh, fish, elvish, powershell).
///
/// Every subcommand and flag `netpath --help` lists; the hidden old spellings are left out.
#[derive(clap::Args)]
#[command(after_help = EXAMPLES)]
pub struct CompletionsArgs {
    /// The shell whose script to print.
    #[arg(value_enum)]
    pub shell: clap_complete::Shell,
}

impl super::Command for CompletionsArgs {
    /// Needs no privilege.
    fn run(self) -> Result<()> {
        // Into memory first: clap_complete panics on a failed write, and a closed pipe
        // (`| head`) is to end quietly.
        let mut script = Vec::new();
        clap_complete::generate(self.shell, &mut super::Cli::command(), "netpath", &mut script);
        let mut out = std::io::stdout().lock();
        out.write_all(&script)?;
        out.flush()?;
        Ok(())
    }
}

/// `completions --help` ends with these.
const EXAMPLES: &str = "EXAMPLES:
    netpath completions bash > /etc/bash_completion.d/netpath
    netpath completions zsh > ~/.zfunc/_netpath         then `fpath+=~/.zfunc` in ~/.zshrc
    netpath completions fish > ~/.config/fish/completions/netpath.fish";
