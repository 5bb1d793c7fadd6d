//! One driver against another, both records of one wait mode measured in the same rounds:
//! the ratio of their untraced p50s round by round with a 95% interval, the difference of
//! their untraced RTT means, and the hops that make it (`answer` puts a pair in each row,
//! `claims` judges the claims by pairs).
//!
//! The difference is split into hops by their per-packet means, netpath's own time and the
//! round's stalls taken out: means are the statistic whose parts add up to the whole, so the
//! named hops and the rest sum to the hops' difference, which the check holds against the
//! untraced one (`record::own`).
use serde::Serialize;

use crate::harness::WaitMode;
use crate::record::{DriverReport, HopRow};

/// A driver against its reference.
#[derive(Clone, Debug, Serialize, serde::Deserialize, schemars::JsonSchema)]
pub struct Pair {
    pub driver: String,
    pub reference: String,
    /// The wait mode both records were measured in.
    pub wait: WaitMode,
    /// Geometric mean of the per-round ratios of untraced p50s (driver / reference).
    pub ratio: f64,
    /// 95% t-interval of that (on the log ratios); none with fewer than 3 paired rounds.
    pub ci_low: Option<f64>,
    pub ci_high: Option<f64>,
    pub rounds: usize,
    /// The interval holds 1 (or there is none): the two are not shown to differ.
    pub not_a_result: bool,
    /// Untraced RTT mean difference, stall-free, median of the paired rounds', µs.
    pub rtt_delta_us: Option<f64>,
    /// The hops' difference (compensated, stall-free per-packet means), µs: the named hops
    /// plus `rest_us`.
    pub hops_delta_us: f64,
    /// The hops that make the difference, largest first: signed µs per round trip.
    pub hops: Vec<HopDelta>,
    /// Every other hop's difference, summed.
    pub rest_us: f64,
    /// One sentence: the ratio and the hops.
    pub sentence: String,
}

#[derive(Clone, Debug, Serialize, serde::Deserialize, schemars::JsonSchema)]
pub struct HopDelta {
    pub hop: String,
    /// request, response, or both (the two directions' differences summed).
    pub dir: String,
    pub delta_us: f64,
    /// "×2 crossings" when the two cross the hop a different number of times per packet.
    pub note: Option<String>,
    /// `--parts`: the part that makes half or more of this difference.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub part: Option<super::pair_parts::PartShare>,
}

/// Hops named in a pair at most.
const TOP: usize = 4;

/// Two-sided 95% t quantiles for 1..=30 degrees of freedom; beyond, the normal's.
const T95: [f64; 30] = [
    12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160,
    2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056,
    2.052, 2.048, 2.045, 2.042,
];

fn t95(df: usize) -> f64 {
    T95.get(df.wrapping_sub(1)).copied().unwrap_or(1.960)
}

/// Geometric mean and 95% interval of ratios (a t-interval on their logs). The interval
/// needs 3 ratios: with 2, t at 1 degree of freedom makes it meaninglessly wide.
pub fn ratio_interval(ratios: &[f64]) -> Option<(f64, Option<(f64, f64)>)> {
    let logs: Vec<f64> = ratios
        .iter()
        .filter(|r| **r > 0.0)
        .map(|r| r.ln())
        .collect();
    let n = logs.len();
    if n == 0 {
        return None;
    }
    let mean = logs.iter().sum::<f64>() / n as f64;
    if n < 3 {
        return Some((mean.exp(), None));
    }
    let var = logs.iter().map(|l| (l - mean).powi(2)).sum::<f64>() / (n - 1) as f64;
    let half = t95(n - 1) * (var / n as f64).sqrt();
    Some((mean.exp(), Some(((mean - half).exp(), (mean + half).exp()))))
}

/// A hop's time per round trip as the tables show it: per packet, netpath's own time and the
/// round's stalls taken out.
pub fn hop_us(h: &HopRow) -> f64 {
    h.at.typical_us()
}

/// Per packet crossings of a hop row.
fn crossings(r: &DriverReport, h: &HopRow) -> f64 {
    let n = r.one_way.get(h.at.dir).map_or(0, |d| d.count);
    h.at.crossings as f64 / n.max(1) as f64
}

/// Median over the paired rounds of `f(a's round) − f(b's round)`; rounds `f` has nothing
/// for are left out.
fn paired_median(
    a: &DriverReport,
    b: &DriverReport,
    f: impl Fn(&crate::record::per_round::RoundRow) -> Option<f64>,
) -> Option<f64> {
    let d = (a.round_detail.iter().zip(&b.round_detail)).filter_map(|(x, y)| Some(f(x)? - f(y)?));
    crate::sys::stats::median(d)
}

/// One hop's time in a round, 0 where the round did not cross it.
fn in_round(r: &crate::record::per_round::RoundRow, hop: &str, dir: &str) -> Option<f64> {
    let h = r.hops.iter().find(|h| h.hop == hop && h.dir == dir);
    // A round without hop tables (an older record) has nothing to pair.
    (!r.hops.is_empty()).then(|| h.map_or(0.0, |h| h.typical_us()))
}

/// Every hop of either side, A − B (median of the paired rounds' differences), its two
/// directions together (a hop both directions cross differs in both: "bridge" names the
/// bridge), largest first.
fn hop_deltas(a: &DriverReport, b: &DriverReport) -> Vec<HopDelta> {
    let mut keys: Vec<(&str, &str)> = Vec::new();
    for h in a.hops.iter().chain(&b.hops) {
        if !keys.contains(&(h.at.hop, h.at.dir)) {
            keys.push((h.at.hop, h.at.dir));
        }
    }
    let find = |r: &'_ DriverReport, k: (&str, &str)| {
        (r.hops.iter())
            .find(|h| h.at.hop == k.0 && h.at.dir == k.1)
            .map(|h| (hop_us(h), crossings(r, h)))
    };
    let mut out: Vec<HopDelta> = Vec::new();
    for k in keys {
        let (va, ca) = find(a, k).unwrap_or((0.0, 0.0));
        let (vb, cb) = find(b, k).unwrap_or((0.0, 0.0));
        let note = (ca > 0.0 && cb > 0.0 && (ca / cb - 1.0).abs() > 0.25)
            .then(|| format!("{ca:.0} vs {cb:.0} crossings"));
        let delta = paired_median(a, b, |r| in_round(r, k.0, k.1)).unwrap_or(va - vb);
        match out.iter_mut().find(|d| d.hop == k.0) {
            Some(d) => {
                d.delta_us += delta;
                d.dir = "both".into();
                d.note = d.note.take().or(note);
            }
            None => out.push(HopDelta {
                hop: k.0.to_string(),
                dir: k.1.to_string(),
                delta_us: delta,
                note,
                part: None,
            }),
        }
    }
    out.sort_by(|x, y| y.delta_us.abs().total_cmp(&x.delta_us.abs()));
    out
}

/// The fewest of the largest hops (up to `TOP`) whose sum comes within 10% of `target` (the
/// untraced difference they explain), or else the count that comes closest: what makes the
/// difference. The rest of `total` (every hop's difference) is summed apart.
fn name_hops(all: Vec<HopDelta>, target: f64, total: f64) -> (Vec<HopDelta>, f64) {
    let k = named_count(&all, target);
    let named: Vec<HopDelta> = all.into_iter().take(k).collect();
    let rest = total - named.iter().map(|d| d.delta_us).sum::<f64>();
    (named, rest)
}

fn named_count(all: &[HopDelta], total: f64) -> usize {
    let mut sums = Vec::new();
    let mut sum = 0.0;
    for d in all.iter().take(TOP) {
        sum += d.delta_us;
        sums.push((total - sum).abs());
    }
    let close = sums.iter().position(|off| *off <= 0.1 * total.abs());
    let closest = (sums.iter().enumerate())
        .min_by(|x, y| x.1.total_cmp(y.1))
        .map(|(i, _)| i);
    close.or(closest).map_or(0, |i| i + 1)
}

/// The hops' difference: the stall-free compensated sums (hops, turnaround, edges: what the
/// check holds against the untraced mean), median of the paired rounds' differences.
fn hops_delta(a: &DriverReport, b: &DriverReport) -> Option<f64> {
    let sum = |r: &DriverReport| {
        r.consistency
            .as_ref()
            .map(|c| c.stall_free_compensated_sum_us)
    };
    paired_median(a, b, |r| r.compensated_sum_us).or_else(|| Some(sum(a)? - sum(b)?))
}

/// Untraced p50 ratios a/b, round by round (each round's sweep runs: `interleave::sweep`).
fn per_round_ratios(a: &DriverReport, b: &DriverReport) -> Vec<f64> {
    (a.round_detail.iter().zip(&b.round_detail))
        .filter_map(|(x, y)| {
            let (x, y) = (x.untraced_p50_us?, y.untraced_p50_us?);
            (y > 0.0).then(|| x / y)
        })
        .collect()
}

fn sentence(p: &Pair) -> String {
    let range = match (p.ci_low, p.ci_high) {
        (Some(l), Some(h)) => format!("95% interval {l:.2}–{h:.2}"),
        _ => format!(
            "{} paired round(s): too few for an interval (--rounds 3 or more)",
            p.rounds
        ),
    };
    let mut s = format!(
        "{} vs {} ({}): {:.2}× ({range})",
        p.driver,
        p.reference,
        p.wait.name(),
        p.ratio
    );
    if p.not_a_result {
        s.push_str(", not a result");
    }
    let h: Vec<String> = p.hops.iter().map(hop_text).collect();
    s.push_str(&format!(
        "; hops {:+.1} µs: {}, rest {:+.1}",
        p.hops_delta_us,
        h.join(", "),
        p.rest_us
    ));
    s
}

/// "bridge +2.6", "proxy (request) +13.6", with its crossings note.
pub fn hop_text(h: &HopDelta) -> String {
    let mut s = match h.dir.as_str() {
        "both" => format!("{} {:+.1}", h.hop, h.delta_us),
        d => format!("{} ({d}) {:+.1}", h.hop, h.delta_us),
    };
    if let Some(n) = &h.note {
        s.push_str(&format!(" [{n}]"));
    }
    if let Some(p) = &h.part {
        s.push_str(&format!(" (of which {} {:+.1})", p.name, p.delta_us));
    }
    s
}

/// `a` against `b`, both records of one wait mode measured in the same rounds.
pub fn pair(a: &DriverReport, b: &DriverReport) -> Option<Pair> {
    let per_round = per_round_ratios(a, b);
    let (ratio, ci) = ratio_interval(&per_round)?;
    let total = hops_delta(a, b)?;
    let rtt_delta_us = paired_median(a, b, |r| r.untraced_mean_us);
    let (mut hops, rest_us) = name_hops(hop_deltas(a, b), rtt_delta_us.unwrap_or(total), total);
    for h in &mut hops {
        h.part = super::pair_parts::part_of(&h.hop, &h.dir, h.delta_us, a, b);
    }
    let mut p = Pair {
        driver: a.driver.clone(),
        reference: b.driver.clone(),
        wait: a.wait,
        ratio,
        ci_low: ci.map(|c| c.0),
        ci_high: ci.map(|c| c.1),
        rounds: per_round.len(),
        not_a_result: ci.is_none_or(|(l, h)| l <= 1.0 && 1.0 <= h),
        rtt_delta_us,
        hops_delta_us: total,
        hops,
        rest_us,
        sentence: String::new(),
    };
    p.sentence = sentence(&p);
    Some(p)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_interval_needs_three_rounds_and_holds_the_geometric_mean() {
        assert!(ratio_interval(&[]).is_none());
        let (r, ci) = ratio_interval(&[2.0, 2.0]).unwrap();
        assert!((r - 2.0).abs() < 1e-9 && ci.is_none());
        let (r, ci) = ratio_interval(&[1.9, 2.0, 2.1, 2.05]).unwrap();
        let (l, h) = ci.unwrap();
        assert!(l < r && r < h && l > 1.0, "{l} {r} {h}");
        // Ratios on both sides of 1: the interval holds 1.
        let (_, ci) = ratio_interval(&[0.8, 1.2, 1.0]).unwrap();
        let (l, h) = ci.unwrap();
        assert!(l < 1.0 && h > 1.0);
    }

    fn d(hop: &str, delta_us: f64) -> HopDelta {
        HopDelta {
            hop: hop.into(),
            dir: "request".into(),
            delta_us,
            note: None,
            part: None,
        }
    }

    #[test]
    fn the_named_hops_and_the_rest_add_up_to_the_difference() {
        // Overlay against bridge: encap and decap make most of it, a stack gives some back.
        let all = vec![
            d("vxlan-decap", 1.5),
            d("vxlan-encap", 1.4),
            d("backlog", 0.6),
            d("sender-stack", -0.2),
            d("veth", 0.05),
        ];
        let (named, rest) = name_hops(all, 3.35, 3.35);
        let names: Vec<&str> = named.iter().map(|h| h.hop.as_str()).collect();
        assert_eq!(names, ["vxlan-decap", "vxlan-encap", "backlog"]);
        let sum: f64 = named.iter().map(|h| h.delta_us).sum::<f64>() + rest;
        assert!((sum - 3.35).abs() < 1e-9 && (rest - -0.15).abs() < 1e-9);
        // One hop carrying it all is named alone.
        let (named, _) = name_hops(vec![d("proxy", 8.0), d("backlog", 0.3)], 8.1, 8.3);
        assert_eq!(named.len(), 1);
    }
}
