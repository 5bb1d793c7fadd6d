//! The answer a compare ends with: per driver its untraced round trip and largest hops, then
//! each driver against its reference (`record::own::default_reference`, or `--reference`):
//! the ratio of untraced p50s with a 95% interval from the paired interleaved rounds, and
//! the hops that make the difference (`ab`'s figures, `delta`'s ranking, as `diff` has them).
use serde::Serialize;

use crate::harness::WaitMode;
use crate::measure::ab;
use crate::record::DriverReport;

/// What `compare` concludes: text and JSON (`summary`) carry the same.
#[derive(Clone, Debug, Default, Serialize, serde::Deserialize, schemars::JsonSchema)]
pub struct Summary {
    pub drivers: Vec<DriverLine>,
    pub pairs: Vec<Pair>,
}

/// One driver in one line.
#[derive(Clone, Debug, Serialize, serde::Deserialize, schemars::JsonSchema)]
pub struct DriverLine {
    pub driver: String,
    /// The wait mode of the rounds `rtt_p50_us` comes from.
    pub wait: String,
    /// Untraced RTT p50, median over rounds.
    pub rtt_p50_us: Option<f64>,
    /// Untraced RTT p50 of the blocking run beside the spin rounds (what an application sees).
    pub blocking_p50_us: Option<f64>,
    /// Its largest hops, netpath's own time taken out.
    pub hops: Vec<HopShare>,
    /// Why it was measured in another wait mode than the others.
    pub note: Option<String>,
}

#[derive(Clone, Debug, Serialize, serde::Deserialize, schemars::JsonSchema)]
pub struct HopShare {
    pub hop: String,
    pub dir: String,
    /// Typical per packet (p50 per crossing × crossings per packet), netpath's own time
    /// taken out.
    pub us: f64,
    /// Of the sum of every hop's typical time, %.
    pub share_pct: f64,
}

/// A driver against its reference.
#[derive(Clone, Debug, Serialize, serde::Deserialize, schemars::JsonSchema)]
pub struct Pair {
    pub driver: String,
    pub reference: String,
    /// Geometric mean of the per-round ratios of untraced p50s (driver / reference).
    pub ratio: f64,
    /// 95% t-interval of that (on the log ratios); none with fewer than 3 paired rounds.
    pub ci_low: Option<f64>,
    pub ci_high: Option<f64>,
    pub rounds: usize,
    /// The interval holds 1 (or there is none): the two are not shown to differ.
    pub not_a_result: bool,
    /// The driver was measured blocking and the reference spinning: the ratio is against the
    /// reference's blocking run.
    pub mixed_wait: bool,
    /// The hops whose difference is a result, largest first (per-packet p50, A − B).
    pub hops: Vec<HopDelta>,
    /// One sentence: the ratio and the hops.
    pub sentence: String,
}

#[derive(Clone, Debug, Serialize, serde::Deserialize, schemars::JsonSchema)]
pub struct HopDelta {
    /// "hop (dir)", with `diff`'s note when the crossings differ.
    pub hop: String,
    pub delta_us: f64,
    pub share_pct: Option<f64>,
}

/// Hops named in a driver's line and a pair's sentence.
const TOP: usize = 3;

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

/// A hop's typical time per packet, netpath's own time taken out: its p50 per crossing times
/// the crossings per packet. Means would let a loaded machine's rare long waits (a wakeup of
/// hundreds of µs in one round in a thousand) rank above the hops every packet pays.
fn typical_us(h: &crate::record::HopRow) -> f64 {
    let per_packet = if h.at.mean_us > 0.0 {
        h.at.per_packet_us / h.at.mean_us
    } else {
        1.0
    };
    h.compensated_p50_us.max(0.0) * per_packet
}

fn driver_line(r: &DriverReport, all: &[DriverReport]) -> DriverLine {
    let total: f64 = r.hops.iter().map(typical_us).sum();
    let mut hops: Vec<HopShare> = r
        .hops
        .iter()
        .map(|h| HopShare {
            hop: h.at.hop.to_string(),
            dir: h.at.dir.to_string(),
            us: typical_us(h),
            share_pct: if total > 0.0 {
                typical_us(h) / total * 100.0
            } else {
                0.0
            },
        })
        .collect();
    hops.sort_by(|a, b| b.us.total_cmp(&a.us));
    hops.truncate(TOP);
    DriverLine {
        driver: r.driver.clone(),
        wait: r.wait.name().to_string(),
        rtt_p50_us: r.rr.as_ref().map(|x| x.p50_us.median),
        blocking_p50_us: r.block.as_ref().map(|b| b.untraced.p50_us),
        hops,
        note: (r.wait == WaitMode::Block && all.iter().any(|x| x.wait == WaitMode::Spin)).then(
            || {
                format!(
                    "measured blocking: spin mode cannot measure it on {} CPUs (its relay needs one beside the two spinning sides)",
                    r.machine.as_ref().map_or(0, |m| m.cpus_online)
                )
            },
        ),
    }
}

/// The hops that differ between two drivers of one run, as `diff` ranks them.
fn hop_deltas(a: &DriverReport, b: &DriverReport) -> Vec<HopDelta> {
    let (Ok(va), Ok(vb)) = (ab::view_of(a), ab::view_of(b)) else {
        return Vec::new();
    };
    let figs = ab::figures(&va, &vb, true);
    ab::deltas(&a.driver, &b.driver, &figs)
        .hops_p50
        .into_iter()
        .filter(|d| !d.within_noise && d.delta != 0.0)
        .take(TOP)
        .map(|d| HopDelta {
            hop: match &d.note {
                Some(n) => format!("{} {n}", d.name),
                None => d.name.clone(),
            },
            delta_us: d.delta,
            share_pct: d.share_pct,
        })
        .collect()
}

fn sentence(p: &Pair) -> String {
    let range = match (p.ci_low, p.ci_high) {
        (Some(l), Some(h)) => format!("95% interval {l:.2}–{h:.2}"),
        _ if p.mixed_wait => format!(
            "blocking against {}'s blocking run: one value, no interval",
            p.reference
        ),
        _ => format!(
            "{} paired round(s): too few for an interval (--rounds 3 or more)",
            p.rounds
        ),
    };
    let mut s = format!("{} vs {}: {:.2}× ({range})", p.driver, p.reference, p.ratio);
    if p.not_a_result {
        s.push_str(", not a result");
    }
    if p.hops.is_empty() {
        s.push_str("; no hop differs beyond its noise");
    } else {
        let h: Vec<String> = p
            .hops
            .iter()
            .map(|h| format!("{} {:+.1} µs", h.hop, h.delta_us))
            .collect();
        s.push_str(&format!("; the difference is in {}", h.join(", ")));
    }
    s
}

fn pair(a: &DriverReport, b: &DriverReport) -> Option<Pair> {
    // Measured in different wait modes (published-proxy blocking): against the reference's
    // blocking run, one value.
    let per_round = match (a.wait == b.wait, &a.rr, &b.block) {
        (true, _, _) => per_round_ratios(a, b),
        (false, Some(x), Some(y)) if y.untraced.p50_us > 0.0 => {
            vec![x.p50_us.median / y.untraced.p50_us]
        }
        _ => Vec::new(),
    };
    let (ratio, ci) = ratio_interval(&per_round)?;
    let mut p = Pair {
        driver: a.driver.clone(),
        reference: b.driver.clone(),
        ratio,
        ci_low: ci.map(|c| c.0),
        ci_high: ci.map(|c| c.1),
        rounds: per_round.len(),
        mixed_wait: a.wait != b.wait,
        not_a_result: ci.is_none_or(|(l, h)| l <= 1.0 && 1.0 <= h),
        hops: hop_deltas(a, b),
        sentence: String::new(),
    };
    p.sentence = sentence(&p);
    Some(p)
}

/// Untraced p50 ratios a/b, round by round.
fn per_round_ratios(a: &DriverReport, b: &DriverReport) -> Vec<f64> {
    a.round_detail
        .iter()
        .zip(&b.round_detail)
        .filter_map(|(x, y)| {
            let (x, y) = (x.untraced_p50_us?, y.untraced_p50_us?);
            (y > 0.0).then(|| x / y)
        })
        .collect()
}

/// The summary of a run: every driver's line, and every driver against `reference` (when
/// given and measured) or its default reference.
pub fn summarise(reports: &[DriverReport], reference: Option<&str>) -> Summary {
    let names: Vec<&str> = reports.iter().map(|r| r.driver.as_str()).collect();
    let pairs = reports
        .iter()
        .filter_map(|r| {
            let refname = match reference {
                Some(x) if x != r.driver => names.iter().copied().find(|d| *d == x),
                Some(_) => None,
                None => crate::record::own::default_reference(&r.driver, &names),
            }?;
            let b = reports.iter().find(|x| x.driver == refname)?;
            pair(r, b)
        })
        .collect();
    Summary {
        drivers: reports.iter().map(|r| driver_line(r, reports)).collect(),
        pairs,
    }
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
}
