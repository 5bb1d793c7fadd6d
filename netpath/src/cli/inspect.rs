//! `netpath inspect`: the thirty-second check of a container's network.

use anyhow::Result;

use crate::render::{self, OutputArgs};

/// The thirty-second check of a container's network: mode, MTU, veth peer and bridge on the
/// host, published ports and the docker-proxy serving them, NAT rules touching it, RPS.
#[derive(clap::Args)]
pub struct InspectArgs {
    pub container: String,
    #[command(flatten)]
    pub output: OutputArgs,
}

impl super::Command for InspectArgs {
    fn run(self) -> Result<()> {
        super::require_root()?;
        let engine = crate::docker::Engine::connect()?;
        let r = crate::docker::inspect(&engine, &self.container)?;
        render::emit(self.output.format(), None, &r)
    }
}
