//! `netpath cleanup`: what a killed run left behind, removed.

use anyhow::Result;

use crate::lab;

/// Remove every netpath namespace, link and table a killed run left behind.
#[derive(clap::Args)]
#[command(after_help = EXAMPLES)]
pub struct CleanupArgs {
    #[command(flatten)]
    pub output: crate::render::OutputArgs,
}

impl super::Command for CleanupArgs {
    fn run(self) -> Result<()> {
        super::require_root()?;
        self.output.check_files("cleanup", false)?;
        let mut removed = lab::cleanup_leftovers()?;
        // Docker objects: through the daemon when one answers, else what can be removed
        // without it (macvlan parents, state files, a second daemon netpath started).
        match crate::docker::Engine::connect() {
            Ok(engine) => removed.extend(crate::docker::cleanup_docker(&engine)?),
            Err(_) => removed.extend(crate::docker::cleanup_docker_host(std::path::Path::new(
                "/proc/self/ns/net",
            ))?),
        }
        let out = crate::render::cleanup::CleanupOutput { removed };
        self.output.emit(None, &out)
    }
}

/// `cleanup --help` ends with these.
const EXAMPLES: &str = "EXAMPLES:
    netpath cleanup                                  remove what a killed run left behind";
