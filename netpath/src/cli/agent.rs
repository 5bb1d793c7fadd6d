//! `netpath agent …` (hidden): inside netpath's agent image the binary is a container's
//! traffic agent (`docker::agent`).

use anyhow::{Context as _, Result};

/// The traffic agent inside netpath's image: `agent serve --bind IP:PORT [--req SIZE]
/// [--resp SIZE] [--proto tcp|udp]` or `agent hold`.
#[derive(clap::Args)]
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
