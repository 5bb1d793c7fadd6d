//! netpath's own time taken out of the hops, and the check that what is left adds up to the
//! untraced round trip. A hop's own time is what the kernel side counted inside it: the
//! measured tails of the programs that stamped points, and the program runs, each charged the
//! calibrated cost of a run (`tracer::RunCost`). The compensated figures are the raw ones less
//! that; `Consistency` puts their sum beside the untraced RTT of the same round, with the
//! round trip's edges the hops do not cover (the client's syscall entry before its send's
//! point and exit after its receive's), less netpath's own time in them.
use netpath_common::HopStat;
use serde::Serialize;

use super::DriverReport;
use super::stalls::Stalls;
use crate::driver::Driver;

/// netpath's own ns in one crossing of `st`, a run charged `run_ns`: the mean over the
/// crossings whose own time was measured (a sample, `LoadConfig::own_every`); 0 if none was.
pub fn own_per_crossing_ns(st: &HopStat, run_ns: f64) -> f64 {
    if st.own_count == 0 {
        return 0.0;
    }
    (st.own_ns as f64 + st.own_runs as f64 * run_ns) / st.own_count as f64
}

/// Compensated request + response + turnaround against the interleaved untraced round trip.
#[derive(Clone, Debug, Serialize, serde::Deserialize, schemars::JsonSchema)]
pub struct Consistency {
    /// ns charged per program run, calibrated where the tracer was loaded.
    pub run_cost_ns: f64,
    /// Raw mean one-way request + response + turnaround (the traced run's).
    pub raw_sum_us: f64,
    /// netpath's own time in those.
    pub own_us: f64,
    /// The round trip outside every hop (traced RTT mean less the hops' sum: the client's
    /// syscall edges) and netpath's own time in it; None where that was not measured, and
    /// then the sum is the hops' alone.
    pub edges_us: Option<f64>,
    pub edges_own_us: Option<f64>,
    /// Hops and edges, netpath's own time taken out of both.
    pub compensated_sum_us: f64,
    /// The same from p50s: compensated one-way p50s + turnaround p50.
    pub compensated_p50_sum_us: f64,
    pub untraced_mean_us: f64,
    pub untraced_p50_us: f64,
    /// (compensated − untraced) / untraced, percent.
    pub error_mean_pct: f64,
    pub error_p50_pct: f64,
    /// The same sums with the round's stalls taken out of both sides by one rule
    /// (`stalls`): what the check judges.
    pub stall_free_compensated_sum_us: f64,
    pub stall_free_untraced_mean_us: f64,
    pub error_stall_free_pct: f64,
    /// The stall-free compensated sum is within ±`TOLERANCE_PCT` (or ±`TOLERANCE_US`) of
    /// the stall-free untraced mean: in the median of the rounds' errors where there are
    /// three rounds or more (`judged_on`), else in the picked round.
    pub within_tolerance: bool,
    /// "rounds" (the median of every round's error) or "picked round".
    pub judged_on: &'static str,
    /// How far the untraced mean itself moved between the rounds (max − min over median), %:
    /// the noise the error is read against (0 with one round).
    pub untraced_range_pct: f64,
    /// The same error taken in every round (each round's traced run against its own untraced
    /// run), median over the rounds: less at the mercy of one round than `error_mean_pct`,
    /// which is the picked round's. None before the rounds are known.
    pub error_rounds_median_pct: Option<f64>,
}

/// How far the compensated sum may sit from the untraced RTT mean and still agree with it.
pub const TOLERANCE_PCT: f64 = 5.0;
pub const TOLERANCE_US: f64 = 0.3;

impl Consistency {
    /// Judges the check on the rounds' median error once every round's is known (3 or more):
    /// one round's traced and untraced runs seconds apart may straddle a change of the
    /// machine's speed, which the median of three rounds outvotes.
    pub fn judge_on_rounds(&mut self, errors_pct: &[f64]) {
        self.error_rounds_median_pct = crate::sys::stats::median(errors_pct.iter().copied());
        if let (Some(m), true) = (self.error_rounds_median_pct, errors_pct.len() >= 3) {
            let tol_us = TOLERANCE_US / self.stall_free_untraced_mean_us.max(1e-9) * 100.0;
            self.within_tolerance = m.abs() <= TOLERANCE_PCT.max(tol_us);
            self.judged_on = "rounds";
        }
    }
}

fn pct(a: f64, b: f64) -> f64 {
    if b > 0.0 { (a / b - 1.0) * 100.0 } else { 0.0 }
}

/// The check of one driver's record (needs its untraced run of the same round, and that
/// round's stalls where known).
pub fn consistency(
    r: &DriverReport,
    run_cost_ns: f64,
    stalls: Option<&Stalls>,
) -> Option<Consistency> {
    let u = r.untraced.as_ref()?;
    let (raw, own, p50) = sums(r);
    let edges = edges_compensated(r);
    let comp = raw - own + edges;
    let (sf_comp, sf_untraced) = match stalls {
        Some(s) => (
            stall_free_sum(r, s).unwrap_or(comp),
            u.mean_us - s.untraced.mean_added_us,
        ),
        None => (comp, u.mean_us),
    };
    let err = sf_comp - sf_untraced;
    Some(Consistency {
        run_cost_ns,
        raw_sum_us: raw,
        own_us: own,
        edges_us: r.edges_own_us.map(|_| r.unattributed_us),
        edges_own_us: r.edges_own_us,
        compensated_sum_us: comp,
        compensated_p50_sum_us: p50 + edges,
        untraced_mean_us: u.mean_us,
        untraced_p50_us: u.p50_us,
        error_mean_pct: pct(comp, u.mean_us),
        error_p50_pct: pct(p50, u.p50_us),
        stall_free_compensated_sum_us: sf_comp,
        stall_free_untraced_mean_us: sf_untraced,
        error_stall_free_pct: pct(sf_comp, sf_untraced),
        within_tolerance: err.abs() <= (sf_untraced * TOLERANCE_PCT / 100.0).max(TOLERANCE_US),
        judged_on: "picked round",
        untraced_range_pct: r.rr.as_ref().map_or(0.0, |rr| rr.mean_us.rel() * 100.0),
        error_rounds_median_pct: None,
    })
}

/// A traced run's mean one-way request + response + turnaround, netpath's own time in them,
/// and the compensated p50s' sum.
fn sums(r: &DriverReport) -> (f64, f64, f64) {
    let (mut raw, mut own, mut p50) = (0.0, 0.0, 0.0);
    for d in r.one_way.values().chain(r.turnaround.as_ref()) {
        raw += d.mean_us;
        own += d.own_us;
        p50 += d.compensated_p50_us;
    }
    (raw, own, p50)
}

/// The round trip's edges outside every hop, netpath's own time taken out (never below 0);
/// 0 where that time was not measured (the sum is then the hops' alone).
fn edges_compensated(r: &DriverReport) -> f64 {
    r.edges_own_us
        .map_or(0.0, |own| (r.unattributed_us - own).max(0.0))
}

/// A traced run's compensated sum (hops and edges, as in `Consistency`), if it has hops.
pub fn compensated_sum(traced: &DriverReport) -> Option<f64> {
    let (raw, own, _) = sums(traced);
    (raw > 0.0).then(|| raw - own + edges_compensated(traced))
}

/// `compensated_sum` with the round's stalls taken out: of the journeys (one-ways and
/// turnaround) what their stalls added, and of the edges (traced RTT less the journeys) what
/// the RTT's stalls added beyond the journeys' (a stall between the client's syscall and its
/// send lands there).
pub fn stall_free_sum(traced: &DriverReport, s: &Stalls) -> Option<f64> {
    let (raw, own, _) = sums(traced);
    (raw > 0.0).then(|| stall_free(raw, own, traced.unattributed_us, traced.edges_own_us, s))
}

/// The stall-free compensated sum from a traced run's figures: its journeys' raw sum and
/// netpath's own time in them, the round trip outside them and netpath's own time there
/// (None: not measured, the sum is the journeys' alone), and its stalls.
pub fn stall_free(
    raw_us: f64,
    own_us: f64,
    unattributed_us: f64,
    edges_own_us: Option<f64>,
    s: &Stalls,
) -> f64 {
    let edges = match edges_own_us {
        Some(o) => {
            let outside = unattributed_us - s.traced.mean_added_us + s.journeys_added_us;
            (outside - o).max(0.0)
        }
        None => 0.0,
    };
    raw_us - s.journeys_added_us - own_us + edges
}

/// One round's error: its compensated sum against its untraced RTT mean, %.
pub fn round_error_pct(compensated: Option<f64>, untraced_mean_us: Option<f64>) -> Option<f64> {
    let (c, u) = (compensated?, untraced_mean_us?);
    (u > 0.0).then(|| pct(c, u))
}

/// The driver a driver is measured against: the first of its facts' `references` that was
/// measured, else none (a name no driver has, from another netpath, has none either).
pub fn default_reference<'a>(driver: &str, measured: &[&'a str]) -> Option<&'a str> {
    let d = Driver::ALL.into_iter().find(|d| d.name() == driver)?;
    (d.facts().references.iter()).find_map(|r| measured.iter().copied().find(|m| *m == r.name()))
}

/// Why a driver's hops did not add up, from what was measured, and what to do: one line.
pub fn why_missed(r: &DriverReport, c: &Consistency) -> String {
    let judged = match (c.judged_on, c.error_rounds_median_pct) {
        ("rounds", Some(m)) => format!("{m:+.1}% (median of the rounds)"),
        _ => format!("{:+.1}%", c.error_stall_free_pct),
    };
    let head = format!("{}: hops {judged} off the untraced RTT mean", r.driver);
    let tol = TOLERANCE_PCT;
    let machine = r.machine.as_ref().map_or(String::new(), |m| {
        format!(" (busy {:.0}%, steal {:.1}%)", m.busy_pct, m.steal_pct)
    });
    let own_share = if c.raw_sum_us > 0.0 {
        c.own_us / c.raw_sum_us * 100.0
    } else {
        0.0
    };
    match c.error_rounds_median_pct {
        Some(m) if m.abs() <= tol => format!(
            "{head} in the picked round, {m:+.1}% over the rounds' median: round-to-round noise \
             (the stall-free untraced mean moved {:.1}% between rounds); more --rounds narrow it",
            c.untraced_range_pct
        ),
        _ if c.untraced_range_pct > tol => format!(
            "{head}; the stall-free untraced mean itself moved {:.1}% between rounds: the \
             machine was not steady{machine}; run on a quiet machine",
            c.untraced_range_pct
        ),
        Some(m) => format!(
            "{head} in most rounds (median {m:+.1}%): tracing slows this path beyond the \
             programs' own time ({own_share:.0}% of the traced sum, charged {:.0} ns a run), in \
             the kernel's code around them; read its hops as {m:+.1}% high",
            c.run_cost_ns
        ),
        None => format!("{head} (one round: no median to tell noise from a bias; --rounds 3)"),
    }
}

/// A difference between two drivers, compensated hops against untraced RTTs.
#[derive(Clone, Debug, Serialize, schemars::JsonSchema)]
pub struct PairCheck {
    pub driver: String,
    pub reference: String,
    /// Untraced RTT mean difference (driver − reference), µs.
    pub untraced_delta_us: f64,
    /// Compensated sums' difference, µs.
    pub compensated_delta_us: f64,
    /// Raw hop sums' difference, µs.
    pub raw_delta_us: f64,
    pub within_tolerance: bool,
    /// The untraced difference's range over the rounds (max − min of each round's
    /// difference), µs: how far the figure checked against moved by itself.
    pub untraced_delta_range_us: f64,
    /// (compensated − untraced difference) taken in every round, each from that round's own
    /// traced and untraced runs, median over the rounds, µs: less at the mercy of one round
    /// than the picked round's. None without rounds.
    pub error_rounds_median_us: Option<f64>,
}

/// How far a compensated difference may sit from the untraced one.
pub const PAIR_TOLERANCE_US: f64 = 0.3;

/// Every driver against its reference.
pub fn pair_checks(reports: &[DriverReport]) -> Vec<PairCheck> {
    let names: Vec<&str> = reports.iter().map(|r| r.driver.as_str()).collect();
    reports
        .iter()
        .filter_map(|r| {
            let reference = default_reference(&r.driver, &names)?;
            let b = reports.iter().find(|x| x.driver == reference)?;
            let (ca, cb) = (r.consistency.as_ref()?, b.consistency.as_ref()?);
            let untraced = ca.untraced_mean_us - cb.untraced_mean_us;
            let comp = ca.compensated_sum_us - cb.compensated_sum_us;
            Some(PairCheck {
                driver: r.driver.clone(),
                reference: reference.to_string(),
                untraced_delta_us: untraced,
                compensated_delta_us: comp,
                raw_delta_us: ca.raw_sum_us - cb.raw_sum_us,
                within_tolerance: (comp - untraced).abs() <= PAIR_TOLERANCE_US,
                untraced_delta_range_us: delta_range(r, b),
                error_rounds_median_us: rounds_delta_error(r, b),
            })
        })
        .collect()
}

/// Median over the rounds of (compensated difference − untraced difference), each round's
/// from its own runs.
fn rounds_delta_error(a: &DriverReport, b: &DriverReport) -> Option<f64> {
    let per_round = (a.round_detail.iter().zip(&b.round_detail)).filter_map(|(x, y)| {
        let comp = x.compensated_sum_us? - y.compensated_sum_us?;
        Some(comp - (x.untraced_mean_us? - y.untraced_mean_us?))
    });
    crate::sys::stats::median(per_round)
}

/// Max − min over the rounds of `a`'s untraced RTT mean less `b`'s in the same round.
fn delta_range(a: &DriverReport, b: &DriverReport) -> f64 {
    let d: Vec<f64> = (a.rounds.iter().zip(&b.rounds))
        .map(|(x, y)| x.mean_us - y.mean_us)
        .collect();
    let s = super::Spread::of(d);
    s.max - s.min
}
