//! Keeping CPUs out of idle states while netpath measures (`--idle poll`).
//!
//! A receiver that blocks wakes on a CPU that may have gone idle; on a virtual CPU leaving the
//! idle state is a VM exit of tens of µs, which buries the few µs a path costs (docs/answer.md:
//! a bridge's blocking p50 17–19 µs kept awake, 50–60 µs idle, on a 2-vCPU VM). Latency-tuned
//! hosts keep CPUs out of deep idle through the kernel's CPU latency QoS (tuned's
//! latency-performance profile does it): a process writes a 32-bit 0 to
//! `/dev/cpu_dma_latency` and keeps the file open. The request is the process's own: the
//! kernel drops it when the file is closed, which includes the process's exit on any path,
//! SIGKILL too, so nothing can be left held and `netpath cleanup` has nothing to undo. Other
//! processes' requests are untouched (the kernel takes the least of all requests).
use std::io::Write as _;
use std::sync::Mutex;

use anyhow::{Context as _, Result};

pub const DEVICE: &str = "/dev/cpu_dma_latency";

/// How CPUs may idle while netpath measures.
#[derive(
    Clone,
    Copy,
    Debug,
    Default,
    PartialEq,
    Eq,
    Hash,
    serde::Serialize,
    serde::Deserialize,
    schemars::JsonSchema,
    clap::ValueEnum,
)]
#[serde(rename_all = "kebab-case")]
pub enum Idle {
    /// CPUs kept out of idle states (CPU latency QoS held at 0 µs): a blocked receiver wakes
    /// on a warm CPU, as on a latency-tuned host.
    #[default]
    Poll,
    /// CPUs idle as this machine lets them (no request of netpath's): a blocked receiver's
    /// wakeup includes the CPU's idle exit.
    Deep,
}

impl Idle {
    pub fn name(self) -> &'static str {
        match self {
            Idle::Poll => "poll",
            Idle::Deep => "deep",
        }
    }

    /// How the machine line says it.
    pub fn describe(self) -> &'static str {
        match self {
            Idle::Poll => "CPUs kept out of idle by netpath (CPU latency QoS 0 µs)",
            Idle::Deep => "CPUs idle as the machine lets them",
        }
    }
}

impl std::fmt::Display for Idle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// The open request, while held.
static HELD: Mutex<Option<std::fs::File>> = Mutex::new(None);

/// Puts this process's request in the state `idle` asks: holds it (opening the device once)
/// or drops it. Cheap when nothing changes, so a run can call it before every turn.
pub fn apply(idle: Idle) -> Result<()> {
    let mut held = HELD.lock().unwrap_or_else(|e| e.into_inner());
    match (idle, held.is_some()) {
        (Idle::Poll, false) => *held = Some(open()?),
        (Idle::Deep, true) => *held = None,
        _ => {}
    }
    Ok(())
}

/// Whether this process holds the request now.
pub fn held() -> bool {
    HELD.lock().map(|h| h.is_some()).unwrap_or(false)
}

fn open() -> Result<std::fs::File> {
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .open(DEVICE)
        .with_context(|| {
            format!("--idle poll needs {DEVICE} (the kernel's CPU latency QoS): use --idle deep")
        })?;
    f.write_all(&0i32.to_ne_bytes())
        .with_context(|| format!("writing 0 to {DEVICE}"))?;
    Ok(f)
}

/// The machine's CPU latency limit now, µs, as the kernel aggregates every request
/// (2000000000 when nobody asks).
pub fn current_limit_us() -> Option<i32> {
    let mut b = [0u8; 4];
    let f = std::fs::File::open(DEVICE).ok()?;
    use std::io::Read as _;
    (&f).read_exact(&mut b).ok()?;
    Some(i32::from_ne_bytes(b))
}
