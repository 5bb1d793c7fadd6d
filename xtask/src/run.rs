//! `cargo xtask run -- <netpath args>`: setup, release build, then become netpath.

use std::{os::unix::process::CommandExt as _, process::Command};

use anyhow::Context as _;
use clap::Args;

use crate::{cmd, paths, setup};

#[derive(Args, Debug)]
pub struct RunArgs {
    /// Arguments for netpath, e.g. `compare`.
    #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
    pub args: Vec<String>,
    /// What to install besides the lab's needs (a caller such as `bench` sets its own).
    #[arg(skip)]
    pub setup: setup::SetupArgs,
}

pub fn run(args: &RunArgs) -> anyhow::Result<()> {
    let mut netpath = prepare(args)?;
    // exec: netpath gets the terminal and signals directly and cleans up after itself.
    let err = netpath.exec();
    Err(err).with_context(|| format!("cannot run {}", cmd::display(&netpath)))
}

/// Like [`run`], but as a child that is waited for (a step followed by others).
pub fn run_and_wait(args: &RunArgs) -> anyhow::Result<()> {
    let mut netpath = prepare(args)?;
    let status = netpath
        .status()
        .with_context(|| format!("cannot run {}", cmd::display(&netpath)))?;
    anyhow::ensure!(
        status.success(),
        "{} failed: {status}",
        cmd::display(&netpath)
    );
    Ok(())
}

/// Setup, release build, and the netpath command line to run.
fn prepare(args: &RunArgs) -> anyhow::Result<Command> {
    setup::run(&args.setup)?;
    let mut netpath = Command::new(paths::release_netpath()?);
    netpath.args(&args.args);
    println!("$ {}", cmd::display(&netpath));
    Ok(netpath)
}
