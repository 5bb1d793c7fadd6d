//! The answer a compare ends with (and its JSON begins with): one row per driver, each
//! driver against its reference (`pair`), the seeds' claims with verdicts (`claims`), and
//! whether the hop figures add up.
use serde::Serialize;

pub use super::pair::{HopDelta, Pair, hop_text, hop_us, pair, ratio_interval};
use crate::harness::WaitMode;
use crate::record::{DriverReport, Spread};

/// What `compare` concludes: text and JSON (`summary`) carry the same.
#[derive(Clone, Debug, Default, Serialize, serde::Deserialize, schemars::JsonSchema)]
pub struct Summary {
    /// A row per driver, in the order measured.
    pub rows: Vec<AnswerRow>,
    /// Each driver against its reference, in the wait mode its rows come from.
    pub pairs: Vec<Pair>,
    /// What the project exists to check, each with netpath's figure and a verdict.
    pub claims: Vec<super::claims::ClaimVerdict>,
    /// Whether the hops add up to the untraced round trip, over every driver.
    pub check: CheckSummary,
    /// The machine's speed over the run: the loopback probe's p50 before each sweep run
    /// (`harness::speed`), its lowest and highest, µs. Apart by more than a tenth, the machine
    /// changed speed during the run, and the intervals carry it.
    pub machine_speed_us: Option<Spread>,
}

/// One driver in one row.
#[derive(Clone, Debug, Serialize, serde::Deserialize, schemars::JsonSchema)]
pub struct AnswerRow {
    pub driver: String,
    /// Untraced RTT p50 with receivers spinning, median and range over the rounds.
    pub spin_p50_us: Option<Spread>,
    /// The same with receivers blocking: what an application sees.
    pub block_p50_us: Option<Spread>,
    /// Why a mode is missing.
    pub note: Option<String>,
    /// Its reference in `pairs`, if it has one.
    pub reference: Option<String>,
    /// The check of its main record: do its hops add up.
    pub check: Option<Check>,
}

#[derive(Clone, Debug, Serialize, serde::Deserialize, schemars::JsonSchema)]
pub struct Check {
    pub within_tolerance: bool,
    /// Stall-free compensated hop sum against the stall-free untraced RTT mean, %: the
    /// rounds' median where the check was judged on it, else the picked round's.
    pub error_pct: f64,
    /// Round trips taken out as stalls, untraced and traced (picked round).
    pub stalls_untraced: u64,
    pub stalls_traced: u64,
}

/// The check over every driver, said once.
#[derive(Clone, Debug, Default, Serialize, serde::Deserialize, schemars::JsonSchema)]
pub struct CheckSummary {
    pub within: usize,
    pub checked: usize,
    /// Round trips taken out as stalls, over every driver's picked round.
    pub stalls_untraced: u64,
    pub stalls_traced: u64,
    /// A line per driver whose hops did not add up: why, from what was measured.
    pub misses: Vec<String>,
}

/// The records of `a` and its reference `b` in one wait mode: `a`'s own, and `b`'s in it.
fn in_one_mode<'r>(
    a: &'r DriverReport,
    b: &'r DriverReport,
) -> Option<(&'r DriverReport, &'r DriverReport)> {
    Some((a, b.in_mode(a.wait)?))
}

fn row(r: &DriverReport, reference: Option<&str>, cpus: usize) -> AnswerRow {
    let p50 = |x: Option<&DriverReport>| x.and_then(|x| x.rr.as_ref()).map(|rr| rr.p50_us);
    let spin = r.in_mode(WaitMode::Spin);
    AnswerRow {
        driver: r.driver.clone(),
        spin_p50_us: p50(spin),
        block_p50_us: p50(r.in_mode(WaitMode::Block)),
        note: (spin.is_none() && r.wait == WaitMode::Block).then(|| {
            format!("spin needs a CPU for its relay beside the two spinning sides; {cpus} here")
        }),
        reference: reference.map(String::from),
        check: r.consistency.as_ref().map(|c| Check {
            within_tolerance: c.within_tolerance,
            error_pct: match (c.judged_on, c.error_rounds_median_pct) {
                ("rounds", Some(m)) => m,
                _ => c.error_stall_free_pct,
            },
            stalls_untraced: r.stalls.as_ref().map_or(0, |s| s.untraced.count),
            stalls_traced: r.stalls.as_ref().map_or(0, |s| s.traced.count),
        }),
    }
}

/// The summary of a run: every driver's row, every driver against `reference` (when given
/// and measured) or its default reference, the claims, the check.
pub fn summarise(reports: &[DriverReport], reference: Option<&str>) -> Summary {
    let names: Vec<&str> = reports.iter().map(|r| r.driver.as_str()).collect();
    let cpus = reports
        .iter()
        .find_map(|r| r.machine.as_ref())
        .map_or(0, |m| m.cpus_online);
    let mut rows = Vec::new();
    let mut pairs = Vec::new();
    for r in reports {
        let refname = match reference {
            Some(x) if x != r.driver => names.iter().copied().find(|d| *d == x),
            Some(_) => None,
            None => crate::record::own::default_reference(&r.driver, &names),
        };
        let b = refname.and_then(|n| reports.iter().find(|x| x.driver == n));
        let p = b
            .and_then(|b| in_one_mode(r, b))
            .and_then(|(a, b)| pair(a, b));
        rows.push(row(r, p.as_ref().map(|p| p.reference.as_str()), cpus));
        pairs.extend(p);
    }
    let speeds: Vec<f64> = (reports.iter())
        .flat_map(|r| r.round_detail.iter().filter_map(|x| x.machine_speed_us))
        .collect();
    Summary {
        machine_speed_us: (!speeds.is_empty()).then(|| Spread::of(speeds)),
        claims: super::claims::judge(reports),
        check: check_summary(reports),
        rows,
        pairs,
    }
}

fn check_summary(reports: &[DriverReport]) -> CheckSummary {
    let mut s = CheckSummary::default();
    for r in reports {
        let Some(c) = &r.consistency else { continue };
        s.checked += 1;
        s.within += usize::from(c.within_tolerance);
        if let Some(st) = &r.stalls {
            s.stalls_untraced += st.untraced.count;
            s.stalls_traced += st.traced.count;
        }
        if !c.within_tolerance {
            s.misses.push(crate::record::own::why_missed(r, c));
        }
    }
    s
}
