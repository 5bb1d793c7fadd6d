//! `netpath image`: the netpath image for fleets, built through the Docker API.

use anyhow::Result;

/// Build the netpath image for fleets and print its tag.
///
/// FROM scratch: this binary and its shared libraries, through the Docker API; `netpath cleanup` leaves it. For the DaemonSet and
/// the swarm stack under deploy/ (which run `/netpath serve`).
#[derive(clap::Args)]
#[command(after_help = EXAMPLES)]
pub struct ImageArgs {
    #[command(flatten)]
    pub output: crate::render::OutputArgs,
}

impl super::Command for ImageArgs {
    fn run(self) -> Result<()> {
        super::require_root()?;
        self.output.check_files("image", false)?;
        let engine = crate::docker::Engine::connect()?;
        let tag = crate::docker::image::ensure_agent_image(&engine, true)?;
        self.output
            .emit(None, &crate::render::cleanup::ImageOutput { tag })
    }
}

/// `image --help` ends with these.
const EXAMPLES: &str = "EXAMPLES:
    netpath image                                    build it and print its tag";
