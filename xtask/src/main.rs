//! Developer tasks for netpath: `cargo xtask setup | test | vm-test | run -- <netpath args> |
//! bench | profile | soak | churn | fuzz | screenshot | image | schemas | man | readme | circles`.
//!
//! Everything here runs plain commands with `std::process::Command` and prints each one
//! before it runs, so a failing step can be repeated by hand.

mod bench;
mod churn;
mod circles;
mod cmd;
mod counts;
mod dockerd;
mod fuzz;
mod image;
mod layers;
mod man;
mod paths;
mod profile;
mod readme;
mod run;
mod schemas;
mod screenshot;
mod setup;
mod soak;
mod test;
mod vm;

use std::{env, path::PathBuf, process::ExitCode};

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(about = "netpath developer tasks")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Install what building and running netpath needs; --tests, --bench, --soak, --screenshot
    /// and --vm add what those commands need (idempotent; root only).
    Setup(setup::SetupArgs),
    /// Set up, then build, lint, check formatting and run every test.
    Test(test::TestArgs),
    /// Run netpath's privileged tests in qemu VMs on Debian's 6.1 and 6.12 cloud kernels.
    VmTest(vm::VmArgs),
    /// Set up, build netpath in release mode and run it with the given arguments.
    Run(run::RunArgs),
    /// Set up, build in release mode and run `netpath bench` (netpath's own cost, as ratios).
    Bench(bench::BenchArgs),
    /// Run `netpath compare` in a loop for N minutes; fail if memory, fds, BPF map memory or
    /// kernel objects grow after warm-up.
    Soak(soak::SoakArgs),
    /// `netpath serve --all` under container churn: its RSS and series over N minutes.
    Churn(churn::ChurnArgs),
    /// Run the cargo-fuzz targets (installs cargo-fuzz on demand) for a while each.
    Fuzz(fuzz::FuzzArgs),
    /// Build the netpath image FROM scratch through the Docker API (a daemon must answer).
    Image,
    /// Render netpath's HTML report to a PNG with headless chromium (to look at it).
    Screenshot(screenshot::ScreenshotArgs),
    /// Where netpath's kernel programs spend their time: a perf profile of one traced run,
    /// split per program into dispatch, code, clock and kernel reads.
    Profile(profile::ProfileArgs),
    /// Write schemas/*.json from netpath's output types (after changing one).
    Schemas,
    /// Write netpath's man pages (netpath.1, netpath-COMMAND.1) into a directory.
    Man(man::ManArgs),
    /// Render README's example output again from its checked-in run (after compare's text
    /// changed).
    Readme,
    /// List the source files of netpath and xtask that import each other in a loop; fail if any.
    Circles,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    put_cargo_bin_on_path();
    let result = match cli.command {
        Command::Setup(args) => setup::run(&args),
        Command::Test(args) => test::run(&args),
        Command::VmTest(args) => vm::run(&args),
        Command::Run(args) => run::run(&args),
        Command::Bench(args) => bench::run(&args),
        Command::Soak(args) => soak::run(&args),
        Command::Churn(args) => churn::run(&args),
        Command::Fuzz(args) => fuzz::run(&args),
        Command::Screenshot(args) => screenshot::run(&args),
        Command::Image => image::run(),
        Command::Profile(args) => profile::run(&args),
        Command::Schemas => schemas::run(),
        Command::Man(args) => man::run(&args),
        Command::Readme => readme::run(),
        Command::Circles => circles::run().and_then(|()| layers::run()),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("xtask: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// Puts `$CARGO_HOME/bin` (default `~/.cargo/bin`) first on `PATH`, so that every
/// subprocess finds `cargo`, `rustup` and a freshly installed `bpf-linker`.
fn put_cargo_bin_on_path() {
    let Some(bin) = cargo_bin_dir() else { return };
    let path = env::var_os("PATH").unwrap_or_default();
    if env::split_paths(&path).any(|p| p == bin) {
        return;
    }
    if let Ok(joined) = env::join_paths(std::iter::once(bin).chain(env::split_paths(&path))) {
        // SAFETY: called from `main` before any thread is spawned.
        unsafe { env::set_var("PATH", joined) };
    }
}

fn cargo_bin_dir() -> Option<PathBuf> {
    let home = env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .or_else(|| env::var_os("HOME").map(|h| PathBuf::from(h).join(".cargo")))?;
    Some(home.join("bin"))
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory as _;

    #[test]
    fn cli_is_well_formed() {
        super::Cli::command().debug_assert();
    }

    #[test]
    fn run_passes_everything_after_the_subcommand() {
        use clap::Parser as _;
        let cli = super::Cli::parse_from(["xtask", "run", "--", "compare", "--json"]);
        let super::Command::Run(args) = cli.command else {
            panic!("not run")
        };
        assert_eq!(args.args, ["compare", "--json"]);
        let cli = super::Cli::parse_from(["xtask", "run", "compare", "-v"]);
        let super::Command::Run(args) = cli.command else {
            panic!("not run")
        };
        assert_eq!(args.args, ["compare", "-v"]);
    }
}
