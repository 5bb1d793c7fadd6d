//! Open-loop request/response at a fixed rate (like wrk2).
//!
//! Request `i` (0-based, over all connections) is due at `start + i / rate`; connection
//! `c` of `C` sends requests `c, c + C, c + 2C, …`, so the connections are staggered.
//! A connection sleeps until a request is due (or sends at once when it is behind) and
//! reads the response before the next request. Latency is measured from the *intended*
//! send time (coordinated-omission correction, as wrk2 does): when responses are slow,
//! the queueing delay of the requests that should have gone out meanwhile is counted.
//! `uncorrected` measures from the actual send instead. Waiting for a send time is a
//! sleep plus a short busy-wait ([`BurstConfig::spin`]) so that timer wake-up lateness
//! does not show up as latency.

use std::io::ErrorKind;
use std::net::{Shutdown, SocketAddrV4, TcpStream};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use hdrhistogram::Histogram;

use super::conns::{Plan, run_pairs, sleep_until, tight_timer_slack};
use super::tcp::echo_with;
use super::wait::{Receiver, WaitMode};
use crate::options::Pin;
use crate::path::NetPath;
use crate::sys::netns::Netns;
use crate::sys::runmode::pin_current;

/// Thread names (comm) of the burst threads.
pub const BURST_CLIENT_COMM: &str = "np-burst-cli";
pub const BURST_SERVER_COMM: &str = "np-burst-srv";

/// Open-loop parameters.
#[derive(Clone, Debug, PartialEq)]
pub struct BurstConfig {
    /// Requests per second over all connections.
    pub rate: f64,
    /// Requests are scheduled within `[0, duration)` after the start.
    pub duration: Duration,
    pub connections: usize,
    pub req_size: usize,
    pub resp_size: usize,
    /// Bound on setup, on any single read or write, and on how far past `duration`
    /// a connection keeps sending when it is behind schedule.
    pub timeout: Duration,
    /// Busy-wait for at most this long before each intended send time instead of
    /// sleeping through it: sleeps wake up tens of µs late on many machines (VMs
    /// especially), which would be charged to the corrected latency. Costs up to
    /// `rate * spin` of one CPU (5-10 % at 1000-2000 req/s with the 50 µs default).
    /// Zero: sleep only.
    pub spin: Duration,
    /// How both ends wait for responses and requests.
    pub wait: WaitMode,
    /// Where the client and server threads run.
    pub pin: Pin,
}

impl Default for BurstConfig {
    fn default() -> Self {
        BurstConfig {
            rate: 1000.0,
            duration: Duration::from_secs(3),
            connections: 4,
            req_size: 1024,
            resp_size: 1024,
            timeout: Duration::from_secs(30),
            spin: DEFAULT_SPIN,
            wait: WaitMode::Block,
            pin: Pin::default(),
        }
    }
}

/// Default [`BurstConfig::spin`].
pub const DEFAULT_SPIN: Duration = Duration::from_micros(50);

/// Latencies of an open-loop run.
#[derive(Clone, Debug)]
pub struct BurstResult {
    /// Latency from the intended send time to the end of the response, ns.
    pub hist: Histogram<u64>,
    /// Latency from the actual send to the end of the response, ns.
    pub uncorrected: Histogram<u64>,
    /// Requests written.
    pub sent: u64,
    /// Responses received (one sample each in both histograms).
    pub completed: u64,
    /// Requests the schedule held (`sent` is less only if the timeout cut the run).
    pub scheduled: u64,
    /// From the start to the last response.
    pub elapsed: Duration,
    /// `completed / elapsed`.
    pub achieved_rate: f64,
}

impl BurstResult {
    /// Corrected latency at percentile `q` (0..=100), ns.
    pub fn percentile_ns(&self, q: f64) -> u64 {
        self.hist.value_at_quantile((q / 100.0).clamp(0.0, 1.0))
    }

    /// Uncorrected latency at percentile `q` (0..=100), ns.
    pub fn uncorrected_percentile_ns(&self, q: f64) -> u64 {
        self.uncorrected
            .value_at_quantile((q / 100.0).clamp(0.0, 1.0))
    }
}

/// Offset of request `i` from the start, ns.
fn offset_ns(i: u64, rate: f64) -> u64 {
    (i as f64 * 1e9 / rate).round() as u64
}

fn duration_ns(d: Duration) -> u64 {
    d.as_nanos().min(u128::from(u64::MAX)) as u64
}

/// Number of requests scheduled at `rate` within `duration`: the `i` with
/// `offset(i) < duration` (e.g. 2000 for 2000 req/s over 1 s).
pub fn scheduled_requests(rate: f64, duration: Duration) -> u64 {
    if !(rate.is_finite() && rate > 0.0) {
        return 0;
    }
    let d = duration_ns(duration);
    let mut n = (d as f64 * rate / 1e9).floor() as u64;
    while offset_ns(n, rate) < d {
        n += 1;
    }
    while n > 0 && offset_ns(n - 1, rate) >= d {
        n -= 1;
    }
    n
}

/// Open-loop run from `lab.client_ns` to `lab.connect_to`, served on `lab.server_bind`
/// (the request/response port: do not run both at once).
pub fn run_burst(lab: &NetPath, cfg: &BurstConfig) -> Result<BurstResult> {
    run_burst_to(
        &lab.client_ns,
        &lab.server_ns,
        lab.server_bind,
        lab.connect_to,
        cfg,
    )
}

/// One run per multiplier at `cfg.rate * m` (e.g. `[1.0, 2.0]`: base rate, then a 2×
/// burst), one after the other, each on fresh connections.
pub fn run_burst_phases(
    lab: &NetPath,
    cfg: &BurstConfig,
    multipliers: &[f64],
) -> Result<Vec<(f64, BurstResult)>> {
    let mut out = Vec::with_capacity(multipliers.len());
    for &m in multipliers {
        if !(m.is_finite() && m > 0.0) {
            bail!("invalid rate multiplier {m}");
        }
        let c = BurstConfig {
            rate: cfg.rate * m,
            ..cfg.clone()
        };
        let r = run_burst(lab, &c).with_context(|| format!("burst phase ×{m}"))?;
        out.push((m, r));
    }
    Ok(out)
}

/// Open-loop run from `client_ns` to `connect`, served on `bind` in `server_ns`.
pub fn run_burst_to(
    client_ns: &Netns,
    server_ns: &Netns,
    bind: SocketAddrV4,
    connect: SocketAddrV4,
    cfg: &BurstConfig,
) -> Result<BurstResult> {
    if !(cfg.rate.is_finite() && cfg.rate > 0.0) {
        bail!("burst rate must be a positive number, not {}", cfg.rate);
    }
    if cfg.connections == 0 {
        bail!("burst needs at least one connection");
    }
    if cfg.req_size == 0 || cfg.resp_size == 0 {
        bail!("request and response sizes must be at least 1 byte");
    }
    let scheduled = scheduled_requests(cfg.rate, cfg.duration);
    let plan = Plan {
        client_ns,
        server_ns,
        bind,
        connect,
        connections: cfg.connections,
        setup_timeout: cfg.timeout,
        io_timeout: cfg.timeout,
        client_comm: BURST_CLIENT_COMM,
        server_comm: BURST_SERVER_COMM,
    };
    let (conns, _) = run_pairs(
        &plan,
        |c, conn, start| client(c, conn, start, cfg, scheduled),
        |_, conn| {
            pin_current(cfg.pin.server)?;
            let rx = Receiver::new(cfg.wait, cfg.pin.same_cpu(), None).sharing(cfg.connections > 1);
            echo_with(conn, cfg.req_size, cfg.resp_size, &rx)
        },
    )?;

    let mut hist = new_hist()?;
    let mut uncorrected = new_hist()?;
    let (mut sent, mut completed) = (0, 0);
    let mut elapsed = Duration::ZERO;
    for c in conns {
        hist.add(&c.hist).context("merging histograms")?;
        uncorrected
            .add(&c.uncorrected)
            .context("merging histograms")?;
        sent += c.sent;
        completed += c.completed;
        elapsed = elapsed.max(c.last);
    }
    if sent < scheduled {
        log::warn!(
            "open loop stopped by the {:?} timeout after {sent} of {scheduled} requests",
            cfg.timeout
        );
    }
    let secs = elapsed.as_secs_f64();
    Ok(BurstResult {
        hist,
        uncorrected,
        sent,
        completed,
        scheduled,
        elapsed,
        achieved_rate: if secs > 0.0 {
            completed as f64 / secs
        } else {
            0.0
        },
    })
}

fn new_hist() -> Result<Histogram<u64>> {
    Histogram::<u64>::new(3).context("creating histogram")
}

struct ConnResult {
    hist: Histogram<u64>,
    uncorrected: Histogram<u64>,
    sent: u64,
    completed: u64,
    /// Start to last response.
    last: Duration,
}

fn ns_between(a: Instant, b: Instant) -> u64 {
    duration_ns(b.saturating_duration_since(a)).max(1)
}

fn client(
    c: usize,
    mut conn: TcpStream,
    start: Instant,
    cfg: &BurstConfig,
    scheduled: u64,
) -> Result<ConnResult> {
    tight_timer_slack();
    pin_current(cfg.pin.client)?;
    conn.set_nodelay(true)?;
    let rx =
        Receiver::new(cfg.wait, cfg.pin.same_cpu(), Some(cfg.timeout)).sharing(cfg.connections > 1);
    rx.prepare(&conn, None)?;
    let stop_at = start + cfg.duration + cfg.timeout;
    let step = cfg.connections as u64;
    let mut req = vec![0xa5u8; cfg.req_size];
    let mut resp = vec![0u8; cfg.resp_size];
    let mut r = ConnResult {
        hist: new_hist()?,
        uncorrected: new_hist()?,
        sent: 0,
        completed: 0,
        last: Duration::ZERO,
    };
    let mut i = c as u64;
    let res = (|| -> Result<()> {
        while i < scheduled {
            let intended = start + Duration::from_nanos(offset_ns(i, cfg.rate));
            if Instant::now() >= stop_at {
                break;
            }
            sleep_until(intended, cfg.spin);
            let b = i.to_le_bytes();
            let n = b.len().min(req.len());
            req[..n].copy_from_slice(&b[..n]);
            let sent_at = Instant::now();
            rx.write_all(&mut conn, &req)
                .context("client: writing a request")?;
            r.sent += 1;
            match rx.read_exact(&mut conn, &mut resp) {
                Ok(()) => {}
                Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                    log::warn!("open loop: no response within {:?}", cfg.timeout);
                    break;
                }
                Err(e) => return Err(e).context("client: reading a response"),
            }
            let done = Instant::now();
            r.hist.record(ns_between(intended, done))?;
            r.uncorrected.record(ns_between(sent_at, done))?;
            r.completed += 1;
            r.last = done - start;
            i += step;
        }
        Ok(())
    })();
    // EOF for the server.
    let _ = conn.shutdown(Shutdown::Write);
    drop(conn);
    res.map(|()| r)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schedule_counts() {
        let s = Duration::from_secs(1);
        assert_eq!(scheduled_requests(2000.0, s), 2000);
        assert_eq!(scheduled_requests(3.0, s), 3);
        assert_eq!(scheduled_requests(2.5, s), 3); // 0, 0.4, 0.8
        assert_eq!(scheduled_requests(1.0, Duration::from_millis(1)), 1);
        assert_eq!(scheduled_requests(1000.0, Duration::ZERO), 0);
        assert_eq!(scheduled_requests(0.0, s), 0);
        assert_eq!(scheduled_requests(f64::NAN, s), 0);
        // Exactly the i with offset(i) < duration.
        for rate in [1.0, 7.0, 333.3, 2000.0, 12345.6] {
            let n = scheduled_requests(rate, s);
            assert!(offset_ns(n - 1, rate) < 1_000_000_000);
            assert!(offset_ns(n, rate) >= 1_000_000_000);
        }
    }
}
