//! `netpath agent …` (hidden): inside netpath's agent image the binary is a container's
//! traffic agent (`docker::agent`).

use anyhow::{Context as _, Result};

/// The traffic agent inside netpath's image: `agent serve --bind IP:PORT [--req SIZE]
/// [--resp SIZE] [--proto tcp|udp]` or `agent hold`.
#[derive(clap::Args)]
#[command(after_help = EXAMPLES)]
pub struct AgentArgs {
    /// The agent's own arguments (`serve …` or `hold`).
    #[arg(
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "ARGS"
    )]
    pub args: Vec<String>,
}

impl super::Command for AgentArgs {
    fn run(self) -> Result<()> {
        crate::docker::agent_main(&self.args).context("agent")
    }
}

/// `agent --help` ends with these.
const EXAMPLES: &str = "EXAMPLES:
    netpath agent serve --bind 172.17.0.2:11111 --req 1024 --resp 1024
    netpath agent serve --bind 172.17.0.2:11111 --proto udp
    netpath agent hold";
