//! Traced runs: request/response and bulk with the probes attached, and program costs.

use super::*;

/// One traced request/response run as `compare` does it: probes attached, the harness threads
/// traced after warm-up. Also returns the hop events the kernel recorded.
pub(super) fn rr_traced(
    tracer: &mut Tracer,
    lab: &NetPath,
    cfg: &RrConfig,
    floor: bool,
) -> Result<(RrResult, u64)> {
    tracer.reset()?;
    tracer.attach()?;
    if floor {
        tracer.attach_floor()?;
    }
    let phases = tracer.tids.clone();
    phases.set_relays(lab.proxy_pid.into_iter().collect());
    let r = harness::run_rr(lab, cfg, phases.as_ref());
    tracer.detach()?;
    let r = r.context("traced run")?;
    let events = tracer.snapshot()?.hop_events();
    Ok((r, events))
}

/// Bulk run with the probes attached and the bulk threads traced: `run_bulk` has no phase
/// hooks, so a watcher thread finds its threads by name and registers them.
pub(super) fn bulk_traced(
    tracer: &mut Tracer,
    lab: &NetPath,
    cfg: &BulkConfig,
) -> Result<(Bulk, bool, u64)> {
    tracer.reset()?;
    tracer.attach()?;
    let tids = tracer.tids.clone();
    let stop = AtomicBool::new(false);
    let (r, found) = std::thread::scope(|s| {
        let watcher = s.spawn(|| -> Result<bool> {
            let mut cli: Vec<u32> = Vec::new();
            let mut srv: Vec<u32> = Vec::new();
            let mut pairs: Vec<(u32, u32)> = Vec::new();
            let mut both_since: Option<Instant> = None;
            while !stop.load(Ordering::Relaxed) {
                let (c, v) = threads_named(
                    harness::bulk::BULK_CLIENT_COMM,
                    harness::bulk::BULK_SERVER_COMM,
                );
                for t in c {
                    if !cli.contains(&t) {
                        cli.push(t);
                    }
                }
                for t in v {
                    if !srv.contains(&t) {
                        srv.push(t);
                    }
                }
                if !cli.is_empty() && !srv.is_empty() {
                    for &c in &cli {
                        for &v in &srv {
                            if !pairs.contains(&(c, v)) {
                                tids.measure_start(c, v)?;
                                pairs.push((c, v));
                            }
                        }
                    }
                    // Keep looking a little longer for the per-connection server thread.
                    let since = *both_since.get_or_insert_with(Instant::now);
                    if since.elapsed() > Duration::from_millis(20) {
                        return Ok(true);
                    }
                }
                std::thread::sleep(Duration::from_micros(500));
            }
            Ok(!cli.is_empty() && !srv.is_empty())
        });
        let r = harness::run_bulk(lab, cfg);
        stop.store(true, Ordering::Relaxed);
        let found = watcher
            .join()
            .unwrap_or_else(|_| Ok(false))
            .unwrap_or(false);
        (r, found)
    });
    let _ = tids.measure_end(0, 0);
    tracer.detach()?;
    let r = r.context("traced bulk")?;
    let events = tracer.snapshot()?.hop_events();
    Ok((bulk_of(&r), found, events))
}

/// Threads of this process whose name is `a` or `b`.
pub(super) fn threads_named(a: &str, b: &str) -> (Vec<u32>, Vec<u32>) {
    let (mut va, mut vb) = (Vec::new(), Vec::new());
    let Ok(dir) = std::fs::read_dir("/proc/self/task") else {
        return (va, vb);
    };
    for e in dir.flatten() {
        let Some(tid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        let comm = std::fs::read_to_string(e.path().join("comm")).unwrap_or_default();
        match comm.trim_end() {
            c if c == a => va.push(tid),
            c if c == b => vb.push(tid),
            _ => {}
        }
    }
    (va, vb)
}

pub(super) fn bulk_of(b: &harness::BulkResult) -> Bulk {
    Bulk {
        gbit_per_s: b.gbit_per_s,
        retransmits: b.retransmits,
    }
}

/// Each program's cost over a run (`record::costs`), the heaviest per round trip first.
pub(super) fn prog_costs(
    before: &[(String, u64, u64)],
    after: &[(String, u64, u64)],
    rtts: u64,
) -> Vec<ProgCost> {
    let mut out = crate::record::costs(before, after, rtts);
    out.sort_by(|a, b| {
        (b.avg_ns * b.runs_per_rtt)
            .partial_cmp(&(a.avg_ns * a.runs_per_rtt))
            .unwrap_or(std::cmp::Ordering::Equal)
    });
    out
}

/// Mean ns per run over `progs`, weighted by their runs.
pub(super) fn weighted_ns<'a>(progs: impl Iterator<Item = &'a ProgCost>) -> f64 {
    let (ns, runs) = progs.fold((0.0, 0u64), |(ns, runs), p| {
        (ns + p.avg_ns * p.runs as f64, runs + p.runs)
    });
    if runs == 0 {
        f64::NAN
    } else {
        ns / runs as f64
    }
}

/// What the programs cost traffic netpath does not follow: one request/response run with the
/// probes (and the floors) attached, nothing followed, BPF run-time statistics on.
pub(super) fn untracked_costs(tracer: &mut Tracer, lab: &NetPath, rr: &RrConfig) -> Result<Costs> {
    let stats = aya::sys::enable_stats(aya::sys::Stats::RunTime)
        .context("enabling BPF run-time statistics")?;
    let before = tracer.prog_costs();
    tracer.reset()?;
    tracer.attach()?;
    tracer.attach_floor()?;
    let r = harness::run_rr(lab, rr, &NoPhases);
    tracer.detach()?;
    let after = tracer.prog_costs();
    drop(stats);
    let r = r.context("untracked run with statistics")?;
    Ok(split_floors(prog_costs(&before, &after, r.count)))
}

/// The programs' costs, and the empty programs' (`floor_<hook>`) apart from them.
pub(super) fn split_floors(costs: Vec<ProgCost>) -> Costs {
    let (floors, programs): (Vec<ProgCost>, Vec<ProgCost>) = costs
        .into_iter()
        .partition(|p| p.program.starts_with("floor_"));
    Costs { programs, floors }
}

/// One run's program costs, floors apart.
pub(super) struct Costs {
    pub programs: Vec<ProgCost>,
    pub floors: Vec<ProgCost>,
}

impl Costs {
    /// The floor on `net_dev_queue`: what any program costs on a network hook.
    pub fn floor_ns(&self) -> f64 {
        self.floors
            .iter()
            .find(|f| f.program == "floor_net_dev_queue")
            .map_or(f64::NAN, |f| f.avg_ns)
    }

    /// The floor of the hook `program` runs on: its own where one was attached beside it, else
    /// `net_dev_queue`'s.
    pub fn floor_of(&self, program: &str) -> f64 {
        let hook = crate::probe::backend::probes::PROBES
            .iter()
            .find(|p| p.prog == program)
            .map(|p| p.target);
        hook.and_then(|h| {
            self.floors
                .iter()
                .find(|f| f.program.strip_prefix("floor_") == Some(h))
        })
        .map_or_else(|| self.floor_ns(), |f| f.avg_ns)
    }

    /// Mean ns per run over the programs less each one's floor, weighted by their runs.
    pub fn over_floors_ns<'a>(&self, progs: impl Iterator<Item = &'a ProgCost>) -> f64 {
        let (ns, runs) = progs.fold((0.0, 0u64), |(ns, runs), p| {
            let over = p.avg_ns - self.floor_of(&p.program);
            (ns + over * p.runs as f64, runs + p.runs)
        });
        if runs == 0 {
            f64::NAN
        } else {
            ns / runs as f64
        }
    }
}

/// The `n` busiest processes by CPU share (`ps`), as "pcpu% command" lines.
pub(super) fn busiest_processes(n: usize) -> Vec<String> {
    let Ok(out) = Command::new("ps")
        .args(["-eo", "pcpu,comm", "--sort=-pcpu", "--no-headers"])
        .output()
    else {
        return Vec::new();
    };
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .take(n)
        .map(|l| l.trim().to_string())
        .collect()
}
