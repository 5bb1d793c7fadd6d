//! `cargo xtask bench [netpath bench args]`: setup, release build, then `netpath bench`, which
//! regenerates `BENCHMARKS.md` at the repository root (with a one-million-journey run unless
//! `--journeys` says otherwise) and the hops-you-can-prove section (`--proof`), and its
//! stability section (`netpath bench --stability`).
//! `--proto udp` passes through: the UDP bench writes BENCHMARKS-udp.md instead (so the TCP
//! report stays), and has no journey run or stability section (both are TCP runs).
//!
//! The bench measures netpath's own cost as ratios (harness vs sockperf and iperf3, traced vs
//! untraced, kernel ns per round trip, memory) on this machine. Timing never belongs in
//! `cargo xtask test`, so it is only ever run from here or by hand.

use clap::Args;

use crate::{run, setup};

#[derive(Args, Debug)]
pub struct BenchArgs {
    /// Arguments for `netpath bench`, e.g. `--rounds 5 --json` (see `netpath bench --help`).
    #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
    pub args: Vec<String>,
}

pub fn run(args: &BenchArgs) -> anyhow::Result<()> {
    // The stability section (`netpath bench --stability`) follows, unless it was the one asked.
    if args.args.iter().any(|a| a == "--stability") || udp(args) {
        return run::run(&with_bench_tools(netpath_args(args)));
    }
    // The serve-left-on section runs containers: a daemon for it (stopped again after, if
    // started here); without one the section says it was skipped. Setup first: on a fresh
    // machine the daemon is among what it installs (the build's setup is then quick).
    setup::run(&with_bench_tools(Vec::new()).setup)?;
    let _docker = crate::dockerd::ensure_dockerd()
        .inspect_err(|e| eprintln!("bench: no Docker daemon for the serve-left-on section: {e:#}"))
        .ok();
    run::run_and_wait(&with_bench_tools(netpath_args(args)))?;
    // Waited for, not exec'd: the daemon's guard stops a daemon started here on return.
    run::run_and_wait(&with_bench_tools(stability_args(args)))
}

/// `netpath <args>` after a setup that also installs the bench's tools (sockperf, iperf3).
fn with_bench_tools(args: Vec<String>) -> run::RunArgs {
    run::RunArgs {
        args,
        setup: setup::SetupArgs {
            bench: true,
            ..Default::default()
        },
    }
}

/// The bench asked for JSON: `--json`, or its long form `--format json`.
fn wants_json(args: &BenchArgs) -> bool {
    let a = &args.args;
    a.iter().any(|x| x == "--json" || x == "--format=json")
        || a.windows(2).any(|w| w[0] == "--format" && w[1] == "json")
}

/// `--proto udp` (or `--proto=udp`) was given.
fn udp(args: &BenchArgs) -> bool {
    let a = &args.args;
    a.iter().any(|x| x == "--proto=udp") || a.windows(2).any(|w| w[0] == "--proto" && w[1] == "udp")
}

/// `bench --stability`, in JSON if the bench was.
fn stability_args(args: &BenchArgs) -> Vec<String> {
    let mut v = vec!["bench".to_string(), "--stability".to_string()];
    if wants_json(args) {
        v.push("--json".into());
    }
    v
}

/// `bench` and the given arguments; `--markdown <root>/BENCHMARKS.md` and `--journeys 1000000`
/// unless given (or JSON was asked for the report instead).
fn netpath_args(args: &BenchArgs) -> Vec<String> {
    let mut v: Vec<String> = std::iter::once("bench".to_string())
        .chain(args.args.iter().cloned())
        .collect();
    let has = |flag: &str| {
        args.args
            .iter()
            .any(|a| a == flag || a.starts_with(&format!("{flag}=")))
    };
    if has("--stability") || wants_json(args) {
        return v;
    }
    if !has("--markdown") {
        let name = if udp(args) {
            "BENCHMARKS-udp.md"
        } else {
            "BENCHMARKS.md"
        };
        let path = crate::paths::workspace_root().join(name);
        v.extend(["--markdown".into(), path.display().to_string()]);
    }
    if !has("--journeys") && !udp(args) {
        v.extend(["--journeys".into(), "1000000".into()]);
    }
    if !has("--proof") && !udp(args) {
        v.push("--proof".into());
    }
    if !has("--serve-left-on") && !udp(args) {
        v.push("--serve-left-on".into());
    }
    v
}

#[cfg(test)]
mod tests {
    use clap::Parser as _;

    #[test]
    fn bench_passes_its_arguments_to_netpath_bench() {
        let cli = crate::Cli::parse_from(["xtask", "bench", "--rounds", "5", "--json"]);
        let crate::Command::Bench(args) = cli.command else {
            panic!("not bench")
        };
        assert_eq!(
            super::netpath_args(&args),
            ["bench", "--rounds", "5", "--json"]
        );
        let cli = crate::Cli::parse_from(["xtask", "bench", "--format", "json"]);
        let crate::Command::Bench(args) = cli.command else {
            panic!("not bench")
        };
        assert_eq!(super::netpath_args(&args), ["bench", "--format", "json"]);
        assert_eq!(
            super::stability_args(&args),
            ["bench", "--stability", "--json"]
        );
        let cli = crate::Cli::parse_from(["xtask", "bench"]);
        let crate::Command::Bench(args) = cli.command else {
            panic!("not bench")
        };
        let md = crate::paths::workspace_root().join("BENCHMARKS.md");
        assert_eq!(
            super::netpath_args(&args),
            [
                "bench",
                "--markdown",
                &md.display().to_string(),
                "--journeys",
                "1000000",
                "--proof",
                "--serve-left-on"
            ]
        );
        assert_eq!(super::stability_args(&args), ["bench", "--stability"]);
        // --proto udp passes through, to a report of its own, without the TCP journey run.
        let cli = crate::Cli::parse_from(["xtask", "bench", "--proto", "udp"]);
        let crate::Command::Bench(args) = cli.command else {
            panic!("not bench")
        };
        let md = crate::paths::workspace_root().join("BENCHMARKS-udp.md");
        assert!(super::udp(&args));
        assert_eq!(
            super::netpath_args(&args),
            [
                "bench",
                "--proto",
                "udp",
                "--markdown",
                &md.display().to_string()
            ]
        );
    }
}
