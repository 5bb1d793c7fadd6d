//! `netpath doctor`'s output: the capabilities found and the backend picked, as the table
//! below or as JSON.
use serde::Serialize;

use crate::{probe::backend::Backend, probe::doctor::Capabilities};

/// What `doctor` reports (its JSON body: `backend`, `capabilities`).
#[derive(Serialize)]
pub struct DoctorOutput {
    /// The backend `--backend auto` would pick (None: the kernel allows none).
    pub backend: Option<Backend>,
    pub capabilities: Capabilities,
}

impl super::Render for DoctorOutput {
    const KIND: &'static str = "doctor";
    fn text(&self) {
        print(&self.capabilities, self.backend)
    }
}

fn print(c: &Capabilities, chosen: Option<Backend>) {
    println!("kernel    {}", c.kernel);
    println!("lockdown  {}", c.lockdown);
    println!(
        "BTF       {}",
        if c.btf {
            "yes (/sys/kernel/btf/vmlinux)"
        } else {
            "no"
        }
    );
    println!();
    println!("{:<16} {:<6} detail", "program type", "usable");
    for ch in &c.checks {
        println!(
            "{:<16} {:<6} {}",
            ch.name,
            if ch.ok { "yes" } else { "no" },
            ch.detail
        );
    }
    println!(
        "{:<16} {:<6} {}",
        "docker",
        if c.docker.ok { "yes" } else { "no" },
        c.docker.detail
    );
    println!();
    for b in [Backend::Fentry, Backend::Kprobe, Backend::Tracepoint] {
        let state = if !c.usable(b) {
            "kernel refuses"
        } else if Backend::implemented().contains(&b) {
            "usable"
        } else {
            "kernel allows; not in this build"
        };
        println!("backend {:<11} {}", b.name(), state);
    }
    if let Some(b) = chosen {
        let hops: Vec<&str> = b.visible_hops().iter().map(|h| h.name()).collect();
        println!("chosen backend: {} (hops: {})", b.name(), hops.join(", "));
    }
}
