//! The commands: one file each with its clap arguments and its run (`Command`), listed one line
//! each in `commands!` below (a new command is its file here and one line there); `main.rs`
//! parses and runs the one asked. They import the engines and `render`; nothing but `main.rs`
//! imports them, so a command's result type and its renderer never import each other.

pub mod args;
pub mod bounds;
#[cfg(test)]
mod grammar;
pub mod pcap_filter;
pub mod renamed;
pub mod top;

pub use top::Cli;

use anyhow::{Result, bail};

/// A command: its flags, and what running it does.
pub trait Command {
    fn run(self) -> Result<()>;
}

/// The commands that load programs or build namespaces say so at once without root.
pub fn require_root() -> Result<()> {
    if !nix::unistd::geteuid().is_root() {
        bail!(
            "needs root (CAP_BPF, CAP_NET_ADMIN, CAP_SYS_ADMIN): run it as root, e.g. `sudo netpath …`"
        );
    }
    Ok(())
}

/// A list flag (`-d`, `--proto`: lists in every command, docs/cli.md) of a command that
/// takes one value: that value, `default` when none is given, refused when several are.
pub fn one<T: Copy + std::fmt::Display>(
    command: &str,
    flag: &str,
    given: &[T],
    default: T,
) -> Result<T> {
    match given {
        [] => Ok(default),
        [one] => Ok(*one),
        several => {
            let names: Vec<String> = several.iter().map(|v| v.to_string()).collect();
            bail!(
                "{command} takes one {flag}, got {}: run it once per value",
                names.join(",")
            )
        }
    }
}

/// Readies a traced run over built paths and picks its backend: labs removed on SIGINT and
/// SIGTERM, BTF present (the programs need it), progress on stderr for text output, and the
/// backend `choice` comes to on this kernel.
pub fn traced_run(
    choice: crate::probe::backend::BackendChoice,
    text: bool,
) -> Result<crate::probe::backend::Backend> {
    crate::lab::install_signal_cleanup();
    crate::sys::btf::require()?;
    crate::render::progress::enable(text);
    let caps = crate::probe::doctor::probe()?;
    crate::probe::backend::select(choice, &caps)
}

/// Declares each command's module and its variant of `Cmd` (the subcommands, in `--help`
/// order), and the dispatch to its `Command::run`.
macro_rules! commands {
    ($($(#[$m:meta])* $name:ident => $module:ident::$args:ident,)*) => {
        $(pub mod $module;)*

        #[derive(clap::Subcommand)]
        pub enum Cmd {
            $($(#[$m])* $name($module::$args),)*
        }

        impl Cmd {
            pub fn run(self) -> Result<()> {
                match self {
                    $(Cmd::$name(a) => a.run(),)*
                }
            }
        }
    };
}

commands! {
    Doctor => doctor::DoctorArgs,
    Compare => compare::CompareArgs,
    Tune => tune::TuneArgs,
    Report => report::ReportArgs,
    Diff => diff::DiffArgs,
    Trace => trace::TraceArgs,
    Validate => validate::ValidateArgs,
    Bench => bench::BenchArgs,
    Inspect => inspect::InspectArgs,
    Serve => serve::ServeArgs,
    Image => image::ImageArgs,
    Cleanup => cleanup::CleanupArgs,
    Completions => completions::CompletionsArgs,
    #[command(hide = true)]
    Agent => agent::AgentArgs,
}
