//! Stalls: round trips the machine held up, reported as such and taken out of the means.
//!
//! A vCPU preempted by the hypervisor, a kernel worker or another process on the client's CPU
//! holds one round trip for hundreds of µs to tens of ms. One 18 ms stall in 10 000 round trips
//! of 12 µs moves their mean by 15%, while the path did not change: measured, the untraced
//! mean of one driver moved 170% between rounds whose p50s stayed within 3%. The check that
//! the hops add up (`own::Consistency`) compares means, the one statistic whose parts add up to
//! the whole; it is only fair if a stall counts the same in the traced run (where it lands in
//! one hop) and in the untraced run (where it lands in the round trip).
//!
//! The rule, the same for both: a sample is a stall when it exceeds its own distribution's
//! median by more than `STALL_FACTOR` × the untraced RTT p50 of its round (in spin mode tens of
//! µs, far beyond any data path's tail). A stall is taken out by replacing it with that
//! median: its excess over the median leaves the mean, the sample stays counted. Untraced: RTT
//! samples. Traced: the one-way journeys and the server's turnaround (what the check sums),
//! the traced RTT (for the client's syscall edges), and each hop (to say where stalls were).
use hdrhistogram::Histogram;
use serde::Serialize;

/// A stall exceeds its distribution's median by this many times the untraced RTT p50.
pub const STALL_FACTOR: f64 = 4.0;

/// The buckets of a kernel histogram at or above its median: all the stall rule reads.
#[derive(Clone, Debug, Default)]
pub struct Tail {
    pub median_ns: f64,
    /// (bucket, count), buckets ascending.
    pub buckets: Vec<(u32, u64)>,
    /// Samples in the whole histogram.
    pub count: u64,
}

impl Tail {
    pub fn of(hist: &[u64], median_ns: f64) -> Tail {
        let buckets = (hist.iter().enumerate())
            .filter(|(b, c)| {
                **c > 0 && netpath_common::hist::bounds(*b as u32).1 as f64 > median_ns
            })
            .map(|(b, c)| (b as u32, *c))
            .collect();
        Tail {
            median_ns,
            buckets,
            count: hist.iter().sum(),
        }
    }

    /// The stalls of this distribution: samples above `median + e_ns`, their summed excess
    /// over the median (each at its bucket's midpoint) and the largest.
    pub fn stalls(&self, e_ns: f64) -> Excess {
        let mut x = Excess::default();
        for &(b, c) in &self.buckets {
            let (lo, _) = netpath_common::hist::bounds(b);
            if (lo as f64) <= self.median_ns + e_ns {
                continue;
            }
            let v = netpath_common::hist::midpoint(b) as f64;
            x.count += c;
            x.excess_ns += (v - self.median_ns) * c as f64;
            x.max_ns = x.max_ns.max(v);
        }
        x
    }
}

/// Stalls found in one distribution.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Excess {
    pub count: u64,
    /// Summed excess over the median, ns.
    pub excess_ns: f64,
    pub max_ns: f64,
}

impl Excess {
    /// Stalls of an RTT histogram (ns): samples above `median + e_ns`.
    pub fn of_rtt(h: &Histogram<u64>, e_ns: f64) -> Excess {
        let median = h.value_at_quantile(0.5) as f64;
        let mut x = Excess::default();
        for v in h.iter_recorded() {
            let ns = h.highest_equivalent(v.value_iterated_to()) as f64;
            if ns > median + e_ns {
                let c = v.count_at_value();
                x.count += c;
                x.excess_ns += (ns - median) * c as f64;
                x.max_ns = x.max_ns.max(ns);
            }
        }
        x
    }

    /// The excess per sample of `n`, µs: what the stalls added to the mean.
    pub fn per_sample_us(&self, n: u64) -> f64 {
        if n == 0 {
            0.0
        } else {
            self.excess_ns / n as f64 / 1000.0
        }
    }
}

/// What the stall rule needs of a traced run, kept beside its record (not in the JSON): the
/// RTT histogram and the tails of the one-way, turnaround and hop distributions.
#[derive(Clone, Debug, Default)]
pub struct Tails {
    pub rtt: Option<Histogram<u64>>,
    /// Request one-way, response one-way, turnaround: what `own::Consistency` sums.
    pub journeys: Vec<Tail>,
    pub hops: Vec<(&'static str, &'static str, Tail)>,
}

/// Stalls of one driver's picked round, untraced and traced, and where the traced ones were.
#[derive(Clone, Debug, Default, Serialize, serde::Deserialize, schemars::JsonSchema)]
// Its `&'static str` names borrow from the JSON read (`render::saved::Saved`).
#[serde(bound(deserialize = "'de: 'static"))]
pub struct Stalls {
    /// A stall exceeded its distribution's median by more than this, µs (`STALL_FACTOR` × the
    /// round's untraced RTT p50).
    pub excess_over_us: f64,
    pub untraced: StallCount,
    pub traced: StallCount,
    /// What the traced run's stalls added to its journeys (one-ways and turnaround: what the
    /// check sums), µs per round trip; `traced.mean_added_us` is the same of its RTT.
    pub journeys_added_us: f64,
    /// The traced run's stalls by hop (a hop's crossings beyond the same excess), largest
    /// first.
    pub hops: Vec<HopStall>,
}

#[derive(Clone, Debug, Default, Serialize, serde::Deserialize, schemars::JsonSchema)]
pub struct StallCount {
    /// Round trips that stalled.
    pub count: u64,
    /// What they added to the RTT mean, µs: taken out of the check's means.
    pub mean_added_us: f64,
    pub max_us: f64,
}

#[derive(Clone, Debug, Serialize, serde::Deserialize, schemars::JsonSchema)]
pub struct HopStall {
    pub hop: &'static str,
    pub dir: &'static str,
    pub count: u64,
    /// What they added per round trip, µs.
    pub mean_added_us: f64,
}

impl StallCount {
    fn of(x: Excess, n: u64) -> StallCount {
        StallCount {
            count: x.count,
            mean_added_us: x.per_sample_us(n),
            max_us: x.max_ns / 1000.0,
        }
    }
}

/// The stall threshold of a round: `STALL_FACTOR` × its untraced RTT p50, ns.
pub fn threshold_ns(untraced: &Histogram<u64>) -> f64 {
    STALL_FACTOR * untraced.value_at_quantile(0.5) as f64
}

/// One round's stalls: the untraced run's and the traced run's (its tails), by the same rule.
pub fn of_round(tails: &Tails, untraced: &Histogram<u64>) -> Stalls {
    let e = threshold_ns(untraced);
    let n_u = untraced.len();
    let u = Excess::of_rtt(untraced, e);
    let (t, n_t) = match &tails.rtt {
        Some(h) => (Excess::of_rtt(h, e), h.len()),
        None => (Excess::default(), 0),
    };
    let journeys_added_us = tails
        .journeys
        .iter()
        .map(|j| j.stalls(e).per_sample_us(j.count))
        .sum();
    let mut hops: Vec<HopStall> = (tails.hops.iter())
        .filter_map(|(hop, dir, tail)| {
            let x = tail.stalls(e);
            (x.count > 0).then(|| HopStall {
                hop,
                dir,
                count: x.count,
                mean_added_us: x.per_sample_us(n_t.max(1)),
            })
        })
        .collect();
    hops.sort_by(|a, b| b.mean_added_us.total_cmp(&a.mean_added_us));
    Stalls {
        excess_over_us: e / 1000.0,
        untraced: StallCount::of(u, n_u),
        traced: StallCount::of(t, n_t),
        journeys_added_us,
        hops,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rtt(samples: &[(u64, u64)]) -> Histogram<u64> {
        let mut h = Histogram::<u64>::new_with_bounds(1, 60_000_000_000, 3).unwrap();
        for &(v, n) in samples {
            h.record_n(v, n).unwrap();
        }
        h
    }

    #[test]
    fn a_stall_is_its_excess_over_the_median_beyond_the_threshold() {
        // 9998 round trips of 10 µs, one of 30 µs (a tail, not a stall: 4 × 10 µs is the
        // threshold of excess) and one of 2 ms (a stall).
        let h = rtt(&[(10_000, 9998), (30_000, 1), (2_000_000, 1)]);
        let e = threshold_ns(&h);
        assert!((e - 40_000.0).abs() < 100.0, "{e}");
        let x = Excess::of_rtt(&h, e);
        assert_eq!(x.count, 1);
        assert!((x.excess_ns - 1_990_000.0).abs() < 2_000.0, "{x:?}");
        // Taken out of the mean: (9998×10 + 30 + 2000)/10000 = 10.2 µs becomes 10.002.
        let mean = h.mean() / 1000.0 - x.per_sample_us(h.len());
        assert!((mean - 10.002).abs() < 0.01, "{mean}");
    }

    #[test]
    fn kernel_tails_find_the_same_stall_as_the_rtt() {
        use netpath_common::hist::{HIST_SLOTS, bucket};
        let mut k = vec![0u64; HIST_SLOTS];
        k[bucket(10_000) as usize] += 9999;
        k[bucket(2_000_000) as usize] += 1;
        let t = Tail::of(&k, 10_000.0);
        assert!(t.buckets.len() <= 2 && t.count == 10_000);
        let x = t.stalls(40_000.0);
        assert_eq!(x.count, 1);
        // The bucket's midpoint is within 3.2% of the value.
        assert!(
            (x.excess_ns - 1_990_000.0).abs() < 0.04 * 2_000_000.0,
            "{x:?}"
        );
        assert_eq!(t.stalls(3_000_000.0), Excess::default());
    }
}
