//! `netpath doctor`: what this kernel allows, and the backend netpath would pick.

use anyhow::Result;

use crate::probe::backend::{self, BackendChoice};
use crate::probe::doctor;
use crate::render::{self, OutputArgs};


/// Report kernel, lockdown, BTF, which program types load and attach here, and Docker.
#[derive(clap::Args)]
#[command(after_help = EXAMPLES)]
pub struct DoctorArgs {
    #[command(flatten)]
    pub output: OutputArgs,
}

impl super::Command for DoctorArgs {
    fn run(self) -> Result<()> {
        let a = self;
        super::require_root()?;
        a.output.check_files("doctor", false)?;
        let capabilities = doctor::probe()?;
        let backend = backend::select(BackendChoice::Auto, &capabilities).ok();
        let out = render::doctor::DoctorOutput {
            backend,
            capabilities,
        };
        a.output.emit(backend.map(|b| b.name()), &out)?;
        // -q: the exit status is the answer.
        if a.output.quiet && backend.is_none() {
            anyhow::bail!("no probe backend can attach on this kernel (`netpath doctor` says why)");
        }
        Ok(())
    }
}

/// `doctor --help` ends with these.
const EXAMPLES: &str = "EXAMPLES:
    netpath doctor                                   what this kernel allows, and the backend netpath picks
    netpath doctor --json
    netpath doctor -q && echo traceable              nothing printed: the exit status says it";
