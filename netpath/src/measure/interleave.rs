//! Interleaved rounds: every path is measured in every round, in turn, so that drift in the
//! machine's state (idle states, a neighbour's load, the hypervisor) hits every driver alike.
//!
//! Round `r` visits the paths in order (reversed every other round) and on each runs the
//! untraced and the traced request/response (which first alternates too). Ratios between two
//! drivers are taken per round, between runs that were neighbours in time, and summarised by
//! their median and spread (`record::rounds`, with the per-round records). A round whose `wakeup` p50 moved away from the other rounds' by
//! more than the whole data path is marked a mode change: the machine, not the driver, moved.
use anyhow::{Context as _, Result};

use crate::sys::runmode::RunMode;
use crate::{
    driver::Driver,
    harness::{self, NoPhases, Proto, RrConfig, RrLoad, RrResult, WaitMode},
    lab::netem::WireDelay,
    path::NetPath,
    probe::tracer::{Tracer, TracerOptions},
    record::{
        self, DriverReport, HopFigures, Spread,
        per_round::{RoundPasses, RoundRow},
    },
    sys::machine::{CpuTimes, MachineState},
};

/// The options of a measured run: `compare`'s (which re-exports it), each side's of `tune`,
/// `diff`'s live run. They live with the rounds that read them.
#[derive(Clone)]
pub struct CompareOptions {
    pub drivers: Vec<Driver>,
    /// What the request/response runs send, in the order asked: each in the same interleaved
    /// rounds, a row per path and protocol (each run's `RrConfig::proto` is set from this).
    pub protos: Vec<Proto>,
    /// What each request/response run sends; how it waits and where it runs are `mode`'s.
    pub rr: RrLoad,
    /// Also run each driver with the probes detached, for the probe effect.
    pub untraced: bool,
    pub tracer: TracerOptions,
    /// Also attach the TC packet counters to every lab device (a cross-check; costs ~100 ns
    /// per packet per device).
    pub tc_counters: bool,
    /// Netfilter parts: boundary programs around the base chains of each namespace of the
    /// path (`path::parts`), linked for the traced runs.
    pub parts: bool,
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

impl CompareOptions {
    /// The protocol of the first row (the tracer loads for it).
    pub fn proto(&self) -> Proto {
        self.protos.first().copied().unwrap_or_default()
    }

    /// The tracer's options, loaded for the first row's protocol.
    pub fn tracer(&self) -> TracerOptions {
        TracerOptions {
            proto: self.proto(),
            parts: self.parts,
            ..self.tracer.clone()
        }
    }

    /// `--proto a,b,…`, each asked once; each is checked against the sizes before anything is
    /// built (and against each driver's path, lab or Docker, before that driver's is). Bulk
    /// and burst are TCP phases: without TCP they go.
    pub fn set_protos(&mut self, asked: &[Proto]) -> Result<()> {
        self.protos.clear();
        for p in asked {
            if !self.protos.contains(p) {
                self.protos.push(*p);
            }
        }
        if self.protos.is_empty() {
            self.protos.push(Proto::Tcp);
        }
        for p in &self.protos {
            harness::supported::check_sizes(*p, self.rr.req_size, self.rr.resp_size)?;
        }
        if !self.protos.contains(&Proto::Tcp) {
            self.bulk = None;
            self.burst = None;
        }
        Ok(())
    }
}

/// The client's and the server's TCP counters.
type Counters = (harness::NetCounters, harness::NetCounters);

/// Accumulated runs of one path.
#[derive(Default)]
struct Acc {
    untraced: Vec<RrResult>,
    traced: Vec<DriverReport>,
    bulk: Vec<harness::BulkResult>,
    /// Each round's untraced run in the round's sweep (beside the other paths' runs: what
    /// ratios pair), and the machine's speed just before it (`harness::speed`), µs.
    sweep: Vec<RrResult>,
    probes: Vec<Option<f64>>,
    /// The blocking runs of the same rounds (`RunMode::also_block`), and its sweep's.
    block_untraced: Vec<RrResult>,
    block_sweep: Vec<RrResult>,
    block_traced: Vec<DriverReport>,
    /// What the side's own turns moved the counters by (sides may share a path).
    counters: Counters,
}

fn counters_of(path: &NetPath) -> Result<Counters> {
    Ok((
        harness::read_counters(&path.client_ns)?,
        harness::read_counters(&path.server_ns)?,
    ))
}

impl Acc {
    /// Runs `turn` and adds what it moved the path's counters by to this side's.
    fn counted(&mut self, path: &NetPath, turn: impl FnOnce(&mut Acc) -> Result<()>) -> Result<()> {
        let before = counters_of(path)?;
        turn(self)?;
        let after = counters_of(path)?;
        self.counters = (
            self.counters.0.plus(&after.0.delta(&before.0)),
            self.counters.1.plus(&after.1.delta(&before.1)),
        );
        Ok(())
    }
}

/// Runs `opts.rounds` interleaved rounds over `paths` (label, path), then per path its burst
/// phases; one report per path, in `paths` order.
pub fn run(
    tracer: &mut Tracer,
    paths: &[(&NetPath, String, Proto)],
    opts: &CompareOptions,
) -> Result<Vec<DriverReport>> {
    let sides: Vec<Side> = paths
        .iter()
        .map(|(path, label, proto)| Side {
            path,
            label: label.clone(),
            proto: *proto,
            opts,
            enter: None,
        })
        .collect();
    run_sides(tracer, &sides)
}

/// One path of an interleaved run with the options it is measured with. `compare` gives every
/// path the same options (and, with `--proto a,b`, each path its protocol); `tune` gives its
/// two sides two settings of a harness knob (wait mode, placement, TCP_NODELAY), or one path
/// and a change made before each side's turns (`enter`). The rounds (count and order) follow
/// the first side's.
pub struct Side<'a> {
    pub path: &'a NetPath,
    pub label: String,
    pub proto: Proto,
    pub opts: &'a CompareOptions,
    /// Called before each of this side's turns (its runs in a round, then its blocking and
    /// burst runs if any): puts the machine in this side's state. Sides may share one path,
    /// so it is called before every turn, also when the previous turn was this side's: it
    /// decides itself whether anything needs doing. An error ends the run.
    pub enter: Option<&'a dyn Fn() -> Result<()>>,
}

/// [`run`] with options per path.
pub fn run_sides(tracer: &mut Tracer, sides: &[Side]) -> Result<Vec<DriverReport>> {
    let n = sides.len();
    let Some(first) = sides.first() else {
        return Ok(Vec::new());
    };
    let t0 = CpuTimes::now();
    let mut acc: Vec<Acc> = (0..n).map(|_| Acc::default()).collect();
    let rrs: Vec<RrConfig> = sides
        .iter()
        .map(|s| RrConfig {
            load: s.opts.rr.clone(),
            wait: s.opts.mode.wait,
            pin: s.opts.mode.pin,
            proto: s.proto,
        })
        .collect();
    let rounds = first.opts.rounds.max(1);
    // On a terminal: a bar per path, stepping through the interleaved rounds.
    let bars: Vec<_> = sides
        .iter()
        .map(|s| crate::progress::Bar::new(&s.label, rounds as u64))
        .collect();
    // Request/response rounds first, then the bulk rounds: a round of short runs keeps the
    // runs a ratio pairs seconds apart, where a bulk phase between them would let the
    // machine change state (a vCPU's speed here moved 2× on a scale of tens of seconds).
    for r in 0..rounds {
        sweep(sides, &rrs, r, &mut acc)?;
        for i in round_order(r, n) {
            let s = &sides[i];
            bars[i].phase(format!("interleaved round {}/{rounds}", r + 1));
            crate::sys::pmqos::apply(s.opts.mode.idle)?;
            enter(s).with_context(|| format!("{}, round {}", s.label, r + 1))?;
            acc[i]
                .counted(s.path, |a| {
                    one_round(tracer, s.path, &s.label, s.opts, &rrs[i], r % 2 == 1, a)
                })
                .with_context(|| format!("{}, round {}", s.label, r + 1))?;
            bars[i].done();
        }
    }
    for r in 0..rounds {
        for i in round_order(r, n) {
            let s = &sides[i];
            // Bulk is a TCP stream: measured with the TCP entry of an interleaved run.
            let Some(b) = s.opts.bulk.as_ref().filter(|_| s.proto == Proto::Tcp) else {
                continue;
            };
            bars[i].phase(format!("bulk round {}/{rounds}", r + 1));
            enter(s).with_context(|| format!("{}, bulk round {}", s.label, r + 1))?;
            acc[i]
                .counted(s.path, |a| {
                    a.bulk
                        .push(harness::run_bulk(s.path, b).context("bulk run")?);
                    Ok(())
                })
                .with_context(|| format!("{}, bulk round {}", s.label, r + 1))?;
        }
    }
    bars.iter().for_each(|b| b.finish());
    let mut out = Vec::with_capacity(n);
    for (i, a) in acc.into_iter().enumerate() {
        let s = &sides[i];
        // (Named after its side already: each round's traced report is built with its label.)
        let rep = finish(tracer, s, a, t0).with_context(|| format!("finishing {}", s.label))?;
        out.push(rep);
    }
    Ok(out)
}

/// A round's sweep (several paths, untraced runs asked): every path's untraced run back to
/// back, then every path's blocking one, each after a probe of the machine's speed. A ratio
/// pairs two paths' sweep runs, a second or two apart, where the paths' whole turns lie up to
/// a round apart: this machine changed its speed on a scale of seconds.
fn sweep(sides: &[Side], rrs: &[RrConfig], r: usize, acc: &mut [Acc]) -> Result<()> {
    if sides.len() < 2 || !sides.iter().all(|s| s.opts.untraced) {
        return Ok(());
    }
    let order = round_order(r, sides.len());
    for &i in &order {
        let s = &sides[i];
        crate::sys::pmqos::apply(s.opts.mode.idle)?;
        enter(s)?;
        // A loaded machine may fail the probe: the round then pairs without it.
        acc[i].probes.push(harness::speed::probe(rrs[i].pin).ok());
        let u = harness::run_rr(s.path, &rrs[i], &NoPhases)
            .with_context(|| format!("{}, round {}: untraced sweep run", s.label, r + 1))?;
        acc[i].sweep.push(u);
    }
    for &i in &order {
        let s = &sides[i];
        if !s.opts.mode.also_block || rrs[i].wait == WaitMode::Block {
            continue;
        }
        crate::sys::pmqos::apply(s.opts.mode.idle)?;
        enter(s)?;
        let block = RrConfig {
            wait: WaitMode::Block,
            ..rrs[i].clone()
        };
        let u = harness::run_rr(s.path, &block, &NoPhases)
            .with_context(|| format!("{}, round {}: blocking sweep run", s.label, r + 1))?;
        acc[i].block_sweep.push(u);
    }
    Ok(())
}

/// Puts the machine in `s`'s state, if the side says how.
fn enter(s: &Side) -> Result<()> {
    s.enter.map_or(Ok(()), |f| f())
}

fn one_round(
    tracer: &mut Tracer,
    path: &NetPath,
    label: &str,
    opts: &CompareOptions,
    rr: &RrConfig,
    traced_first: bool,
    acc: &mut Acc,
) -> Result<()> {
    let (t, u) = pair_of_runs(tracer, path, label, opts, rr, traced_first)?;
    acc.traced.push(t);
    acc.untraced.extend(u);
    // The blocking runs beside, in the same order: what an application sees, measured in
    // the same rounds so its ratios are paired like the spin ones.
    if opts.mode.also_block && rr.wait != WaitMode::Block {
        let block = RrConfig {
            wait: WaitMode::Block,
            ..rr.clone()
        };
        let quiet = CompareOptions {
            keep_timelines: 0,
            tc_counters: false,
            ..opts.clone()
        };
        let (t, u) = pair_of_runs(tracer, path, label, &quiet, &block, traced_first)
            .context("blocking runs")?;
        acc.block_traced.push(t);
        acc.block_untraced.extend(u);
    }
    Ok(())
}

/// The sides in round `r`'s order: as given, reversed every other round.
fn round_order(r: usize, n: usize) -> Vec<usize> {
    if r.is_multiple_of(2) {
        (0..n).collect()
    } else {
        (0..n).rev().collect()
    }
}

/// A round's traced run and (unless `--no-untraced`) its untraced twin, in the order asked.
fn pair_of_runs(
    tracer: &mut Tracer,
    path: &NetPath,
    label: &str,
    opts: &CompareOptions,
    rr: &RrConfig,
    traced_first: bool,
) -> Result<(DriverReport, Option<RrResult>)> {
    let mut t = None;
    if traced_first {
        t = Some(traced(tracer, path, label, opts, rr)?);
    }
    let mut u = None;
    if opts.untraced {
        tracer.detach()?;
        u = Some(harness::run_rr(path, rr, &NoPhases).context("untraced run")?);
    }
    let t = match t {
        Some(t) => t,
        None => traced(tracer, path, label, opts, rr)?,
    };
    Ok((t, u))
}

/// One traced request/response run on `path`, its report built at once (the tracer's maps are
/// shared by every path).
pub fn traced(
    tracer: &mut Tracer,
    path: &NetPath,
    label: &str,
    opts: &CompareOptions,
    rr: &RrConfig,
) -> Result<DriverReport> {
    tracer.detach()?;
    tracer.set_proto(rr.proto)?;
    tracer.set_devices(&path.devices)?;
    tracer.reset()?;
    tracer.attach()?;
    if opts.tc_counters {
        attach_tc(tracer, path)?;
    }
    let placement = opts.parts.then(|| link_parts(tracer, path)).transpose()?;
    let costs_before = tracer.prog_costs();
    let phases = tracer.tids.clone();
    phases.set_relays(path.proxy_pid.into_iter().collect());
    pin_relay(path, rr)?;
    let res = harness::run_rr(path, rr, phases.as_ref()).context("traced run");
    tracer.detach_tc();
    tracer.unlink_parts();
    tracer.detach()?;
    let res = res?;
    let snap = tracer.snapshot()?;
    let samples = tracer.drain_samples();
    let drops = tracer.drain_drops();
    let prog_costs = if opts.tracer.prog_stats {
        record::costs(&costs_before, &tracer.prog_costs(), res.count)
    } else {
        Vec::new()
    };
    let mut rep = record::build(&record::TracedRun {
        label,
        tracer,
        rr,
        result: &res,
        snap: &snap,
        samples: &samples,
        drops: &drops,
        devices: &path.devices,
        keep_timelines: opts.keep_timelines,
        prog_costs,
    });
    if let Some(p) = &placement {
        let timelines: Vec<_> = (samples.iter())
            .map(|s| record::timeline(s, &path.devices))
            .collect();
        let (nf, qdisc) = (tracer.read_parts()?, tracer.read_qdisc_parts()?);
        rep.parts = record::parts::rows(p, &nf, &qdisc, &timelines);
        rep.parts_via = tracer.parts_via().unwrap_or_default().to_string();
        record::parts::annotate(&mut rep.timelines, p);
    }
    Ok(rep)
}

/// `--parts`: the path's netfilter boundaries placed from its namespaces' rulesets now, and
/// linked; the parts' histograms zeroed.
fn link_parts(tracer: &mut Tracer, path: &NetPath) -> Result<crate::path::parts::Placement> {
    let placement = crate::path::parts::of_path(path)?;
    tracer.clear_parts()?;
    tracer.link_parts(&placement)?;
    Ok(placement)
}

/// The relay netpath started (docker-proxy) runs beside the server.
fn pin_relay(path: &NetPath, rr: &RrConfig) -> Result<()> {
    match path.proxy_pid {
        Some(pid) => crate::sys::runmode::pin_process(pid, rr.pin.server),
        None => Ok(()),
    }
}

pub use crate::record::WAKEUP_PARTS;

/// Mean receive passes and softirq runs per packet of a traced run, per direction.
fn passes_per_packet(t: &DriverReport) -> Vec<RoundPasses> {
    ["request", "response"]
        .into_iter()
        .filter_map(|dir| {
            let rows: Vec<_> = t.passes.iter().filter(|p| p.dir == dir).collect();
            let n: u64 = rows.iter().map(|p| p.packets).sum();
            let per = |f: fn(&record::PassRow) -> u32| {
                rows.iter()
                    .map(|p| f(p) as f64 * p.packets as f64)
                    .sum::<f64>()
                    / n as f64
            };
            (n > 0).then(|| RoundPasses {
                dir,
                rx_passes_per_packet: per(|p| p.rx_passes),
                softirqs_per_packet: per(|p| p.softirq_runs),
            })
        })
        .collect()
}

/// The round's hop figures, its stalls taken out of each.
fn round_hops(t: &DriverReport, stalls: Option<&record::stalls::Stalls>) -> Vec<HopFigures> {
    let mut hops: Vec<HopFigures> = t.hops.iter().map(|h| h.at.clone()).collect();
    if let Some(s) = stalls {
        hops.iter_mut().for_each(|h| h.set_stall(s));
    }
    hops
}

fn round_rows(
    traced: &[DriverReport],
    untraced: &[RrResult],
    sweep: &[RrResult],
    bulk: &[harness::BulkResult],
) -> Vec<RoundRow> {
    let p50 = |u: &RrResult| u.percentile_ns(50.0) as f64 / 1000.0;
    let mut rows: Vec<RoundRow> = traced
        .iter()
        .enumerate()
        .map(|(i, t)| {
            let w = t.wakeup_p50("request");
            let ow = t.one_way.get("request").map(|d| d.p50_us);
            // Each round judged as the picked one is: its stalls out of both sides.
            let stalls = untraced
                .get(i)
                .map(|u| record::stalls::of_round(&t.tails, &u.hist));
            let comp = match &stalls {
                Some(s) => record::own::stall_free_sum(t, s),
                None => record::own::compensated_sum(t),
            };
            let untraced_mean = untraced.get(i).map(|u| {
                record::RttSummary::from_rr(u).mean_us
                    - stalls.as_ref().map_or(0.0, |s| s.untraced.mean_added_us)
            });
            RoundRow {
                round: i + 1,
                // The ratios' figure: the sweep's run where there is one.
                untraced_p50_us: sweep.get(i).or(untraced.get(i)).map(p50),
                traced_p50_us: t.traced.p50_us,
                wakeup_p50_us: w,
                data_path_p50_us: ow.zip(w).map(|(o, w)| (o - w).max(0.0)),
                mode_change: false,
                traced_p99_us: t.traced.p99_us,
                one_way_p50_us: t.one_way.iter().map(|(d, x)| (*d, x.p50_us)).collect(),
                hops: round_hops(t, stalls.as_ref()),
                passes: passes_per_packet(t),
                parts: t.parts.clone(),
                bulk_gbit_per_s: bulk.get(i).map(|b| b.gbit_per_s),
                consistency_error_pct: record::own::round_error_pct(comp, untraced_mean),
                compensated_sum_us: comp,
                untraced_mean_us: untraced_mean,
                machine_speed_us: None,
            }
        })
        .collect();
    mark_mode_changes(&mut rows);
    rows
}

/// Marks each round whose wakeup p50 differs from the rounds' median wakeup p50 (the median
/// of all rounds: with three rounds, the mean of the two others would follow an outlier) by
/// more than the median data path.
pub fn mark_mode_changes(rows: &mut [RoundRow]) {
    let data: Vec<f64> = rows.iter().filter_map(|r| r.data_path_p50_us).collect();
    let wakeups: Vec<f64> = rows.iter().filter_map(|r| r.wakeup_p50_us).collect();
    if wakeups.len() < 2 || data.is_empty() {
        return;
    }
    let data = Spread::of(data).median;
    let typical = Spread::of(wakeups).median;
    for r in rows.iter_mut() {
        if let Some(w) = r.wakeup_p50_us {
            r.mode_change = (w - typical).abs() > data;
        }
    }
}

/// One path's report: the hop tables of the traced round with the median traced p50, the
/// untraced rounds, bulk, burst, the blocking run (default mode) and the machine's state.
fn finish(tracer: &mut Tracer, s: &Side, mut acc: Acc, t0: CpuTimes) -> Result<DriverReport> {
    let (path, proto, opts) = (s.path, s.proto, s.opts);
    let mut rep = picked(
        &acc.traced,
        &acc.untraced,
        &acc.sweep,
        &acc.bulk,
        &acc.probes,
    )?;
    rep.bulk = record::bulk_rounds(&acc.bulk);
    tracer.detach()?;
    if proto == Proto::Tcp && opts.burst.is_some() {
        enter(s)?;
        acc.counted(path, |_| {
            rep.burst = burst_phases(path, opts)?;
            Ok(())
        })?;
    }
    let machine = |wait| MachineState::since(t0, wait, opts.mode.cpus, opts.mode.pin);
    if !acc.block_traced.is_empty() {
        let mut b = picked(
            &acc.block_traced,
            &acc.block_untraced,
            &acc.block_sweep,
            &[],
            &acc.probes,
        )?;
        b.cpus = opts.mode.cpus;
        b.machine = Some(machine(WaitMode::Block));
        rep.block = Some(Box::new(b));
    }
    rep.context = Some(record::run_context(path, Default::default(), acc.counters));
    rep.cpus = opts.mode.cpus;
    rep.machine = Some(machine(opts.mode.wait));
    Ok(rep)
}

/// The record of one wait mode's rounds: the traced round with the median traced p50 (its
/// hop tables), the untraced rounds around it, and every round in brief.
fn picked(
    traced: &[DriverReport],
    untraced: &[RrResult],
    sweep: &[RrResult],
    bulk: &[harness::BulkResult],
    probes: &[Option<f64>],
) -> Result<DriverReport> {
    let mut rows = round_rows(traced, untraced, sweep, bulk);
    for (r, p) in rows.iter_mut().zip(probes) {
        r.machine_speed_us = *p;
    }
    let mut by_p50: Vec<usize> = (0..traced.len()).collect();
    by_p50.sort_by(|a, b| {
        traced[*a]
            .traced
            .p50_us
            .total_cmp(&traced[*b].traced.p50_us)
    });
    let pick = *by_p50
        .get(by_p50.len() / 2)
        .context("no traced run was made")?;
    let mut rep = traced[pick].clone();
    rep.set_rounds(untraced, sweep, pick);
    if let Some(c) = rep.consistency.as_mut() {
        let errors: Vec<f64> = rows
            .iter()
            .filter_map(|r| r.consistency_error_pct)
            .collect();
        c.judge_on_rounds(&errors);
        // The noise the error is read against: the stall-free untraced means' range.
        let means: Vec<f64> = rows.iter().filter_map(|r| r.untraced_mean_us).collect();
        if means.len() > 1 {
            c.untraced_range_pct = Spread::of(means).rel() * 100.0;
        }
    }
    rep.round_detail = rows;
    Ok(rep)
}

/// `--tc-counters`: the TC packet counters on every device of the path, each attached from
/// inside its device's namespace.
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

/// The open-loop phases, untraced, in the run's wait mode and placement.
fn burst_phases(lab: &NetPath, opts: &CompareOptions) -> Result<Vec<record::BurstPhase>> {
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
        .map(|(m, b)| record::BurstPhase {
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

#[cfg(test)]
mod tests {
    use super::*;

    fn row(w: f64, d: f64) -> RoundRow {
        RoundRow {
            round: 0,
            untraced_p50_us: None,
            traced_p50_us: 0.0,
            wakeup_p50_us: Some(w),
            data_path_p50_us: Some(d),
            mode_change: false,
            traced_p99_us: 0.0,
            one_way_p50_us: Default::default(),
            hops: Vec::new(),
            passes: Vec::new(),
            parts: Vec::new(),
            bulk_gbit_per_s: None,
            consistency_error_pct: None,
            compensated_sum_us: None,
            untraced_mean_us: None,
            machine_speed_us: None,
        }
    }

    #[test]
    fn a_wakeup_jump_larger_than_the_data_path_is_a_mode_change() {
        let mut rows = vec![row(3.0, 10.0), row(4.0, 10.0), row(26.0, 11.0)];
        mark_mode_changes(&mut rows);
        let marked: Vec<bool> = rows.iter().map(|r| r.mode_change).collect();
        assert_eq!(marked, vec![false, false, true]);
        let mut rows = vec![row(3.0, 10.0), row(9.0, 10.0)];
        mark_mode_changes(&mut rows);
        assert!(rows.iter().all(|r| !r.mode_change));
    }
}
