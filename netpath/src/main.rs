//! `netpath`: the command line parsed (clap; the tree is `netpath::cli::Cli`) and dispatched to
//! its command, and the exit status; the commands are listed in `netpath::cli` (`commands!`),
//! each with its flags and run in `cli/<command>.rs`.
use std::process::ExitCode;

use clap::{CommandFactory as _, FromArgMatches as _};
use netpath::cli::Cli;

fn main() -> ExitCode {
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("warn")).init();
    netpath::render::quiet_broken_pipe();
    let args: Vec<String> = std::env::args().collect();
    // `--version` says which backend this kernel allows: probed only when asked.
    if args.len() == 2 && args[1] == "--version" {
        return print(&netpath::cli::top::long_version());
    }
    let parsed = Cli::command()
        .version(netpath::cli::top::short_version())
        .try_get_matches_from(&args)
        .and_then(|m| Cli::from_arg_matches(&m));
    let cli = match parsed {
        Ok(cli) => cli,
        Err(e) if !e.use_stderr() => {
            // --help, -V
            let _ = e.print();
            return ExitCode::SUCCESS;
        }
        Err(e) if e.kind() == clap::error::ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => {
            // `netpath` alone: the help, as it is, and a failed exit (nothing was asked).
            let _ = e.print();
            return ExitCode::from(2);
        }
        Err(e) => {
            eprintln!(
                "netpath: {} (see `netpath --help`)",
                netpath::render::output::clap_line(&e)
            );
            return ExitCode::from(2);
        }
    };
    // Old spellings work for one release and say their new names (docs/cli.md).
    for hint in netpath::cli::renamed::hints(&args) {
        eprintln!("{hint}");
    }
    netpath::record::header::mark_start();
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| cli.cmd.run()));
    netpath::lab::wait_if_interrupted();
    let result = match result {
        Ok(r) => r,
        // `println!` on a closed pipe: said nothing (the hook), ends quietly.
        Err(p) if netpath::render::is_pipe_panic(p.as_ref()) => return ExitCode::SUCCESS,
        Err(p) => std::panic::resume_unwind(p),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        // The reader went away (`netpath doctor | head`): nobody is left to tell.
        Err(e) if netpath::render::is_broken_pipe(&e) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("netpath: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// Prints `s` on stdout; a closed pipe is no failure.
fn print(s: &str) -> ExitCode {
    use std::io::Write as _;
    let _ = writeln!(std::io::stdout(), "{s}");
    ExitCode::SUCCESS
}
