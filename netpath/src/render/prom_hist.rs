//! The exporter's latency histograms, on the kernel's bucket bounds. The kernel counts in
//! log-linear buckets (`netpath_common::hist`: 16 linear steps per power of two, each
//! `[low, high)` in whole ns); the exported `le` bounds are a subset of those bounds, six per
//! power of two (steps of ×1.09 to ×1.16, about 2^(1/6)), from 64 ns to 2^25 ns (33.5 ms). So
//! every kernel bucket falls inside exactly one exported bucket, and `histogram_quantile`'s
//! interpolation inside a bucket spans at most 16% of the value (a hop's distribution is often
//! peaked near one edge of a bucket, where interpolation is off by most of the bucket's width).
use std::sync::Arc;
use std::sync::Mutex;

use netpath_common::hist;
use prometheus_client::encoding::{EncodeMetric, MetricEncoder, NoLabelSet};
use prometheus_client::metrics::{MetricType, TypedMetric};

/// Lowest and highest power of two (ns) the exported bounds span.
const LOW_EXP: u32 = 6;
const HIGH_EXP: u32 = 25;
/// Sub-bucket offsets (of the kernel's 16 per power of two) where an exported bound sits:
/// 16, 18, 20, 23, 25 and 29 sixteenths of the power of two.
const STEPS: [u64; 6] = [0, 2, 4, 7, 9, 13];

/// The exported upper bounds, ns, ascending; each one a kernel bucket's lower bound.
pub fn bounds_ns() -> Vec<u64> {
    let mut v = Vec::new();
    for e in LOW_EXP..HIGH_EXP {
        for m in STEPS {
            v.push((hist::SUB + m) << (e - hist::SUB_BITS));
        }
    }
    v.push(1 << HIGH_EXP);
    v
}

#[derive(Debug, Default)]
struct Inner {
    /// Per exported bucket (the last one: above the highest bound).
    counts: Vec<u64>,
    sum_ns: u64,
    count: u64,
}

/// A histogram of ns values counted in the kernel's buckets and exported in seconds.
#[derive(Clone, Debug)]
pub struct KernelHistogram {
    bounds: Arc<Vec<u64>>,
    inner: Arc<Mutex<Inner>>,
}

impl KernelHistogram {
    pub fn new(bounds: Arc<Vec<u64>>) -> KernelHistogram {
        let n = bounds.len() + 1;
        KernelHistogram {
            bounds,
            inner: Arc::new(Mutex::new(Inner {
                counts: vec![0; n],
                ..Inner::default()
            })),
        }
    }

    /// One value of `ns`: into the exported bucket holding its kernel bucket. The kernel's
    /// buckets are `[low, high)`, so a value belongs below the first exported bound above its
    /// kernel bucket's low bound.
    pub fn observe_ns(&self, ns: u64) {
        let (low, _) = hist::bounds(hist::bucket(ns));
        let i = self.bounds.partition_point(|&b| b <= low);
        let mut g = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        g.counts[i] += 1;
        g.sum_ns += ns;
        g.count += 1;
    }

    /// (sum s, count, per-bucket (upper bound s, count)), as the encoder takes them.
    fn snapshot(&self) -> (f64, u64, Vec<(f64, u64)>) {
        let g = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let mut buckets: Vec<(f64, u64)> = self
            .bounds
            .iter()
            .zip(&g.counts)
            .map(|(&b, &c)| (b as f64 / 1e9, c))
            .collect();
        buckets.push((f64::INFINITY, *g.counts.last().unwrap_or(&0)));
        (g.sum_ns as f64 / 1e9, g.count, buckets)
    }
}

impl TypedMetric for KernelHistogram {
    const TYPE: MetricType = MetricType::Histogram;
}

impl EncodeMetric for KernelHistogram {
    fn encode(&self, mut encoder: MetricEncoder) -> Result<(), std::fmt::Error> {
        let (sum, count, buckets) = self.snapshot();
        encoder.encode_histogram::<NoLabelSet>(sum, count, &buckets, None)
    }

    fn metric_type(&self) -> MetricType {
        Self::TYPE
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exported_bounds_are_kernel_bounds_finer_than_root_two() {
        let b = bounds_ns();
        assert_eq!(b[0], 64);
        assert!(*b.last().unwrap() >= 10_000_000, "{b:?}");
        for w in b.windows(2) {
            assert!(w[1] as f64 / w[0] as f64 <= 1.17, "{w:?}");
        }
        for &x in &b {
            assert_eq!(hist::bounds(hist::bucket(x)).0, x, "{x} is no kernel bound");
        }
    }

    #[test]
    fn every_kernel_bucket_lands_in_one_exported_bucket() {
        let b = bounds_ns();
        let h = KernelHistogram::new(Arc::new(b.clone()));
        for k in 0..hist::NBUCKETS as u32 {
            let (lo, hi) = hist::bounds(k);
            // Both ends of a kernel bucket go to the same exported bucket.
            let i = b.partition_point(|&x| x <= lo);
            let j = b.partition_point(|&x| x < hi);
            assert_eq!(
                i, j,
                "kernel bucket [{lo}, {hi}) straddles an exported bound"
            );
            if i < b.len() {
                assert!(hi <= b[i], "[{lo}, {hi}) above le={}", b[i]);
            }
            h.observe_ns(lo);
        }
        let (_, count, buckets) = h.snapshot();
        assert_eq!(count, hist::NBUCKETS as u64);
        assert_eq!(buckets.iter().map(|b| b.1).sum::<u64>(), count);
    }

    /// Prometheus' `histogram_quantile`: linear inside the bucket holding the rank.
    fn quantile(q: f64, buckets: &[(f64, u64)]) -> f64 {
        let total: u64 = buckets.iter().map(|b| b.1).sum();
        let rank = q * total as f64;
        let (mut below, mut lower) = (0u64, 0.0);
        for &(le, c) in buckets {
            if (below + c) as f64 >= rank {
                return lower + (le - lower) * (rank - below as f64) / c as f64;
            }
            below += c;
            lower = le;
        }
        lower
    }

    #[test]
    fn a_known_distribution_comes_back_within_ten_percent() {
        // Log-uniform from 150 ns to 3 µs, the range of sub-µs to µs hops: p50 is the
        // geometric mean.
        let h = KernelHistogram::new(Arc::new(bounds_ns()));
        let (lo, hi) = (150f64, 3000f64);
        let n = 20_000;
        for i in 0..n {
            let x = lo * (hi / lo).powf((i as f64 + 0.5) / n as f64);
            h.observe_ns(x as u64);
        }
        let (sum, count, buckets) = h.snapshot();
        assert_eq!(count, n);
        let exact = (lo * hi).sqrt() / 1e9;
        let got = quantile(0.5, &buckets);
        assert!((got / exact - 1.0).abs() < 0.10, "p50 {got} vs {exact}");
        let mean = (hi - lo) / (hi / lo).ln() / 1e9;
        assert!((sum / count as f64 / mean - 1.0).abs() < 0.01);
    }
}
