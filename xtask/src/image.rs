//! `cargo xtask image`: the netpath image for fleets (deploy/kubernetes, deploy/swarm), built
//! `FROM scratch` through the Docker API by the release binary itself (`netpath image`).
use std::process::Command;

use crate::{cmd, workspace_root};

pub fn run() -> anyhow::Result<()> {
    let root = workspace_root();
    cmd::run(
        Command::new("cargo")
            .args(["build", "--release", "--package", "netpath"])
            .current_dir(&root),
    )?;
    let exe = crate::target_dir(&root)?.join("release/netpath");
    cmd::run(Command::new(exe).arg("image"))
}
