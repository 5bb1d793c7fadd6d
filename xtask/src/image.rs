//! `cargo xtask image`: the netpath image for fleets (deploy/kubernetes, deploy/swarm), built
//! `FROM scratch` through the Docker API by the release binary itself (`netpath image`).
use std::process::Command;

use crate::{cmd, paths};

pub fn run() -> anyhow::Result<()> {
    let exe = paths::release_netpath()?;
    cmd::run(Command::new(exe).arg("image"))
}
