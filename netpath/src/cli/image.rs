//! `netpath image`: the netpath image for fleets, built through the Docker API.

use anyhow::Result;

/// Build the netpath image for fleets and print its tag.
///
/// FROM scratch: this binary and its shared libraries, through the Docker API; `netpath cleanup` leaves it. For the DaemonSet and
/// the swarm stack under deploy/ (which run `/netpath serve`).
#[derive(clap::Args)]
#[command(after_help = EXAMPLES)]
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

/// `image --help` ends with these.
const EXAMPLES: &str = "EXAMPLES:
    netpath image                                    build it and print its tag";
