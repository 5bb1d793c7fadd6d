//! Ranges of the numeric command-line options and the one duration syntax, enforced by clap at
//! parse time.
//!
//! Every count, size, rate and duration has an upper bound so that no option can make a run
//! allocate without limit, spawn more threads than the machine has, or run for days; zero is
//! refused where it would make a run measure nothing. A value outside its range is one line and
//! exit 2 before anything is created. Integers use clap's ranged parsers; durations are
//! humantime (`2s`, `500ms`, `50us`), a bare number being seconds (the older spelling).

use std::time::Duration;

use clap::builder::RangedU64ValueParser;

/// `--rounds`: untraced repetitions per driver.
pub fn rounds() -> RangedU64ValueParser<usize> {
    RangedU64ValueParser::new().range(1..=100)
}

/// `--streams`: parallel bulk connections (two threads each, client and server).
pub fn streams() -> RangedU64ValueParser<usize> {
    RangedU64ValueParser::new().range(1..=256)
}

/// `-n/--requests`'s default, the same in every command (tune's nodelay knob excepted).
pub const REQUESTS: u64 = 10_000;

/// `-n/--requests`: measured request/response exchanges per run.
pub fn requests() -> RangedU64ValueParser<u64> {
    RangedU64ValueParser::new().range(1..=1_000_000)
}

/// `--warmup`: unmeasured exchanges first (0: none).
pub fn warmup() -> RangedU64ValueParser<u64> {
    RangedU64ValueParser::new().range(0..=100_000)
}

/// `--req-size`, `--resp-size`: payload bytes (1 B to 1 MiB).
pub fn payload() -> RangedU64ValueParser<usize> {
    RangedU64ValueParser::new().range(1..=1 << 20)
}

/// `--sample-every`: keep one timeline in N (0: none; 1: every packet).
pub fn sample_every() -> RangedU64ValueParser<u32> {
    RangedU64ValueParser::new().range(0..=1_000_000)
}

/// `trace -c/--count`: timelines to print.
pub fn trace_count() -> RangedU64ValueParser<usize> {
    RangedU64ValueParser::new().range(1..=100_000)
}

/// `--burst`: open-loop requests per second (0: no burst phase).
pub const BURST_RATE: (f64, f64) = (0.0, 100_000.0);

/// `validate --delays`, µs: what the delay program can hold a packet for.
pub const DELAY_US: (f64, f64) = (0.0, crate::validate::MAX_DELAY_US);

/// `bench --journeys`: one-way journeys of the journey-count run (0: none), two per request,
/// so at most twice `--requests`'s bound.
pub fn journeys() -> RangedU64ValueParser<u64> {
    RangedU64ValueParser::new().range(0..=2_000_000)
}

/// Longest phase (`--bulk`, `--burst-duration`, `bench --duration`).
pub const PHASE: Duration = Duration::from_secs(600);

/// A parser for a non-negative decimal option (a rate) in `lo..=hi`; also refuses NaN and
/// infinities.
pub fn float(range: (f64, f64)) -> impl Fn(&str) -> Result<f64, String> + Clone + Send + Sync {
    move |s: &str| {
        let (lo, hi) = range;
        let v: f64 = s
            .trim()
            .parse()
            .map_err(|_| format!("not a number; give one from {lo} to {hi}"))?;
        if !v.is_finite() || v < lo || v > hi {
            return Err(format!("out of range; give one from {lo} to {hi}"));
        }
        Ok(v)
    }
}

/// A parser for a duration in `lo..=hi`: `2s`, `500ms`, `50us`, `1m`, or a bare number of
/// seconds.
pub fn duration(
    lo: Duration,
    hi: Duration,
) -> impl Fn(&str) -> Result<Duration, String> + Clone + Send + Sync + 'static {
    move |s: &str| {
        let s = s.trim();
        let range = || {
            let f = humantime::format_duration;
            if lo.is_zero() {
                format!("give one from 0 to {}", f(hi))
            } else {
                format!("give one from {} to {}", f(lo), f(hi))
            }
        };
        let d = match s.parse::<f64>() {
            Ok(secs) => Duration::try_from_secs_f64(secs)
                .map_err(|_| format!("out of range; {}", range()))?,
            Err(_) => humantime::parse_duration(s)
                .map_err(|e| format!("not a duration ({e}); write it like 2s, 500ms or 50us"))?,
        };
        if d < lo || d > hi {
            return Err(format!("out of range; {}", range()));
        }
        Ok(d)
    }
}

/// `--bulk` (0: no bulk): at most ten minutes.
pub fn phase() -> impl Fn(&str) -> Result<Duration, String> + Clone + Send + Sync + 'static {
    duration(Duration::ZERO, PHASE)
}

/// A phase that is on (`--burst-duration`, `bench --duration`): more than zero.
pub fn phase_nonzero() -> impl Fn(&str) -> Result<Duration, String> + Clone + Send + Sync + 'static
{
    duration(Duration::from_millis(1), PHASE)
}

/// `trace --duration`: how long to wait for containers' packets.
pub fn trace_wait() -> impl Fn(&str) -> Result<Duration, String> + Clone + Send + Sync + 'static {
    duration(Duration::from_millis(100), Duration::from_secs(3600))
}

/// `serve --rescan`: between listings of the running containers.
pub fn rescan() -> impl Fn(&str) -> Result<Duration, String> + Clone + Send + Sync + 'static {
    duration(Duration::from_millis(100), Duration::from_secs(3600))
}

/// What a value parser makes of `s`, for tests.
#[cfg(test)]
fn parse<P: clap::builder::TypedValueParser>(p: P, s: &str) -> Result<P::Value, String> {
    let cmd = clap::Command::new("t");
    p.parse_ref(&cmd, None, std::ffi::OsStr::new(s))
        .map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_enforced() {
        assert_eq!(parse(rounds(), "3"), Ok(3));
        assert!(parse(rounds(), "0").unwrap_err().contains("1..=100"));
        assert!(parse(rounds(), "101").is_err());
        assert!(parse(rounds(), "-1").is_err());
        assert!(parse(rounds(), "x").is_err());
        assert!(parse(payload(), "100000000").is_err());
        assert_eq!(parse(payload(), "1048576"), Ok(1 << 20));
        assert_eq!(parse(warmup(), "0"), Ok(0));
        assert!(parse(warmup(), "99999999999999").is_err());
        assert!(parse(warmup(), "999999999999999999999999").is_err());
        assert!(float(BURST_RATE)("100000000").is_err());
        assert!(float(BURST_RATE)("nan").is_err());
        assert!(float(DELAY_US)("50.5").is_err());
        assert_eq!(float(DELAY_US)("0.5"), Ok(0.5));
        assert!(parse(journeys(), "2000001").is_err());
    }

    #[test]
    fn one_duration_syntax() {
        let bulk = phase();
        assert_eq!(bulk("2s"), Ok(Duration::from_secs(2)));
        assert_eq!(bulk("500ms"), Ok(Duration::from_millis(500)));
        // The older spelling: a bare number of seconds.
        assert_eq!(bulk("2"), Ok(Duration::from_secs(2)));
        assert_eq!(bulk("0.5"), Ok(Duration::from_millis(500)));
        assert_eq!(bulk("0"), Ok(Duration::ZERO));
        assert!(bulk("100000000000").unwrap_err().contains("out of range"));
        assert!(bulk("nan").is_err());
        assert!(bulk("inf").is_err());
        assert!(bulk("-1").is_err());
        assert!(bulk("2 parsecs").unwrap_err().contains("not a duration"));
        assert!(phase_nonzero()("0").is_err());
        assert_eq!(phase_nonzero()("0.5"), Ok(Duration::from_millis(500)));
        assert!(trace_wait()("0").unwrap_err().contains("100ms"));
    }
}
