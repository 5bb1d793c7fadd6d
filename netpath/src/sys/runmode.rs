//! Pinning netpath's own threads (`--cpus same|split|auto|N,M`, resolved) and the run mode of
//! a measurement (wait mode, placement, the blocking line).
//!
//! The receiver's wakeup on an idle vCPU costs tens of µs and swings with the machine's state;
//! the per-driver differences netpath explains are a few µs: `split` keeps client and server on
//! two fixed CPUs. Affinity is set on netpath's own threads only (and the relay it started).

use anyhow::{Context, Result, bail};
use nix::sched::{CpuSet, sched_getaffinity, sched_setaffinity};
use nix::unistd::Pid;

use crate::options::{Cpus, Pin, WaitMode};

/// Wait mode and placement of a measurement.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, schemars::JsonSchema)]
pub struct RunMode {
    /// Wait mode of the runs the hop tables and ratios come from.
    pub wait: WaitMode,
    /// Also measure each path blocking, untraced and traced, in every round: a record of its
    /// own beside the spin one (`DriverReport::block`), what an application sees.
    pub also_block: bool,
    pub cpus: Cpus,
    /// `cpus` resolved on this machine.
    pub pin: Pin,
    /// How CPUs may idle while the runs go (`sys::pmqos`).
    pub idle: crate::sys::pmqos::Idle,
}

/// The CPUs this process may run on.
pub fn allowed_cpus() -> Result<Vec<usize>> {
    let set = sched_getaffinity(Pid::from_raw(0)).context("sched_getaffinity")?;
    Ok((0..CpuSet::count())
        .filter(|&c| set.is_set(c).unwrap_or(false))
        .collect())
}

impl Cpus {
    /// The CPUs to pin to, checked against the CPUs this process may use: an impossible
    /// placement is one line saying which CPUs exist.
    pub fn resolve(self) -> Result<Pin> {
        let cpus = allowed_cpus()?;
        let list = || {
            cpus.iter()
                .map(|c| c.to_string())
                .collect::<Vec<_>>()
                .join(",")
        };
        let pin = |c: usize, s: usize| Pin {
            client: Some(c),
            server: Some(s),
        };
        match self {
            Cpus::Auto => Ok(Pin::default()),
            Cpus::Same => Ok(pin(cpus[0], cpus[0])),
            Cpus::Split if cpus.len() < 2 => bail!(
                "--cpus split needs two CPUs, and this process may use only CPU {}: use --cpus same or auto",
                list()
            ),
            Cpus::Split => Ok(pin(cpus[0], cpus[1])),
            Cpus::One(a) | Cpus::Pair(a, _) | Cpus::Pair(_, a) if !cpus.contains(&a) => bail!(
                "--cpus {self}: CPU {a} is not one this process may use (CPUs {}): pick from those",
                list()
            ),
            Cpus::One(a) => Ok(pin(a, a)),
            Cpus::Pair(a, b) => Ok(pin(a, b)),
        }
    }
}

/// Pins the calling thread to `cpu` (no-op for `None`).
pub fn pin_current(cpu: Option<usize>) -> Result<()> {
    let Some(cpu) = cpu else { return Ok(()) };
    let mut set = CpuSet::new();
    set.set(cpu).with_context(|| format!("CPU {cpu}"))?;
    sched_setaffinity(Pid::from_raw(0), &set)
        .with_context(|| format!("pinning a thread to CPU {cpu}"))
}

/// Pins every thread of process `pid` (a relay netpath started) to `cpu`, or lets it run on
/// every allowed CPU again for `None`. Best effort: threads may come and go meanwhile.
pub fn pin_process(pid: u32, cpu: Option<usize>) -> Result<()> {
    let mut set = CpuSet::new();
    let cpus = match cpu {
        Some(c) => vec![c],
        None => allowed_cpus()?,
    };
    for c in cpus {
        set.set(c).with_context(|| format!("CPU {c}"))?;
    }
    let tasks = i32::try_from(pid)
        .ok()
        .and_then(|p| procfs::process::Process::new(p).ok())
        .with_context(|| format!("process {pid}"))?
        .tasks()
        .with_context(|| format!("listing /proc/{pid}/task"))?;
    for t in tasks.flatten() {
        let _ = sched_setaffinity(Pid::from_raw(t.tid), &set);
    }
    Ok(())
}

/// The CPU the calling thread runs on now.
pub fn current_cpu() -> Option<usize> {
    // SAFETY: sched_getcpu has no preconditions.
    let c = unsafe { libc::sched_getcpu() };
    (c >= 0).then_some(c as usize)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_placements() {
        assert_eq!("same".parse::<Cpus>(), Ok(Cpus::Same));
        assert_eq!("split".parse::<Cpus>(), Ok(Cpus::Split));
        assert_eq!("auto".parse::<Cpus>(), Ok(Cpus::Auto));
        assert_eq!("0,1".parse::<Cpus>(), Ok(Cpus::Pair(0, 1)));
        assert_eq!("7".parse::<Cpus>(), Ok(Cpus::One(7)));
        assert!(
            "x".parse::<Cpus>()
                .unwrap_err()
                .contains("same, split, auto, N or N,M")
        );
        assert!("a,b".parse::<Cpus>().is_err());
        assert_eq!(Cpus::Pair(1, 0).to_string(), "1,0");
    }

    #[test]
    fn a_cpu_that_is_not_there_is_refused() {
        let e = Cpus::Pair(0, 100_000).resolve().unwrap_err().to_string();
        assert!(e.contains("CPU 100000"), "{e}");
        let p = Cpus::Same.resolve().unwrap();
        assert_eq!(p.client, p.server);
        assert_eq!(Cpus::Auto.resolve().unwrap(), Pin::default());
    }
}
