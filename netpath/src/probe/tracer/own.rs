//! The cost of one program run, calibrated where the tracer is loaded, for taking netpath's own
//! time out of the hops (overhead compensation as in TAU: one event's cost measured in a tight
//! loop, charged to every event). The kernel side measures the tail of every stamping program;
//! this covers what it cannot: a run's dispatch and its work before a clock read.
//!
//! A UDP datagram goes from a socket to itself on loopback, crossing the hooks a path's packet
//! crosses, none of them followed, in turns with the programs detached and attached. A turn's
//! fastest short batch is one no other task disturbed (another task only adds time); the median
//! over turns of (attached − detached) follows the machine's changing pace. One long batch a
//! side read 0 or overshot while compilers shared the CPUs.
//!
//! `NETPATH_RUN_COST=<ns>` gives the cost instead: the VM tests use it, as attaching every probe
//! a dozen times under emulation takes minutes and its timing means nothing.
use std::{
    net::UdpSocket,
    time::{Duration, Instant},
};

use anyhow::{Context as _, Result};
use aya::maps::{MapData, PerCpuArray};
use netpath_common::OwnCpu;
use nix::{
    sched::{CpuSet, sched_getaffinity, sched_setaffinity},
    unistd::Pid,
};
use serde::Serialize;

/// Datagrams per batch (about 100 µs, inside one time slice), batches per side and turn, and
/// turns (detach, attach).
const BATCH: u32 = 64;
const BATCHES: usize = 6;
const TURNS: usize = 24;
/// Fewer turns when attaching is slow (under emulation a turn takes seconds): at least
/// `MIN_TURNS`, and no turn begun after `TURNS_FOR`.
const MIN_TURNS: usize = 6;
const TURNS_FOR: Duration = Duration::from_secs(2);

/// One run's cost, as calibrated.
#[derive(Clone, Copy, Debug, Default, Serialize, serde::Deserialize, schemars::JsonSchema)]
pub struct RunCost {
    /// ns charged per program run.
    pub ns: f64,
    /// Program runs per datagram in the calibration loop.
    pub runs_per_datagram: f64,
    /// A turn's fastest batch, ns per datagram, with and without the programs (median of turns).
    pub attached_ns: f64,
    pub detached_ns: f64,
}

impl super::Tracer {
    /// Calibrates `run_cost` (see the module). Leaves the programs detached.
    pub fn calibrate_run_cost(&mut self) -> Result<RunCost> {
        if let Some(ns) = given_run_cost()? {
            self.run_cost = RunCost {
                ns,
                ..RunCost::default()
            };
            return Ok(self.run_cost);
        }
        let sock = UdpSocket::bind("127.0.0.1:0").context("calibration socket")?;
        sock.connect(sock.local_addr()?)?;
        sock.set_read_timeout(Some(Duration::from_millis(200)))?;
        let cpu = pin_here()?;
        let result = self.calibrate_pinned(&sock, cpu.0);
        let _ = sched_setaffinity(Pid::from_raw(0), &cpu.1);
        let cost = result?;
        log::debug!("run cost calibrated on cpu {}: {cost:?}", cpu.0);
        self.run_cost = cost;
        Ok(cost)
    }

    fn calibrate_pinned(&mut self, sock: &UdpSocket, cpu: usize) -> Result<RunCost> {
        let (mut att, mut det, mut diff, mut runs_per) = (vec![], vec![], vec![], f64::INFINITY);
        // Warm both paths (caches, the socket's route) before the first timed batch.
        batch(sock, 200)?;
        let start = Instant::now();
        for turn in 0..TURNS {
            if turn >= MIN_TURNS && start.elapsed() > TURNS_FOR {
                break;
            }
            self.detach()?;
            let d = fastest(BATCHES, || batch(sock, BATCH))?;
            self.attach()?;
            let a = fastest(BATCHES, || {
                let before = self.own_runs(cpu)?;
                let t = batch(sock, BATCH)?;
                let runs = self.own_runs(cpu)?.saturating_sub(before);
                // Another task's runs on this CPU only add: the fewest is the path's own.
                runs_per = runs_per.min(runs as f64 / BATCH as f64);
                Ok(t)
            })?;
            log::trace!("calibration turn: attached {a:.0} ns, detached {d:.0} ns per datagram");
            att.push(a);
            det.push(d);
            diff.push(a - d);
        }
        self.detach()?;
        let ns = if runs_per >= 1.0 && runs_per.is_finite() {
            (median(&diff) / runs_per).max(0.0)
        } else {
            0.0
        };
        Ok(RunCost {
            ns,
            runs_per_datagram: if runs_per.is_finite() { runs_per } else { 0.0 },
            attached_ns: median(&att),
            detached_ns: median(&det),
        })
    }

    /// Program runs counted on `cpu` so far.
    fn own_runs(&self, cpu: usize) -> Result<u64> {
        let m: PerCpuArray<&MapData, OwnCpu> =
            PerCpuArray::try_from(self.ebpf.map("OWN").context("OWN map")?)?;
        let v = m.get(&0, 0)?;
        Ok(v.get(cpu).map_or(0, |o| o.runs))
    }
}

/// The cost `NETPATH_RUN_COST` gives, if set and not empty.
fn given_run_cost() -> Result<Option<f64>> {
    match std::env::var("NETPATH_RUN_COST") {
        Ok(v) if !v.trim().is_empty() => v
            .trim()
            .parse::<f64>()
            .ok()
            .filter(|ns| ns.is_finite() && *ns >= 0.0)
            .map(Some)
            .with_context(|| {
                format!("NETPATH_RUN_COST={v}: expected ns per program run, e.g. 100")
            }),
        _ => Ok(None),
    }
}

/// Pins this thread to the CPU it runs on; returns that CPU and the affinity to restore.
fn pin_here() -> Result<(usize, CpuSet)> {
    let old = sched_getaffinity(Pid::from_raw(0))?;
    // SAFETY: sched_getcpu has no preconditions.
    let cpu = unsafe { libc::sched_getcpu() }.max(0) as usize;
    let mut set = CpuSet::new();
    set.set(cpu)?;
    sched_setaffinity(Pid::from_raw(0), &set)?;
    Ok((cpu, old))
}

/// ns per datagram sent to itself and received, over `n` of them.
fn batch(sock: &UdpSocket, n: u32) -> Result<f64> {
    let mut buf = [0u8; 64];
    let start = Instant::now();
    for i in 0..n {
        sock.send(&i.to_ne_bytes())?;
        sock.recv(&mut buf).context("calibration datagram")?;
    }
    Ok(start.elapsed().as_nanos() as f64 / n as f64)
}

/// The fastest of `n` batches.
fn fastest(n: usize, mut batch: impl FnMut() -> Result<f64>) -> Result<f64> {
    (0..n).try_fold(f64::INFINITY, |m, _| Ok(m.min(batch()?)))
}

fn median(v: &[f64]) -> f64 {
    crate::sys::stats::median(v.iter().copied()).unwrap_or(0.0)
}
