//! `netpath compare`: per driver, build the lab, run the harness without and then with the
//! probes, and report the per-hop attribution.
use anyhow::{Context as _, Result};

use crate::{
    backend::Backend,
    driver::Driver,
    harness::{self, NoPhases, RrConfig},
    lab,
    lab::netem::{self, WireDelay},
    path::NetPath,
    report::{self, DriverReport},
    tracer::{Tracer, TracerOptions},
};

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
}

fn attach_tc(tracer: &mut Tracer, lab: &NetPath) -> Result<()> {
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
    let lab = lab::build(driver).with_context(|| format!("building the {} lab", driver.name()))?;
    let wire = match &opts.underlay {
        Some(w) => netem::delay_wire(&lab, w),
        None => Ok(None),
    };
    let result = wire.and_then(|wire| {
        let mut r = measure(tracer, &lab, opts)?;
        if let Some(c) = r.context.as_mut() {
            c.wire = wire;
        }
        Ok(r)
    });
    let torn = lab.teardown();
    let r = result?;
    torn?;
    Ok(r)
}

/// Measures one lab that already exists: untraced run, traced run, report.
pub fn measure(tracer: &mut Tracer, lab: &NetPath, opts: &CompareOptions) -> Result<DriverReport> {
    let driver = lab.driver;
    {
        tracer.set_devices(&lab.devices)?;
        // Untraced measurements first, probes detached: rounds of request/response and bulk,
        // then the burst phases, with the TCP counters of both ends around them.
        tracer.detach()?;
        let before = (
            harness::read_counters(&lab.client_ns)?,
            harness::read_counters(&lab.server_ns)?,
        );
        let mut rounds = Vec::new();
        let mut bulk = Vec::new();
        let mut untraced = None;
        if opts.untraced {
            for _ in 0..opts.rounds.max(1) {
                let r = harness::run_rr(lab, &opts.rr, &NoPhases).context("untraced run")?;
                rounds.push(report::RttSummary::from_rr(&r));
                untraced.get_or_insert(r);
                if let Some(b) = &opts.bulk {
                    bulk.push(harness::run_bulk(lab, b).context("bulk run")?);
                }
            }
        }
        let mut burst = Vec::new();
        if let Some((cfg, mult)) = &opts.burst {
            for (m, b) in harness::run_burst_phases(lab, cfg, mult).context("burst run")? {
                let us = |ns: u64| ns as f64 / 1000.0;
                burst.push(report::BurstPhase {
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
                });
            }
        }
        let after = (
            harness::read_counters(&lab.client_ns)?,
            harness::read_counters(&lab.server_ns)?,
        );
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
        let context = report::RunContext {
            client_mtu: mtu_in(&lab.client_ns.name),
            server_mtu: mtu_in(&lab.server_ns.name),
            devices,
            client_counters: after.0.delta(&before.0),
            server_counters: after.1.delta(&before.1),
            wire: None,
        };
        tracer.reset()?;
        tracer.attach()?;
        if opts.tc_counters {
            attach_tc(tracer, lab)?;
        }
        let costs_before = tracer.prog_costs();
        let phases = tracer.tids.clone();
        phases.set_relays(lab.proxy_pid.into_iter().collect());
        let traced = harness::run_rr(lab, &opts.rr, phases.as_ref()).context("traced run");
        tracer.detach_tc();
        tracer.detach()?;
        let traced = traced?;
        let snap = tracer.snapshot()?;
        let samples = tracer.drain_samples();
        let drops = tracer.drain_drops();
        let mut rep = report::build(
            driver.name(),
            tracer.backend,
            &tracer.missing,
            &traced,
            untraced.as_ref(),
            &snap,
            &samples,
            &drops,
            &lab.devices,
            opts.keep_timelines,
            &tracer.drop_reasons,
        );
        rep.function_probes = tracer.fn_probes.clone();
        rep.uncounted = tracer.uncounted.clone();
        rep.rr = report::RrRounds::of(&rounds);
        rep.probe_effect_below_noise = rep
            .rr
            .as_ref()
            .is_some_and(|rr| rep.traced.p50_us < rr.p50_us.min);
        rep.rounds = rounds;
        if !bulk.is_empty() {
            rep.bulk = Some(report::BulkRounds {
                streams: bulk[0].per_stream.len(),
                gbit_per_s: report::Spread::of(bulk.iter().map(|b| b.gbit_per_s).collect()),
                retransmits: report::Spread::of(
                    bulk.iter().map(|b| b.retransmits as f64).collect(),
                ),
                per_round: bulk.iter().flat_map(|b| b.per_stream.clone()).collect(),
            });
        }
        rep.burst = burst;
        rep.context = Some(context);
        if opts.tracer.prog_stats {
            rep.prog_costs = costs(&costs_before, &tracer.prog_costs(), traced.count);
        }
        Ok(rep)
    }
}

fn costs(
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
    let mut tracer = Tracer::load(backend, &opts.tracer)?;
    let mut out = Vec::new();
    for d in &opts.drivers {
        emit(opts, &mut out, run_driver(&mut tracer, *d, opts)?);
    }
    summarise(opts, &out);
    Ok(out)
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
        report::print(&r);
        println!();
    }
    out.push(r);
}

fn summarise(opts: &CompareOptions, out: &[DriverReport]) {
    if opts.print && out.len() > 1 {
        report::print_summary(out);
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
    let mut tracer = Tracer::load(backend, &opts.tracer)?;
    let mut out = Vec::new();
    for d in &opts.drivers {
        let dl = crate::docker::DockerLab::build(engine, *d, &Default::default())
            .with_context(|| format!("building the Docker {d} network"))?;
        let r = measure(&mut tracer, &dl.path, opts);
        let torn = dl.teardown();
        let mut r = r.with_context(|| format!("measuring Docker {d}"))?;
        torn?;
        r.driver = format!("docker:{}", d.name());
        emit(opts, &mut out, r);
        if with_lab {
            emit(opts, &mut out, run_driver(&mut tracer, *d, opts)?);
        }
    }
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
    let mut tracer = Tracer::load(backend, &opts.tracer)?;
    let mut r = measure(&mut tracer, &b.path, opts)
        .with_context(|| format!("measuring {client} → {server}"))?;
    r.driver = b.label;
    let mut out = Vec::new();
    emit(opts, &mut out, r);
    Ok(out)
}
