//! `cargo xtask man [DIR]`: netpath's man pages (netpath.1 and netpath-COMMAND.1) from its
//! command tree, written by the `man` example (clap_mangen) into DIR (default target/man).
use std::{path::PathBuf, process::Command};

use clap::Args;

use crate::{cmd, paths};

#[derive(Args, Debug)]
pub struct ManArgs {
    /// Where to write the pages (default: target/man; /usr/local/share/man/man1 installs
    /// them).
    pub dir: Option<PathBuf>,
}

pub fn run(args: &ManArgs) -> anyhow::Result<()> {
    let root = paths::workspace_root();
    let dir = args
        .dir
        .clone()
        .unwrap_or_else(|| root.join("target").join("man"));
    cmd::run(
        Command::new(env!("CARGO"))
            .current_dir(&root)
            .args(["run", "-q", "-p", "netpath", "--example", "man", "--"])
            .arg(dir),
    )
}
