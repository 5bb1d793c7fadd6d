//! `netpath compare`: per driver, build the lab, run the harness without and then with the
//! probes, and report the per-hop attribution.
use anyhow::{Context as _, Result};

use crate::{
    backend::Backend,
    driver::Driver,
    harness::{self, RrConfig, runmode::RunMode},
    lab,
    lab::netem::{self, WireDelay},
    path::NetPath,
    report::{self, DriverReport},
    tracer::{Tracer, TracerOptions},
};

#[derive(Clone)]
pub struct CompareOptions {
    pub drivers: Vec<Driver>,
    pub rr: RrConfig,
    /// Also run each driver with the probes detached, for the probe effect.
    pub untraced: bool,
    pub tracer: TracerOptions,
    /// Print each driver's table as soon as it is measured.
    pub print: bool,
    /// Also attach the TC packet counters to every lab device (a cross-check; costs ~100 ns
    /// per packet per device).
    pub tc_counters: bool,
    /// Sampled timelines to keep in each report.
    pub keep_timelines: usize,
    /// Repeat the untraced measurements this many times: medians and spread.
    pub rounds: usize,
    /// Bulk throughput per round (None: skip).
    pub bulk: Option<harness::BulkConfig>,
    /// Open-loop burst phases (rate, then each multiplier; None: skip).
    pub burst: Option<(harness::BurstConfig, Vec<f64>)>,
    /// netem on the lab's underlay links (cross-node drivers only; see `lab::netem`).
    pub underlay: Option<WireDelay>,
    /// Wait mode and placement (the tables' runs), and whether to add the blocking line.
    pub mode: RunMode,
}

pub(crate) fn attach_tc(tracer: &mut Tracer, lab: &NetPath) -> Result<()> {
    let namespaces = lab.namespaces();
    for d in &lab.devices {
        let ns = namespaces
            .iter()
            .find(|n| n.name == d.netns)
            .with_context(|| format!("netns {} of {}", d.netns, d.name))?;
        ns.run_here(|| tracer.attach_tc_here(&d.name))?;
    }
    Ok(())
}

pub fn run_driver(
    tracer: &mut Tracer,
    driver: Driver,
    opts: &CompareOptions,
) -> Result<DriverReport> {
    let (lab, wire) = build_lab(driver, opts)?;
    let result = measure(tracer, &lab, opts);
    let torn = lab.teardown();
    let mut r = result?;
    torn?;
    if let Some(c) = r.context.as_mut() {
        c.wire = wire;
    }
    Ok(r)
}

/// Measures one path that already exists: interleaved rounds on it alone (see `rounds`).
pub fn measure(tracer: &mut Tracer, lab: &NetPath, opts: &CompareOptions) -> Result<DriverReport> {
    measure_as(tracer, lab, lab.driver.name(), opts)
}

/// `measure`, the row named `label`.
fn measure_as(
    tracer: &mut Tracer,
    path: &NetPath,
    label: &str,
    opts: &CompareOptions,
) -> Result<DriverReport> {
    let mut out = crate::rounds::run(tracer, &[(path, label.to_string(), opts.rr.proto)], opts)?;
    Ok(out.remove(0))
}

/// Bulk throughput over rounds.
pub(crate) fn bulk_rounds(bulk: &[harness::BulkResult]) -> Option<report::BulkRounds> {
    let first = bulk.first()?;
    Some(report::BulkRounds {
        streams: first.per_stream.len(),
        gbit_per_s: report::Spread::of(bulk.iter().map(|b| b.gbit_per_s).collect()),
        retransmits: report::Spread::of(bulk.iter().map(|b| b.retransmits as f64).collect()),
        per_round: bulk.iter().flat_map(|b| b.per_stream.clone()).collect(),
    })
}

/// The open-loop phases, untraced, in the run's wait mode and placement.
pub(crate) fn burst_phases(
    lab: &NetPath,
    opts: &CompareOptions,
) -> Result<Vec<report::BurstPhase>> {
    let Some((cfg, mult)) = &opts.burst else {
        return Ok(Vec::new());
    };
    let cfg = harness::BurstConfig {
        wait: opts.mode.wait,
        pin: opts.mode.pin,
        ..cfg.clone()
    };
    let us = |ns: u64| ns as f64 / 1000.0;
    Ok(harness::run_burst_phases(lab, &cfg, mult)
        .context("burst run")?
        .into_iter()
        .map(|(m, b)| report::BurstPhase {
            multiplier: m,
            rate: cfg.rate * m,
            scheduled: b.scheduled,
            sent: b.sent,
            completed: b.completed,
            achieved_rate: b.achieved_rate,
            p50_us: us(b.percentile_ns(50.0)),
            p99_us: us(b.percentile_ns(99.0)),
            max_us: us(b.hist.max()),
            p99_uncorrected_us: us(b.uncorrected_percentile_ns(99.0)),
        })
        .collect())
}

/// MTUs, device settings and the TCP counters' change over the whole measurement.
pub(crate) fn run_context(
    lab: &NetPath,
    before: (harness::NetCounters, harness::NetCounters),
    after: (harness::NetCounters, harness::NetCounters),
) -> report::RunContext {
    let devices = harness::device_context(lab).unwrap_or_default();
    let mtu_in = |ns: &str| {
        lab.devices
            .iter()
            .filter(|d| d.netns == ns && d.kind != netpath_common::DevKind::Loopback)
            .map(|d| d.mtu)
            .next()
            .or_else(|| lab.devices.iter().find(|d| d.netns == ns).map(|d| d.mtu))
            .unwrap_or(0)
    };
    report::RunContext {
        client_mtu: mtu_in(&lab.client_ns.name),
        server_mtu: mtu_in(&lab.server_ns.name),
        devices,
        client_counters: after.0.delta(&before.0),
        server_counters: after.1.delta(&before.1),
        wire: None,
    }
}

pub(crate) fn costs(
    before: &[(String, u64, u64)],
    after: &[(String, u64, u64)],
    rtts: u64,
) -> Vec<report::ProgCost> {
    let mut out: Vec<report::ProgCost> = after
        .iter()
        .filter_map(|(name, runs, ns)| {
            let (_, r0, n0) = before.iter().find(|(n, _, _)| n == name)?;
            let runs = runs.saturating_sub(*r0);
            (runs > 0).then(|| report::ProgCost {
                program: name.clone(),
                runs,
                avg_ns: ns.saturating_sub(*n0) as f64 / runs as f64,
                runs_per_rtt: runs as f64 / rtts.max(1) as f64,
            })
        })
        .collect();
    out.sort_by(|a, b| a.program.cmp(&b.program));
    out
}

pub fn run(backend: Backend, opts: &CompareOptions) -> Result<Vec<DriverReport>> {
    if let Some(w) = &opts.underlay {
        check_underlay(w, &opts.drivers)?;
    }
    if let [d] = opts.drivers.as_slice() {
        for p in protos(opts) {
            harness::proto::check(*d, p)?;
        }
    }
    let mut tracer = Tracer::load(backend, &opts.tracer)?;
    // Every lab exists for the whole run: the rounds visit them in turn.
    let mut labs = Vec::new();
    let mut skipped = 0;
    let built = opts.drivers.iter().try_for_each(|d| {
        match build_lab(*d, opts) {
            Ok(l) => labs.push(l),
            Err(e) => skip_or_fail(opts, *d, e, &mut skipped)?,
        }
        Ok::<_, anyhow::Error>(())
    });
    let built = built.and_then(|()| all_skipped(labs.len(), skipped));
    let result = built.and_then(|()| {
        // Several protocols: each driver's lab carries each of them, a row per protocol.
        let paths: Vec<_> = labs
            .iter()
            .flat_map(|(l, _)| rows(l, l.driver.name(), opts))
            .collect();
        crate::rounds::run(&mut tracer, &paths, opts)
    });
    let mut torn = Ok(());
    let mut wires = Vec::new();
    for (l, w) in labs {
        torn = torn.and(l.teardown());
        wires.push(w);
    }
    let mut out = result?;
    torn?;
    let per_lab = protos(opts).len();
    for (i, r) in out.iter_mut().enumerate() {
        if let Some(c) = r.context.as_mut() {
            c.wire = wires[i / per_lab].clone();
        }
    }
    let mut printed = Vec::new();
    for r in out {
        emit(opts, &mut printed, r);
    }
    summarise(opts, &printed);
    Ok(printed)
}

/// A path's rows: one per protocol asked, named `name` (and the protocol when several).
fn rows<'a>(
    path: &'a NetPath,
    name: &str,
    opts: &CompareOptions,
) -> Vec<(&'a NetPath, String, harness::Proto)> {
    let many = !opts.rr.also.is_empty();
    protos(opts)
        .into_iter()
        .map(|p| {
            let label = if many {
                format!("{name} {p}")
            } else {
                name.to_string()
            };
            (path, label, p)
        })
        .collect()
}

/// The protocols of this run, in the order asked.
fn protos(opts: &CompareOptions) -> Vec<harness::Proto> {
    std::iter::once(opts.rr.proto)
        .chain(opts.rr.also.iter().copied())
        .collect()
}

/// One driver's lab, with the emulated wire when asked (and its description).
fn build_lab(driver: Driver, opts: &CompareOptions) -> Result<(NetPath, Option<String>)> {
    for p in protos(opts) {
        harness::proto::check(driver, p)?;
    }
    let lab = lab::build(driver)?;
    let wire = match &opts.underlay {
        Some(w) => netem::delay_wire(&lab, w),
        None => Ok(None),
    };
    match wire {
        Ok(w) => Ok((lab, w)),
        Err(e) => {
            let _ = lab.teardown();
            Err(e)
        }
    }
}

/// A driver this machine cannot build (a kernel without ipvlan or netkit, a lab-only driver
/// asked of Docker) skips its row with one line when other drivers were asked too; asked
/// alone, its error is the run's. Any other error fails the run.
fn skip_or_fail(
    opts: &CompareOptions,
    d: Driver,
    e: anyhow::Error,
    skipped: &mut usize,
) -> Result<()> {
    match crate::driver::unavailable(&e) {
        Some(why) if opts.drivers.len() > 1 => {
            eprintln!("skipped {d}: {why}");
            *skipped += 1;
            Ok(())
        }
        _ => Err(e),
    }
}

fn all_skipped(built: usize, skipped: usize) -> Result<()> {
    if built == 0 && skipped > 0 {
        anyhow::bail!("none of the drivers asked for can be built here (see the lines above)");
    }
    Ok(())
}

/// `--underlay-delay` needs a driver with an underlay and a kernel with netem: said in one
/// line before anything is built.
fn check_underlay(w: &WireDelay, drivers: &[Driver]) -> Result<()> {
    if !drivers.iter().any(|d| d.crosses_nodes()) {
        let asked: Vec<&str> = drivers.iter().map(|d| d.name()).collect();
        anyhow::bail!(
            "--underlay-delay ({}) applies to cross-node drivers (overlay, egress, host-egress), \
             and none of {} is one: add -d overlay",
            w.describe(),
            asked.join(", ")
        );
    }
    netem::check_netem(w)
}

/// One driver's result: printed at once when asked (runs are long), then kept.
fn emit(opts: &CompareOptions, out: &mut Vec<DriverReport>, r: DriverReport) {
    if opts.print {
        crate::render::text::driver(&r);
        println!();
    }
    out.push(r);
}

fn summarise(opts: &CompareOptions, out: &[DriverReport]) {
    if opts.print && out.len() > 1 {
        crate::render::text::summary(out);
    }
}

/// `compare --docker`: the same measurement on real Docker networks and containers, and with
/// `with_lab` the embedded lab's version of each driver right after it, so both rows come from
/// one run. Docker rows are named `docker:<driver>`.
pub fn run_docker(
    backend: Backend,
    opts: &CompareOptions,
    engine: &crate::docker::Engine,
    with_lab: bool,
) -> Result<Vec<DriverReport>> {
    let check = |d: Driver| -> Result<()> {
        for p in protos(opts) {
            harness::proto::check_docker(d, p)?;
        }
        Ok(())
    };
    if let [d] = opts.drivers.as_slice() {
        check(*d)?;
    }
    let mut tracer = Tracer::load(backend, &opts.tracer)?;
    let mut out = Vec::new();
    let mut skipped = 0;
    for d in &opts.drivers {
        if let Err(e) = check(*d) {
            skip_or_fail(opts, *d, e, &mut skipped)?;
            continue;
        }
        let dl = match crate::docker::DockerLab::build(engine, *d, &Default::default()) {
            Ok(dl) => dl,
            Err(e) => {
                let e = e.context(format!("building the Docker {d} network"));
                skip_or_fail(opts, *d, e, &mut skipped)?;
                continue;
            }
        };
        // With the lab: both built, their rounds interleaved.
        let lab = if with_lab {
            match build_lab(*d, opts) {
                Ok(l) => Some(l),
                Err(e) => {
                    let _ = dl.teardown();
                    return Err(e);
                }
            }
        } else {
            None
        };
        let mut paths = rows(&dl.path, &format!("docker:{}", d.name()), opts);
        if let Some((l, _)) = &lab {
            paths.extend(rows(l, d.name(), opts));
        }
        let r = crate::rounds::run(&mut tracer, &paths, opts);
        drop(paths);
        let torn_lab = lab.map(|(l, _)| l.teardown()).unwrap_or(Ok(()));
        let torn = dl.teardown();
        let r = r.with_context(|| format!("measuring Docker {d}"))?;
        torn?;
        torn_lab?;
        for x in r {
            emit(opts, &mut out, x);
        }
    }
    all_skipped(out.len(), skipped)?;
    summarise(opts, &out);
    Ok(out)
}

/// `compare --between A B`: the harness between two running containers (client in A, server
/// in B), traced on their paths only, in one row named after them.
pub fn run_between(
    backend: Backend,
    opts: &CompareOptions,
    engine: &crate::docker::Engine,
    client: &str,
    server: &str,
) -> Result<Vec<DriverReport>> {
    // Resolve the containers first: a typo fails before any program is loaded.
    let b = crate::docker::between(engine, client, server)?;
    for p in protos(opts) {
        harness::proto::check_docker(b.path.driver, p)?;
    }
    let mut tracer = Tracer::load(backend, &opts.tracer)?;
    let r = crate::rounds::run(&mut tracer, &rows(&b.path, &b.label, opts), opts)
        .with_context(|| format!("measuring {client} → {server}"))?;
    let mut out = Vec::new();
    for x in r {
        emit(opts, &mut out, x);
    }
    summarise(opts, &out);
    Ok(out)
}
