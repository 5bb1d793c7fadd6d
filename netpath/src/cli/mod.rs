//! The commands: one file each with its clap arguments and its run (`Command`); `main.rs`
//! parses and dispatches. They import the engines and `render`; nothing but `main.rs`
//! imports them, so a command's result type and its renderer never import each other.

pub mod agent;
pub mod args;
pub mod bench;
pub mod bounds;
pub mod cleanup;
pub mod compare;
pub mod diff;
pub mod doctor;
pub mod image;
pub mod inspect;
pub mod report;
pub mod serve;
pub mod trace;
pub mod tune;

use anyhow::{Result, bail};

/// A command: its flags, and what running it does.
pub trait Command {
    fn run(self) -> Result<()>;
}

/// The commands that load programs or build namespaces say so at once without root.
pub fn require_root() -> Result<()> {
    if !nix::unistd::geteuid().is_root() {
        bail!(
            "netpath needs root (CAP_BPF, CAP_NET_ADMIN, CAP_SYS_ADMIN): run it as root, e.g. `sudo netpath …`"
        );
    }
    Ok(())
}
