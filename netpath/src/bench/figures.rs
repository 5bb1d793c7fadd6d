//! The bench's figures: a run's round trip (`Rtt`) or bulk rate (`Bulk`), a ratio of two runs
//! (`Ratios`, `f64`), and `Rounds`: one figure per round with its median, the one shape every
//! "per round, then the median" figure of the bench report has.

use serde::Serialize;

use super::tools::median;
use crate::harness::RrResult;
use crate::record::RttSummary;

/// Round-trip figures of one run, µs.
#[derive(Clone, Copy, Debug, Default, Serialize, schemars::JsonSchema)]
pub struct Rtt {
    pub p50_us: f64,
    pub p99_us: f64,
    pub mean_us: f64,
}

impl Rtt {
    pub(super) fn of(r: &RrResult) -> Rtt {
        let s = RttSummary::from_rr(r);
        Rtt {
            p50_us: s.p50_us,
            p99_us: s.p99_us,
            mean_us: s.mean_us,
        }
    }
}

/// One run against another (each figure divided by its own).
#[derive(Clone, Copy, Debug, Default, Serialize, schemars::JsonSchema)]
pub struct Ratios {
    pub p50: f64,
    pub p99: f64,
    pub mean: f64,
}

impl Ratios {
    pub(super) fn of(num: &Rtt, den: &Rtt) -> Ratios {
        Ratios {
            p50: num.p50_us / den.p50_us,
            p99: num.p99_us / den.p99_us,
            mean: num.mean_us / den.mean_us,
        }
    }
}

/// One bulk run's rate.
#[derive(Clone, Copy, Debug, Default, Serialize, schemars::JsonSchema)]
pub struct Bulk {
    pub gbit_per_s: f64,
    pub retransmits: u64,
}

/// A figure the median over rounds is taken of, field by field (NaN where no round gave one).
pub trait Median: Sized {
    fn median(all: &[Self]) -> Self;
}

impl Median for f64 {
    fn median(all: &[f64]) -> f64 {
        median(all.iter().copied())
    }
}

/// `Median` taken field by field, for figures whose fields are all `f64`.
macro_rules! median_by_field {
    ($t:ident { $($field:ident),* }) => {
        impl Median for $t {
            fn median(all: &[$t]) -> $t {
                $t { $($field: median(all.iter().map(|x| x.$field)),)* }
            }
        }
    };
}

median_by_field!(Rtt {
    p50_us,
    p99_us,
    mean_us
});
median_by_field!(Ratios { p50, p99, mean });

impl Median for Bulk {
    fn median(all: &[Bulk]) -> Bulk {
        Bulk {
            gbit_per_s: median(all.iter().map(|b| b.gbit_per_s)),
            retransmits: median(all.iter().map(|b| b.retransmits as f64)) as u64,
        }
    }
}

/// A figure per round, in round order, and their median: the median is what the report's
/// tables show, the rounds are its spread (a ratio's rounds are each round's own ratio, runs
/// of the same round against each other, and its median is the median of those).
#[derive(Clone, Debug, Default, Serialize, schemars::JsonSchema)]
#[schemars(rename = "Rounds_of_{T}")]
pub struct Rounds<T> {
    pub median: T,
    pub rounds: Vec<T>,
}

impl<T: Median + Default> Rounds<T> {
    pub fn of(rounds: Vec<T>) -> Rounds<T> {
        Rounds {
            median: T::median(&rounds),
            rounds,
        }
    }

    /// Each round's `f(a, b)` (the rounds paired in order), and their median.
    pub fn pairwise<A, B>(a: &Rounds<A>, b: &Rounds<B>, f: impl Fn(&A, &B) -> T) -> Rounds<T> {
        Rounds::of(
            a.rounds
                .iter()
                .zip(&b.rounds)
                .map(|(a, b)| f(a, b))
                .collect(),
        )
    }

    /// Adds a round; the median is taken again (a handful of rounds: cheap).
    pub fn push(&mut self, v: T) {
        self.rounds.push(v);
        self.median = T::median(&self.rounds);
    }

    pub fn last(&self) -> Option<&T> {
        self.rounds.last()
    }
}

impl Rounds<Rtt> {
    /// Each round's `self / den`, and their median.
    pub fn vs(&self, den: &Rounds<Rtt>) -> Rounds<Ratios> {
        Rounds::pairwise(self, den, Ratios::of)
    }
}

impl Rounds<Bulk> {
    /// Each round's rate over `den`'s, and their median.
    pub fn vs(&self, den: &Rounds<Bulk>) -> Rounds<f64> {
        Rounds::pairwise(self, den, |a, b| a.gbit_per_s / b.gbit_per_s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rounds_keep_their_order_and_their_median_follows_them() {
        let mut r = Rounds::<f64>::default();
        for v in [3.0, 1.0, 2.0] {
            r.push(v);
        }
        assert_eq!(r.rounds, [3.0, 1.0, 2.0]);
        assert_eq!(r.median, 2.0);
        let rtt = |p: f64| Rtt {
            p50_us: p,
            p99_us: 2.0 * p,
            mean_us: p,
        };
        let a = Rounds::of(vec![rtt(2.0), rtt(6.0), rtt(3.0)]);
        let b = Rounds::of(vec![rtt(1.0), rtt(2.0), rtt(3.0)]);
        let q = a.vs(&b);
        // Each round against its own round, then the median of those: 2, 3, 1 → 2.
        assert_eq!(
            q.rounds.iter().map(|x| x.p50).collect::<Vec<_>>(),
            [2.0, 3.0, 1.0]
        );
        assert_eq!(q.median.p50, 2.0);
        assert!(Rounds::<f64>::of(Vec::new()).median.is_nan());
    }
}
