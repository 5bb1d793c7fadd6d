//! `netpath image`: the netpath image for fleets, built through the Docker API.

use anyhow::Result;

/// Build the netpath image (FROM scratch: this binary and its shared libraries) through
/// the Docker API and print its tag; `netpath cleanup` leaves it. For the DaemonSet and
/// the swarm stack under deploy/ (which run `/netpath serve`).
#[derive(clap::Args)]
pub struct ImageArgs {}

impl super::Command for ImageArgs {
    fn run(self) -> Result<()> {
        super::require_root()?;
        let engine = crate::docker::Engine::connect()?;
        println!(
            "{}",
            crate::docker::image::ensure_agent_image(&engine, true)?
        );
        Ok(())
    }
}
