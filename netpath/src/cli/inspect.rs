//! `netpath inspect`: the thirty-second check of a container's network.

use anyhow::Result;

use crate::render::OutputArgs;

/// The thirty-second check of a container's network.
///
/// Mode, MTU, veth peer and bridge on the
/// host, published ports and the docker-proxy serving them, NAT rules touching it, RPS.
#[derive(clap::Args)]
#[command(after_help = EXAMPLES)]
pub struct InspectArgs {
    /// The container to look at: by id, name or namespace/pod[/container].
    pub container: String,
    #[command(flatten)]
    pub output: OutputArgs,
}

impl super::Command for InspectArgs {
    fn run(self) -> Result<()> {
        super::require_root()?;
        self.output.check_files("inspect", false)?;
        let mut node = crate::runtime::Node::connect()?;
        let r = crate::runtime::inspect(&mut node, &self.container)?;
        self.output.emit(None, &r)
    }
}

/// `inspect --help` ends with these.
const EXAMPLES: &str = "EXAMPLES:
    netpath inspect web
    netpath inspect web --json";
