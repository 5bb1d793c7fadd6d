//! Noise-aware differences between two sides of a measurement, A and B: two drivers (`diff`),
//! two settings of a knob (`tune`), two saved runs. Every figure comes with its value per
//! round on each side, so a difference is only called when it is larger than the rounds say
//! the figure wanders by itself.
//!
//! The rule is one for every caller, so `diff` and `tune` call noise alike: see [`delta`].
use serde::Serialize;

use crate::record::Spread;

/// What a figure measures, which says how its difference reads.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum Unit {
    /// A latency: more is slower.
    #[default]
    Micros,
    /// A throughput: more is faster.
    GbitPerS,
    /// A rate of requests: more is faster.
    PerSecond,
    /// A count (retransmits, drops): more is more.
    Count,
}

impl Unit {
    pub fn suffix(self) -> &'static str {
        match self {
            Unit::Micros => " µs",
            Unit::GbitPerS => " Gbit/s",
            Unit::PerSecond => "/s",
            Unit::Count => "",
        }
    }

    /// Word for A against B when A's figure is larger (`more`) or smaller.
    fn word(self, more: bool) -> &'static str {
        match (self, more) {
            (Unit::Micros, true) => "slower",
            (Unit::Micros, false) => "faster",
            (Unit::GbitPerS | Unit::PerSecond, true) => "faster",
            (Unit::GbitPerS | Unit::PerSecond, false) => "slower",
            (Unit::Count, true) => "more",
            (Unit::Count, false) => "fewer",
        }
    }
}

/// One figure on both sides, one value per round. A side with no values lacks the figure
/// (a hop the path does not have: VXLAN on a bridge): it counts as 0 in every round.
#[derive(Clone, Debug, Default)]
pub struct Figure {
    pub name: String,
    /// Printed after the name in a verdict, e.g. "×2 more" when A crosses the hop more often.
    pub note: Option<String>,
    pub unit: Unit,
    pub a: Vec<f64>,
    pub b: Vec<f64>,
    /// Round i of A and round i of B were neighbours in time (one interleaved run).
    pub paired: bool,
    /// Smallest difference the figure can resolve; the noise is never below it.
    pub resolution: f64,
}

impl Figure {
    pub fn new(name: impl Into<String>, a: Vec<f64>, b: Vec<f64>) -> Figure {
        Figure {
            name: name.into(),
            a,
            b,
            ..Default::default()
        }
    }

    pub fn unit(mut self, unit: Unit) -> Figure {
        self.unit = unit;
        self
    }

    pub fn paired(mut self, paired: bool) -> Figure {
        self.paired = paired;
        self
    }

    pub fn note(mut self, note: Option<String>) -> Figure {
        self.note = note;
        self
    }

    /// A percentile read from netpath's log-linear histograms: good to ±3.2% of its value.
    pub fn histogram_percentile(mut self) -> Figure {
        let m = |v: &[f64]| Spread::of(v.to_vec()).median.abs();
        self.resolution = 0.032 * m(&self.a).max(m(&self.b));
        self
    }
}

/// A against B for one figure.
#[derive(Clone, Debug, Serialize, schemars::JsonSchema)]
pub struct Delta {
    pub name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    pub unit: Unit,
    pub a: Spread,
    pub b: Spread,
    pub a_rounds: usize,
    pub b_rounds: usize,
    /// A − B: the median of the per-round deltas when paired, else the medians' difference.
    pub delta: f64,
    /// The delta relative to B, % (none when B is 0: a hop only A has).
    pub rel_pct: Option<f64>,
    /// Per-round deltas' median and range, when paired.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub per_round: Option<Spread>,
    /// How much the figure wanders by itself (see the module's rule).
    pub noise: f64,
    /// Both sides had two rounds or more (else the noise is only the resolution).
    pub noise_known: bool,
    pub within_noise: bool,
    /// Share of the summed difference of the figures ranked with it, % (`rank`).
    pub share_pct: Option<f64>,
}

/// A side without the figure: 0 in every round of the other side.
fn filled(v: &[f64], other: &[f64]) -> Vec<f64> {
    if v.is_empty() {
        vec![0.0; other.len().max(1)]
    } else {
        v.to_vec()
    }
}

/// A against B for one figure, by the module's rule.
///
/// The rule (one for every caller, so `diff` and `tune` call noise alike):
/// * **paired** (A and B measured in one interleaved run, round i of A next to round i of B in
///   time): the delta is taken per round, its median is the delta and the range of the
///   per-round deltas (max − min) the noise. This is `compare`'s own rule for its per-round
///   ratios ("spread of the per-round ratios exceeds the difference: not a result"); per-round
///   deltas that change sign are always within noise.
/// * **unpaired** (two files, or different round counts): the delta is median(A) − median(B),
///   the noise the sum of the two sides' half-ranges, (range(A) + range(B)) / 2. A delta no
///   larger means the two sides' rounds, centred on their medians, overlap: some round of A
///   lies as close to B's as rounds of one side lie to each other.
/// * either way the noise is at least the figure's `resolution` (a percentile read from
///   netpath's histograms is only good to its bucket, ±3.2%), and a figure with fewer than two
///   rounds on a side has no spread: its noise is unknown and it is never called "within
///   noise" silently, `noise_known` says so and the verdict prints it.
///
/// `within_noise` is `|delta| <= noise`. Ranking sorts the figures that are a result by
/// |delta| (largest first), then those within noise; each carries its share of the summed
/// difference.
pub fn delta(f: &Figure) -> Delta {
    let a = filled(&f.a, &f.b);
    let b = filled(&f.b, &f.a);
    let (sa, sb) = (Spread::of(a.clone()), Spread::of(b.clone()));
    let range = |s: &Spread| s.max - s.min;
    let per_round = (f.paired && a.len() == b.len())
        .then(|| Spread::of(a.iter().zip(&b).map(|(x, y)| x - y).collect()));
    let (delta, spread) = match &per_round {
        Some(p) => (p.median, range(p)),
        None => (sa.median - sb.median, (range(&sa) + range(&sb)) / 2.0),
    };
    // A side that lacks the figure is exactly 0: its single filled round says nothing of noise.
    let rounds_ok = |v: &[f64]| v.is_empty() || v.len() >= 2;
    let noise_known = rounds_ok(&f.a) && rounds_ok(&f.b) && !(f.a.is_empty() && f.b.is_empty());
    let noise = spread.max(f.resolution.abs());
    Delta {
        name: f.name.clone(),
        note: f.note.clone(),
        unit: f.unit,
        a: sa,
        b: sb,
        a_rounds: f.a.len(),
        b_rounds: f.b.len(),
        delta,
        rel_pct: (sb.median.abs() > f64::EPSILON).then(|| delta / sb.median.abs() * 100.0),
        per_round,
        noise,
        noise_known,
        within_noise: delta.abs() <= noise,
        share_pct: None,
    }
}

/// Every figure's delta, ranked: the results by |delta| (largest first), then those within
/// noise. Each gets its share of the summed delta of all of them (the difference they split;
/// none when that sum is 0).
pub fn rank(figs: &[Figure]) -> Vec<Delta> {
    let mut out: Vec<Delta> = figs.iter().map(delta).collect();
    let total: f64 = out.iter().map(|d| d.delta).sum();
    for d in &mut out {
        d.share_pct = (total.abs() > f64::EPSILON).then(|| d.delta / total * 100.0);
    }
    out.sort_by(|x, y| {
        x.within_noise
            .cmp(&y.within_noise)
            .then(y.delta.abs().total_cmp(&x.delta.abs()))
    });
    out
}

/// A number with one decimal, signed.
fn signed(v: f64) -> String {
    if v.abs() < 0.05 {
        format!("{:+.2}", v)
    } else {
        format!("{:+.1}", v)
    }
}

impl Delta {
    /// "vxlan-decap +1.3" (with its note: "backlog ×2 more +1.4").
    pub fn short(&self) -> String {
        match &self.note {
            Some(n) => format!("{} {n} {}", self.name, signed(self.delta)),
            None => format!("{} {}", self.name, signed(self.delta)),
        }
    }

    /// "+0.4 µs (+2%), spread 0.9: within noise" — one figure's verdict, for `tune`'s lines.
    pub fn summary(&self) -> String {
        let rel = self
            .rel_pct
            .map(|p| format!(" ({p:+.0}%)"))
            .unwrap_or_default();
        let call = if !self.noise_known {
            ": one round, noise unknown"
        } else if self.within_noise {
            ": within noise"
        } else {
            ""
        };
        format!(
            "{}{}{rel}, spread {:.1}{call}",
            signed(self.delta),
            self.unit.suffix(),
            self.noise
        )
    }

    /// "overlay is 5.2 µs slower than bridge at p50 (spread 0.4)".
    pub fn headline(&self, a: &str, b: &str, what: &str) -> String {
        let spread = if self.noise_known {
            format!("spread {:.1}", self.noise)
        } else {
            "one round: spread unknown".to_string()
        };
        if self.within_noise && self.noise_known {
            return format!(
                "{a} and {b} differ by {:.1}{} {what}, within noise ({spread})",
                self.delta.abs(),
                self.unit.suffix()
            );
        }
        let ratio = match self.unit {
            Unit::GbitPerS | Unit::PerSecond if self.b.median > 0.0 => {
                format!(", {:.2}×", self.a.median / self.b.median)
            }
            _ => String::new(),
        };
        format!(
            "{a} is {:.1}{} {} than {b} {what} ({spread}{ratio})",
            self.delta.abs(),
            self.unit.suffix(),
            self.unit.word(self.delta > 0.0)
        )
    }
}

/// The ranked figures that are a result, each in brief (`vxlan-decap +1.3`), and how many
/// are within noise: what the verdict and `diff`'s ranked lines say of a group.
pub fn results(ranked: &[Delta]) -> (Vec<String>, usize) {
    let results = ranked
        .iter()
        .filter(|d| !d.within_noise && d.delta != 0.0)
        .map(Delta::short)
        .collect();
    let quiet = ranked.iter().filter(|d| d.within_noise).count();
    (results, quiet)
}

/// One sentence: the headline figure, then the ranked figures that are a result, then what is
/// left: "overlay is 5.2 µs slower than bridge at p50 (spread 0.4): vxlan-decap +1.3,
/// vxlan-encap +1.1, backlog ×2 more +1.4, underlay +0.3; the rest within noise".
pub fn verdict(a: &str, b: &str, what: &str, headline: &Delta, ranked: &[Delta]) -> String {
    let mut s = headline.headline(a, b, what);
    let (results, quiet) = results(ranked);
    let unknown = ranked.iter().any(|d| !d.noise_known);
    if results.is_empty() {
        s.push_str(if quiet > 0 {
            ": every part within noise"
        } else {
            ": no part to rank"
        });
    } else {
        s.push_str(": ");
        s.push_str(&results.join(", "));
        if quiet > 0 {
            s.push_str("; the rest within noise");
        }
    }
    if unknown {
        s.push_str(" (some figures had one round: their noise is unknown)");
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-9
    }

    #[test]
    fn unpaired_noise_is_the_sum_of_half_ranges() {
        // A 10, 11, 12 (range 2), B 8, 8.5, 9 (range 1): noise 1.5, delta 2.5 is a result.
        let d = delta(&Figure::new(
            "x",
            vec![10.0, 12.0, 11.0],
            vec![8.5, 9.0, 8.0],
        ));
        assert!(close(d.delta, 2.5) && close(d.noise, 1.5), "{d:?}");
        assert!(!d.within_noise && d.noise_known);
        assert!(close(d.rel_pct.unwrap(), 2.5 / 8.5 * 100.0));
        // Delta 1.0 with the same spreads: within noise.
        let d = delta(&Figure::new(
            "x",
            vec![9.0, 11.0, 10.0],
            vec![8.5, 9.5, 9.0],
        ));
        assert!(d.within_noise, "{d:?}");
    }

    #[test]
    fn paired_noise_is_the_range_of_the_per_round_deltas() {
        // Both sides wander together (the machine moved), the difference holds still.
        let a = vec![20.0, 30.0, 25.0];
        let b = vec![15.0, 25.2, 20.1];
        let d = delta(&Figure::new("p50", a.clone(), b.clone()).paired(true));
        let p = d.per_round.unwrap();
        assert!(close(d.delta, 4.9) && close(p.min, 4.8) && close(p.max, 5.0));
        assert!(close(d.noise, 0.2) && !d.within_noise);
        // Unpaired, the same values are noise: their ranges dwarf the difference.
        assert!(delta(&Figure::new("p50", a, b)).within_noise);
        // Per-round deltas that change sign are never a result.
        let d = delta(&Figure::new("y", vec![1.0, 5.0, 6.0], vec![1.1, 0.0, 0.0]).paired(true));
        assert!(d.within_noise, "{d:?}");
    }

    #[test]
    fn a_hop_only_one_side_has_counts_as_zero_there() {
        let d = delta(&Figure::new("vxlan-encap", vec![1.0, 1.2, 1.1], vec![]).paired(true));
        assert!(close(d.delta, 1.1) && close(d.b.median, 0.0) && d.rel_pct.is_none());
        assert!(close(d.noise, 0.2) && !d.within_noise && d.noise_known);
    }

    #[test]
    fn one_round_has_no_known_noise_but_the_resolution_floor_holds() {
        let d = delta(&Figure::new("x", vec![10.0], vec![9.0]));
        assert!(!d.noise_known && !d.within_noise && close(d.noise, 0.0));
        assert!(d.summary().contains("noise unknown"), "{}", d.summary());
        let d = delta(&Figure::new("x", vec![10.0, 10.0], vec![9.8, 9.8]).histogram_percentile());
        assert!(close(d.noise, 0.32) && d.within_noise, "{d:?}");
    }

    #[test]
    fn ranking_puts_results_first_by_size_with_their_share() {
        let figs = vec![
            Figure::new("sender-stack", vec![3.0, 3.5, 2.5], vec![3.1, 2.6, 3.4]),
            Figure::new("vxlan-decap", vec![1.3, 1.4, 1.2], vec![]),
            Figure::new("backlog", vec![2.8, 2.9, 2.7], vec![1.4, 1.5, 1.3])
                .note(Some("×2 more".into())),
            Figure::new("underlay", vec![0.3, 0.32, 0.28], vec![]),
        ];
        let r = rank(&figs);
        let names: Vec<&str> = r.iter().map(|d| d.name.as_str()).collect();
        assert_eq!(
            names,
            ["backlog", "vxlan-decap", "underlay", "sender-stack"]
        );
        assert!(r[3].within_noise && !r[2].within_noise);
        // Total 1.4 + 1.3 + 0.3 + (-0.1) = 2.9.
        assert!(
            close(r[0].share_pct.unwrap(), 1.4 / 2.9 * 100.0),
            "{:?}",
            r[0]
        );
        let sum: f64 = r.iter().map(|d| d.share_pct.unwrap()).sum();
        assert!(close(sum, 100.0));
    }

    #[test]
    fn the_verdict_is_one_sentence_naming_the_results() {
        let head =
            delta(&Figure::new("p50", vec![25.0, 25.4, 25.2], vec![20.0, 20.2, 20.1]).paired(true));
        let ranked = rank(&[
            Figure::new("vxlan-decap", vec![1.3, 1.4, 1.2], vec![]),
            Figure::new("backlog", vec![2.8, 2.9, 2.7], vec![1.4, 1.5, 1.3])
                .note(Some("×2 more".into())),
            Figure::new("veth", vec![1.0, 1.3, 0.9], vec![1.1, 0.9, 1.2]),
        ]);
        let v = verdict("overlay", "bridge", "at p50", &head, &ranked);
        assert_eq!(
            v,
            "overlay is 5.1 µs slower than bridge at p50 (spread 0.2): backlog ×2 more +1.4, \
             vxlan-decap +1.3; the rest within noise"
        );
        let head = delta(&Figure::new("g", vec![9.0, 9.2], vec![10.0, 10.2]).unit(Unit::GbitPerS));
        assert!(
            head.headline("overlay", "bridge", "in bulk").starts_with(
                "overlay is 1.0 Gbit/s slower than bridge in bulk (spread 0.2, 0.90×)"
            ),
            "{}",
            head.headline("overlay", "bridge", "in bulk")
        );
        let flat = delta(&Figure::new("p50", vec![10.0, 11.0], vec![10.2, 10.8]));
        assert_eq!(
            verdict("a", "b", "at p50", &flat, &[]),
            "a and b differ by 0.0 µs at p50, within noise (spread 0.8): no part to rank"
        );
    }
}
