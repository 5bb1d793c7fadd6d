//! `netpath bench --stability`: do `compare`'s ratios hold still when the machine changes?
//!
//! Five `compare -d host,bridge,overlay --rounds 3` runs (default mode: spin, split), the
//! machine alternating between idle and one busy loop pinned to one CPU, and per run the
//! bridge/host and overlay/bridge p50 ratios (per-round medians). The goal is that the five
//! agree within ±5%; a tool whose ratios move with the machine describes the machine.
use std::sync::{
    Arc,
    atomic::{AtomicBool, Ordering},
};

use anyhow::Result;
use serde::Serialize;

use crate::{
    driver::Driver,
    harness::RrLoad,
    measure::compare,
    probe::backend::{self, BackendChoice},
    probe::doctor,
    sys::machine::MachineState,
};

/// One `compare` run of the section.
#[derive(Clone, Debug, Serialize, schemars::JsonSchema)]
pub struct StabilityRun {
    /// "idle" or "busy loop on CPU N".
    pub load: String,
    pub bridge_host_p50: Option<f64>,
    pub overlay_bridge_p50: Option<f64>,
    /// Untraced p50 medians, µs.
    pub host_p50_us: f64,
    pub bridge_p50_us: f64,
    pub overlay_p50_us: f64,
    pub machine: Option<MachineState>,
}

#[derive(Clone, Debug, Serialize, schemars::JsonSchema)]
pub struct StabilityReport {
    pub runs: Vec<StabilityRun>,
    /// (max − min) / median of each ratio over the runs, %: the goal is at most 10 (±5%).
    pub bridge_host_range_pct: f64,
    pub overlay_bridge_range_pct: f64,
}

/// Number of `compare` runs.
pub const RUNS: usize = 5;
/// Rounds of each run (`--rounds 3`): enough for a per-round median.
pub const ROUNDS: usize = 3;

/// A thread spinning on `cpu` until dropped: the "busy" machine state.
struct BusyLoop {
    stop: Arc<AtomicBool>,
    handle: Option<std::thread::JoinHandle<()>>,
}

impl BusyLoop {
    fn start(cpu: usize) -> Result<BusyLoop> {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let handle = std::thread::Builder::new()
            .name("np-busy".into())
            .spawn(move || {
                let _ = crate::sys::runmode::pin_current(Some(cpu));
                while !flag.load(Ordering::Relaxed) {
                    std::hint::spin_loop();
                }
            })?;
        Ok(BusyLoop {
            stop,
            handle: Some(handle),
        })
    }
}

impl Drop for BusyLoop {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

fn range_pct(v: &[f64]) -> f64 {
    let s = crate::record::Spread::of(v.to_vec());
    100.0 * s.rel()
}

/// Runs the section; `progress` gets a line per run.
pub fn run(requests: u64, progress: bool) -> Result<StabilityReport> {
    let caps = doctor::probe()?;
    let backend = backend::select(BackendChoice::Auto, &caps)?;
    let busy_cpu = *crate::sys::runmode::allowed_cpus()?
        .last()
        .ok_or_else(|| anyhow::anyhow!("no CPU to run on"))?;
    let rr = RrLoad {
        requests,
        ..RrLoad::default()
    };
    let drivers = vec![Driver::Host, Driver::Bridge, Driver::Overlay];
    let opts = super::compare_options(drivers, ROUNDS, rr)?;
    let mut runs = Vec::new();
    for i in 0..RUNS {
        let busy = (i % 2 == 1)
            .then(|| BusyLoop::start(busy_cpu))
            .transpose()?;
        let load = match &busy {
            Some(_) => format!("busy loop on CPU {busy_cpu}"),
            None => "idle".to_string(),
        };
        if progress {
            eprintln!("stability: run {}/{RUNS} ({load})", i + 1);
        }
        let reports = compare::run(backend, &opts, &mut crate::record::Quiet)?;
        drop(busy);
        let ratio = |a: &str, b: &str| {
            crate::record::per_round::ratio(&reports, a, b).map(|r| r.spread.median)
        };
        let p50 = |d: &str| {
            reports
                .iter()
                .find(|r| r.driver == d)
                .and_then(|r| r.rr.as_ref())
                .map_or(0.0, |x| x.p50_us.median)
        };
        runs.push(StabilityRun {
            load,
            bridge_host_p50: ratio("bridge", "host"),
            overlay_bridge_p50: ratio("overlay", "bridge"),
            host_p50_us: p50("host"),
            bridge_p50_us: p50("bridge"),
            overlay_p50_us: p50("overlay"),
            machine: reports.last().and_then(|r| r.machine.clone()),
        });
    }
    let col = |f: fn(&StabilityRun) -> Option<f64>| runs.iter().filter_map(f).collect::<Vec<_>>();
    Ok(StabilityReport {
        bridge_host_range_pct: range_pct(&col(|r| r.bridge_host_p50)),
        overlay_bridge_range_pct: range_pct(&col(|r| r.overlay_bridge_p50)),
        runs,
    })
}
