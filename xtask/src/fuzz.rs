//! `cargo xtask fuzz [--secs N] [TARGET…]`: runs the cargo-fuzz targets in `fuzz/` with the
//! installed nightly, each for N seconds, from the small seed corpora in `fuzz/corpus/`
//! (new inputs go to a scratch corpus under `fuzz/target/`, so the committed seeds stay
//! small). cargo-fuzz is installed from crates.io on first use (a minute or two).

use std::process::Command;

use anyhow::bail;
use clap::Args;

use crate::{cmd, paths::workspace_root};

/// The targets in fuzz/Cargo.toml.
const TARGETS: &[&str] = &["skb_state", "args", "docker_inspect"];

#[derive(Args, Debug)]
pub struct FuzzArgs {
    /// Seconds per target.
    #[arg(long, default_value_t = 180, value_parser = clap::value_parser!(u64).range(1..=86_400))]
    pub secs: u64,
    /// Targets to run (default: all).
    pub targets: Vec<String>,
}

pub fn run(args: &FuzzArgs) -> anyhow::Result<()> {
    if cmd::probe(Command::new("cargo").args(["fuzz", "--version"])).is_none() {
        cmd::run(Command::new("cargo").args(["install", "cargo-fuzz", "--locked"]))?;
    }
    let fuzz_dir = workspace_root().join("fuzz");
    let targets: Vec<&str> = if args.targets.is_empty() {
        TARGETS.to_vec()
    } else {
        args.targets.iter().map(String::as_str).collect()
    };
    for t in &targets {
        if !TARGETS.contains(t) {
            bail!(
                "unknown fuzz target {t:?}: choose from {}",
                TARGETS.join(", ")
            );
        }
    }
    for t in targets {
        let scratch = fuzz_dir.join("target/corpus").join(t);
        std::fs::create_dir_all(&scratch)?;
        cmd::run(
            Command::new("cargo")
                .args(["+nightly", "fuzz", "run", t])
                .arg(&scratch)
                .arg(fuzz_dir.join("corpus").join(t))
                .args([
                    "--",
                    &format!("-max_total_time={}", args.secs),
                    "-print_final_stats=1",
                ])
                // The eBPF object is not needed by any target.
                .env("AYA_BUILD_SKIP", "1")
                .current_dir(&fuzz_dir),
        )?;
    }
    Ok(())
}
