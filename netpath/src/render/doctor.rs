//! `netpath doctor`'s output: the capabilities found and the backend picked, as the table
//! below or as JSON.
use serde::Serialize;
use std::io::Write;

use crate::{probe::backend::Backend, probe::doctor::Capabilities};

/// What `doctor` reports (its JSON body: `backend`, `capabilities`).
#[derive(Serialize, schemars::JsonSchema)]
pub struct DoctorOutput {
    /// The backend `--backend auto` would pick (None: the kernel allows none).
    pub backend: Option<Backend>,
    pub capabilities: Capabilities,
}

impl super::Render for DoctorOutput {
    const KIND: &'static str = "doctor";
    fn text(&self, w: &mut dyn Write) -> std::io::Result<()> {
        print(w, &self.capabilities, self.backend)
    }
}

fn print(w: &mut dyn Write, c: &Capabilities, chosen: Option<Backend>) -> std::io::Result<()> {
    writeln!(w, "kernel    {}", c.kernel)?;
    writeln!(w, "lockdown  {}", c.lockdown)?;
    writeln!(
        w,
        "BTF       {}",
        if c.btf {
            "yes (/sys/kernel/btf/vmlinux)"
        } else {
            "no"
        }
    )?;
    writeln!(w)?;
    writeln!(w, "{:<16} {:<6} detail", "program type", "usable")?;
    for ch in &c.checks {
        writeln!(
            w,
            "{:<16} {:<6} {}",
            ch.name,
            if ch.ok { "yes" } else { "no" },
            ch.detail
        )?;
    }
    writeln!(
        w,
        "{:<16} {:<6} {}",
        "docker",
        if c.docker.ok { "yes" } else { "no" },
        c.docker.detail
    )?;
    writeln!(w)?;
    for b in [Backend::Fentry, Backend::Kprobe, Backend::Tracepoint] {
        let state = if !c.usable(b) {
            "kernel refuses"
        } else if Backend::implemented().contains(&b) {
            "usable"
        } else {
            "kernel allows; not in this build"
        };
        writeln!(w, "backend {:<11} {}", b.name(), state)?;
    }
    if let Some(b) = chosen {
        let hops: Vec<&str> = b.visible_hops().iter().map(|h| h.name()).collect();
        writeln!(
            w,
            "chosen backend: {} (hops: {})",
            b.name(),
            hops.join(", ")
        )?;
    }
    Ok(())
}
