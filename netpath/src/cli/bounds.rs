//! Ranges of the numeric command-line options, enforced by clap at parse time.
//!
//! Every count, size, rate and duration has an upper bound so that no option can make a run
//! allocate without limit, spawn more threads than the machine has, or run for days; zero is
//! refused where it would make a run measure nothing. The help text of each option names its
//! range (the constants here), and a value outside it is one line and exit 2 before anything
//! is created.

use std::fmt::Display;
use std::str::FromStr;

/// `--rounds`: untraced repetitions per driver.
pub const ROUNDS: (usize, usize) = (1, 100);
/// `--streams`: parallel bulk connections (two threads each, client and server).
pub const STREAMS: (usize, usize) = (1, 256);
/// `-n/--requests`: measured request/response exchanges per run.
pub const REQUESTS: (u64, u64) = (1, 1_000_000);
/// `--warmup`: unmeasured exchanges first (0: none).
pub const WARMUP: (u64, u64) = (0, 100_000);
/// `--req-size`, `--resp-size`: payload bytes (1 B to 1 MiB).
pub const PAYLOAD: (usize, usize) = (1, 1 << 20);
/// `--sample-every`: keep one timeline in N (0: none; 1: every packet).
pub const SAMPLE_EVERY: (u32, u32) = (0, 1_000_000);
/// `--bulk-secs` (0: no bulk), `--burst-secs`: seconds per phase.
pub const PHASE_SECS: (f64, f64) = (0.0, 600.0);
/// `--burst`: open-loop requests per second (0: no burst phase).
pub const BURST_RATE: (f64, f64) = (0.0, 100_000.0);
/// `bench --secs`: seconds per sockperf, iperf3 and bulk run.
pub const BENCH_SECS: (u64, u64) = (1, 600);
/// `trace -c/--count`: timelines to print.
pub const TRACE_COUNT: (usize, usize) = (1, 100_000);
/// `trace --duration`: seconds to wait for containers' packets.
pub const TRACE_SECS: (f64, f64) = (0.1, 3600.0);

/// A parser for an integer option in `lo..=hi`.
pub fn int<T>(range: (T, T)) -> impl Fn(&str) -> Result<T, String> + Clone + Send + Sync + 'static
where
    T: FromStr + PartialOrd + Display + Copy + Send + Sync + 'static,
{
    move |s: &str| {
        let (lo, hi) = range;
        let v: T = s
            .trim()
            .parse()
            .map_err(|_| format!("not a whole number; give one from {lo} to {hi}"))?;
        if v < lo || v > hi {
            return Err(out_of_range(lo, hi));
        }
        Ok(v)
    }
}

/// A parser for a non-negative decimal option (seconds, rates) in `lo..=hi`; also refuses
/// NaN and infinities.
pub fn float(range: (f64, f64)) -> impl Fn(&str) -> Result<f64, String> + Clone + Send + Sync {
    move |s: &str| {
        let (lo, hi) = range;
        let v: f64 = s
            .trim()
            .parse()
            .map_err(|_| format!("not a number; give one from {lo} to {hi}"))?;
        if !v.is_finite() || v < lo || v > hi {
            return Err(out_of_range(lo, hi));
        }
        Ok(v)
    }
}

fn out_of_range(lo: impl Display, hi: impl Display) -> String {
    format!("out of range; give one from {lo} to {hi}")
}

/// Seconds for a phase that is on (`--burst-secs` when bursts run): more than zero.
pub fn phase_secs_nonzero(s: &str) -> Result<f64, String> {
    let v = float(PHASE_SECS)(s)?;
    if v <= 0.0 {
        return Err(format!("give more than 0 (and at most {})", PHASE_SECS.1));
    }
    Ok(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_enforced() {
        let rounds = int(ROUNDS);
        assert_eq!(rounds("3"), Ok(3));
        assert!(rounds("0").unwrap_err().contains("from 1 to 100"));
        assert!(rounds("101").is_err());
        assert!(rounds("-1").is_err());
        assert!(rounds("x").unwrap_err().contains("not a whole number"));
        let size = int(PAYLOAD);
        assert!(size("100000000").is_err());
        assert_eq!(size("1048576"), Ok(1 << 20));
        let warm = int(WARMUP);
        assert_eq!(warm("0"), Ok(0));
        assert!(warm("99999999999999").is_err());
        assert!(warm("999999999999999999999999").is_err());
        let secs = float(PHASE_SECS);
        assert_eq!(secs("0"), Ok(0.0));
        assert!(secs("100000000000").is_err());
        assert!(secs("nan").is_err());
        assert!(secs("inf").is_err());
        assert!(secs("-1").is_err());
        assert!(phase_secs_nonzero("0").is_err());
        assert_eq!(phase_secs_nonzero("0.5"), Ok(0.5));
        assert!(float(BURST_RATE)("100000000").is_err());
    }
}
