//! `netpath validate`: does a known delay come back at the right hop? A TC program holds each
//! data packet on one lab device for an exact time D (a busy wait on the clock,
//! `tracer::delay`); rounds interleave every D on the same lab, each with an untraced and a
//! traced run, and each D's hop table is compared with D = 0's of the same round. Medians, not
//! means: every packet is held, so the whole distribution shifts by D, while a mean moves
//! with every descheduled spinner of a busy machine. The hop the device's receive leads into
//! must grow by D, every other hop stay within its noise, and the untraced round trip grow by
//! D.
//!
//! `--rules`/`--chain` (`rules`) does the same for netfilter: a known rule set's cost must come
//! back at its part.
use std::collections::BTreeMap;

use anyhow::{Context as _, Result, bail};
use serde::Serialize;

use crate::{
    driver::Driver,
    harness::{self, NoPhases, RrConfig},
    lab,
    measure::interleave::CompareOptions,
    path::{Device, NetPath},
    probe::tracer::Tracer,
    record::{DriverReport, Spread},
};

pub mod rules;
mod table;

pub use rules::{Chain, RuleCase};

/// Packets shorter than this are not held (pure ACKs, ARP): the requests netpath sends are.
const MIN_LEN: u64 = 200;

/// Where the delay is injected.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, clap::ValueEnum, schemars::JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum At {
    /// The server's interface, on receive: requests, in `receiver-stack`.
    Server,
    /// The client's interface, on receive: responses, in `receiver-stack`.
    Client,
    /// The bridge port of the client's veth, on receive: requests, in `bridge` (drivers with a
    /// bridge port).
    BridgePort,
}

impl At {
    /// The direction whose packets are held and the hop the delay lands in.
    pub fn expect(self) -> (&'static str, &'static str) {
        match self {
            At::Server => ("request", "receiver-stack"),
            At::Client => ("response", "receiver-stack"),
            At::BridgePort => ("request", "bridge"),
        }
    }

    /// The device on `path` (None: this driver has none).
    pub fn device(self, path: &NetPath) -> Option<&Device> {
        let own = |ns: &str| {
            let mut d = path.devices.iter().filter(|d| d.netns == ns);
            d.clone()
                .find(|d| d.kind != netpath_common::DevKind::Loopback)
                .or_else(|| d.next())
        };
        match self {
            At::Server => own(&path.server_ns.name),
            At::Client => own(&path.client_ns.name),
            At::BridgePort => path
                .devices
                .iter()
                .find(|d| d.kind == netpath_common::DevKind::BridgePort),
        }
    }
}

/// What `validate` measures with.
#[derive(Clone)]
pub struct ValidateOptions {
    pub drivers: Vec<Driver>,
    /// Injected delays, µs (0 is added when missing: the reference).
    pub delays_us: Vec<f64>,
    pub at: At,
    /// The netfilter case instead of the delays: rule counts (0 added: the reference) and
    /// the chain they go in.
    pub rules: Option<(Chain, Vec<usize>)>,
    pub compare: CompareOptions,
}

/// A case's pass or fail, and why it failed.
#[derive(Clone, Debug, Default, Serialize, schemars::JsonSchema)]
pub struct Verdict {
    pub pass: bool,
    pub failed: Vec<String>,
}

/// One driver at one injected delay, against D = 0 of the same rounds.
#[derive(Clone, Debug, Serialize, schemars::JsonSchema)]
pub struct Case {
    pub driver: String,
    pub device: String,
    pub hop: &'static str,
    #[schemars(schema_with = "crate::record::schema_parts::dir")]
    pub dir: &'static str,
    /// The delay asked for.
    pub injected_us: f64,
    /// What the delay program measured it held a packet, mean (from its first clock read to
    /// its last: at least the delay asked, up to a clock read more).
    pub held_us: f64,
    /// The change of the injected hop's p50 (netpath's own time taken out), median of the
    /// per-round changes.
    pub recovered_us: f64,
    /// `recovered_us − held_us`.
    pub error_us: f64,
    /// Its spread over rounds.
    pub recovered_spread: Spread,
    /// The hop whose p50 changed most after the injected one, and by how much.
    pub largest_other_hop: String,
    pub largest_other_us: f64,
    /// Untraced RTT p50 change, median of the per-round changes.
    pub untraced_rtt_delta_us: f64,
    /// Packets the delay program held over the whole run at this delay.
    pub held: u64,
}

/// `validate`'s result.
#[derive(Clone, Debug, Serialize, schemars::JsonSchema)]
pub struct ValidateOutput {
    /// Where the delays were held (none with `--rules`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub at: Option<At>,
    pub rounds: usize,
    pub requests: u64,
    /// ns charged per netpath program run in the compensated figures.
    pub run_cost_ns: f64,
    /// The delay cases (none with `--rules`).
    pub cases: Vec<Case>,
    /// With `--rules`: the chain the rules went in, and a case per driver and rule count.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub chain: Option<Chain>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub rule_cases: Vec<RuleCase>,
}

/// One driver's runs at one delay, per round.
#[derive(Default)]
struct Runs {
    traced: Vec<DriverReport>,
    untraced_p50_us: Vec<f64>,
    held: u64,
    held_ns: u64,
}

pub fn run(tracer: &mut Tracer, o: &ValidateOptions) -> Result<ValidateOutput> {
    let mut delays = o.delays_us.clone();
    if !delays.contains(&0.0) {
        delays.insert(0, 0.0);
    }
    check(&delays)?;
    let counts = o
        .rules
        .as_ref()
        .map(|(_, n)| rules::counts(n))
        .transpose()?;
    let mut compare = o.compare.clone();
    // The netfilter case reads its cost at a part: the traced runs link the parts.
    compare.parts |= o.rules.is_some();
    let (mut cases, mut rule_cases) = (Vec::new(), Vec::new());
    for &driver in &o.drivers {
        let lab = lab::build(driver)?;
        let result = match (&o.rules, &counts) {
            (Some((chain, _)), Some(counts)) => {
                rules::measure_driver(tracer, &lab, *chain, counts, &compare)
                    .map(|c| rule_cases.extend(c))
            }
            _ => measure_driver(tracer, &lab, o, &delays).map(|c| cases.extend(c)),
        };
        let torn = lab.teardown();
        result.with_context(|| format!("validating {driver}"))?;
        torn?;
    }
    Ok(ValidateOutput {
        at: o.rules.is_none().then_some(o.at),
        rounds: o.compare.rounds.max(1),
        requests: o.compare.rr.requests,
        run_cost_ns: tracer.run_cost.ns,
        cases,
        chain: o.rules.as_ref().map(|(c, _)| *c),
        rule_cases,
    })
}

/// The longest delay the program holds a packet for, µs (`--delays` is bounded by it at parse
/// time).
pub const MAX_DELAY_US: f64 = 50.0;

/// The delays the program can hold, for callers of the library: said before anything is
/// loaded or built.
fn check(delays: &[f64]) -> Result<()> {
    if let Some(d) = delays.iter().find(|d| !(0.0..=MAX_DELAY_US).contains(*d)) {
        bail!("--delays {d} µs: use delays from 0 to {MAX_DELAY_US} µs");
    }
    Ok(())
}

/// Every delay on one lab, interleaved in rounds (the order reversed every other round).
fn measure_driver(
    tracer: &mut Tracer,
    lab: &NetPath,
    o: &ValidateOptions,
    delays: &[f64],
) -> Result<Vec<Case>> {
    let Some(dev) = o.at.device(lab).cloned() else {
        bail!(
            "{} has no {:?} device to inject a delay at: use --at server",
            lab.driver,
            o.at
        );
    };
    let ns = if dev.netns == lab.client_ns.name {
        &lab.client_ns
    } else if dev.netns == lab.server_ns.name {
        &lab.server_ns
    } else {
        lab.node_ns
            .as_ref()
            .context("the delay device's namespace")?
    };
    ns.run_here(|| tracer.attach_delay_here(&dev.name))?;
    let result = rounds(tracer, lab, o, delays);
    tracer.detach_delay();
    let _ = tracer.set_delay(0, MIN_LEN);
    let runs = result?;
    Ok(cases(lab, &dev, o.at, delays, &runs))
}

fn rounds(
    tracer: &mut Tracer,
    lab: &NetPath,
    o: &ValidateOptions,
    delays: &[f64],
) -> Result<Vec<Runs>> {
    let opts = &o.compare;
    let rr = RrConfig {
        load: opts.rr.clone(),
        wait: opts.mode.wait,
        pin: opts.mode.pin,
        ..RrConfig::default()
    };
    let mut runs: Vec<Runs> = delays.iter().map(|_| Runs::default()).collect();
    let bar = crate::progress::Bar::new(lab.driver.name(), opts.rounds.max(1) as u64);
    for r in 0..opts.rounds.max(1) {
        bar.phase(format!("round {}/{}", r + 1, opts.rounds.max(1)));
        let order: Vec<usize> = if r % 2 == 0 {
            (0..delays.len()).collect()
        } else {
            (0..delays.len()).rev().collect()
        };
        for i in order {
            tracer.set_delay((delays[i] * 1000.0).round() as u64, MIN_LEN)?;
            let (held, held_ns) = tracer.delay_held()?;
            let label = format!("{} +{} µs", lab.driver, delays[i]);
            let (u, t) = untraced_then_traced(tracer, lab, &label, opts, &rr)?;
            runs[i].untraced_p50_us.push(u);
            runs[i].traced.push(t);
            let (h, h_ns) = tracer.delay_held()?;
            runs[i].held += h.saturating_sub(held);
            runs[i].held_ns += h_ns.saturating_sub(held_ns);
        }
        bar.done();
    }
    bar.finish();
    Ok(runs)
}

/// Compensated p50 of every (direction, hop) of one traced run.
/// One arm's pair of runs, as every validate case takes them: untraced (its RTT p50, µs),
/// then traced (its record, labelled `label`).
pub(super) fn untraced_then_traced(
    tracer: &mut Tracer,
    lab: &NetPath,
    label: &str,
    opts: &CompareOptions,
    rr: &RrConfig,
) -> Result<(f64, DriverReport)> {
    tracer.detach()?;
    let u = harness::run_rr(lab, rr, &NoPhases).context("untraced run")?;
    let t = crate::measure::interleave::traced(tracer, lab, label, opts, rr)?;
    Ok((u.percentile_ns(50.0) as f64 / 1000.0, t))
}

pub(super) fn hops_of(r: &DriverReport) -> BTreeMap<(&'static str, &'static str), f64> {
    r.hops
        .iter()
        .map(|h| ((h.at.dir, h.at.hop), h.compensated_p50_us))
        .collect()
}

fn cases(lab: &NetPath, dev: &Device, at: At, delays: &[f64], runs: &[Runs]) -> Vec<Case> {
    let (dir, hop) = at.expect();
    let base = &runs[0];
    delays
        .iter()
        .zip(runs)
        .map(|(&d, run)| {
            // Per round: every hop's change against D = 0 of the same round.
            let deltas: Vec<BTreeMap<_, f64>> = run
                .traced
                .iter()
                .zip(&base.traced)
                .map(|(t, b)| {
                    let (t, b) = (hops_of(t), hops_of(b));
                    let keys = t.keys().chain(b.keys()).copied().collect::<Vec<_>>();
                    keys.into_iter()
                        .map(|k| (k, t.get(&k).unwrap_or(&0.0) - b.get(&k).unwrap_or(&0.0)))
                        .collect()
                })
                .collect();
            let median = |k: (&str, &str)| {
                Spread::of(deltas.iter().map(|m| *m.get(&k).unwrap_or(&0.0)).collect())
            };
            let recovered = median((dir, hop));
            let mut others: Vec<((&str, &str), f64)> = deltas
                .iter()
                .flat_map(|m| m.keys().copied())
                .filter(|k| *k != (dir, hop))
                .map(|k| (k, median(k).median))
                .collect();
            others.sort_by(|a, b| b.1.abs().total_cmp(&a.1.abs()));
            let (other, other_us) = others
                .first()
                .map(|((d, h), v)| (format!("{h} ({d})"), *v))
                .unwrap_or_default();
            let rtt = Spread::of(
                run.untraced_p50_us
                    .iter()
                    .zip(&base.untraced_p50_us)
                    .map(|(a, b)| a - b)
                    .collect(),
            );
            let held_us = if run.held > 0 {
                run.held_ns as f64 / run.held as f64 / 1000.0
            } else {
                0.0
            };
            Case {
                driver: lab.driver.name().to_string(),
                device: format!("{}@{}", dev.name, dev.netns),
                hop,
                dir,
                injected_us: d,
                held_us,
                recovered_us: recovered.median,
                error_us: recovered.median - held_us,
                recovered_spread: recovered,
                largest_other_hop: other,
                largest_other_us: other_us,
                untraced_rtt_delta_us: rtt.median,
                held: run.held,
            }
        })
        .collect()
}
