//! What a request/response run is asked and what it measures, whatever its protocol: the
//! configuration, the result, the hooks around the measured phase, the threads' names.

use std::os::fd::RawFd;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result};
use hdrhistogram::Histogram;

use super::proto::Proto;
use super::wait::{WaitMode, napi_id_of};
use crate::options::Pin;
use crate::path::NetPath;
use crate::sys::runmode::pin_current;

/// What a request/response run sends: how many requests, their sizes, its bound, Nagle. A
/// compare's options hold this once (`CompareOptions::rr`); how each run waits, where it
/// runs and in which protocol come from the run's mode and protocol (`RrConfig`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RrLoad {
    /// Measured requests.
    pub requests: u64,
    /// Unmeasured requests on the same connection before measuring.
    pub warmup: u64,
    pub req_size: usize,
    pub resp_size: usize,
    /// Bound on the run: connect, warmup and measured requests (time spent inside the
    /// `Phases` hooks is not counted).
    pub timeout: Duration,
    /// TCP_NODELAY on the client's socket (the server's always has it: it answers in one
    /// write). Off, with `split_request`, Nagle holds the request's second part until the
    /// first is acknowledged, and the server delays that acknowledgement: `tune --knob nodelay`.
    pub nodelay: bool,
    /// The client writes each request in two writes (first half, then the rest), the
    /// small-write pattern Nagle's algorithm meets in request/response protocols.
    pub split_request: bool,
}

impl Default for RrLoad {
    fn default() -> Self {
        RrLoad {
            requests: 20_000,
            warmup: 1_000,
            req_size: 1024,
            resp_size: 1024,
            timeout: Duration::from_secs(30),
            nodelay: true,
            split_request: false,
        }
    }
}

/// One request/response run: what it sends, how both ends wait, where they run, and the
/// protocol.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RrConfig {
    pub load: RrLoad,
    /// How both ends wait for data.
    pub wait: WaitMode,
    /// Where the client and server threads run.
    pub pin: Pin,
    /// TCP connection, UDP datagrams or ICMP echo.
    pub proto: Proto,
}

/// Round-trip times of the measured requests.
#[derive(Clone, Debug)]
pub struct RrResult {
    /// RTT in nanoseconds, one sample per measured request.
    pub hist: Histogram<u64>,
    /// Measured requests completed (less than `requests` only if the timeout hit).
    pub count: u64,
    /// Wall time of the measured phase.
    pub elapsed: Duration,
    /// Requests per second over the measured phase.
    pub rps: f64,
    pub mean_ns: f64,
    /// `--wait busy-poll`: NAPI ids the client's and the server's socket last received from
    /// (0: the device has no NAPI, busy polling degraded to blocking receives there).
    pub napi_ids: Option<(u32, u32)>,
}

impl RrResult {
    /// RTT at percentile `q` (0..=100), in ns.
    pub fn percentile_ns(&self, q: f64) -> u64 {
        self.hist.value_at_quantile((q / 100.0).clamp(0.0, 1.0))
    }

    /// True if the timeout cut the measured phase short.
    pub fn truncated(&self, cfg: &RrConfig) -> bool {
        self.count < cfg.load.requests
    }
}

/// Hooks around the measured phase, called on the client thread (e.g. to attach or
/// enable probes for exactly these two threads).
pub trait Phases: Sync {
    fn measure_start(&self, client_tid: u32, server_tid: u32) -> Result<()>;
    fn measure_end(&self, client_tid: u32, server_tid: u32) -> Result<()>;
}

/// No hooks.
pub struct NoPhases;

impl Phases for NoPhases {
    fn measure_start(&self, _: u32, _: u32) -> Result<()> {
        Ok(())
    }
    fn measure_end(&self, _: u32, _: u32) -> Result<()> {
        Ok(())
    }
}

/// Thread names (comm) of the harness threads.
pub const CLIENT_COMM: &str = "np-rr-cli";
pub const SERVER_COMM: &str = "np-rr-srv";

pub fn gettid() -> u32 {
    // SAFETY: gettid has no preconditions.
    unsafe { libc::gettid() as u32 }
}

/// One request/response run as each of its ends sees it: the path, the settings, the phase
/// hooks and the bound every wait is held to.
pub struct Run<'a> {
    pub lab: &'a NetPath,
    pub cfg: &'a RrConfig,
    pub phases: &'a dyn Phases,
    /// `cfg.timeout` from the start of the run.
    pub deadline: Instant,
}

impl<'a> Run<'a> {
    pub fn new(lab: &'a NetPath, cfg: &'a RrConfig, phases: &'a dyn Phases) -> Run<'a> {
        let deadline = Instant::now() + cfg.load.timeout;
        Run {
            lab,
            cfg,
            phases,
            deadline,
        }
    }

    /// Puts the calling thread where the client runs: on its CPU (`--pin`), in its namespace.
    pub fn enter_client(&self) -> Result<()> {
        pin_current(self.cfg.pin.client)?;
        self.lab.client_ns.enter()
    }

    /// Puts the calling thread where the server runs.
    pub fn enter_server(&self) -> Result<()> {
        pin_current(self.cfg.pin.server)?;
        self.lab.server_ns.enter()
    }

    /// Leaves a busy-polling server's NAPI id in `napi` once warm-up has been served: its
    /// socket takes the id from the packets it receives, so it is known only by then.
    pub fn note_server_napi(&self, served: u64, fd: RawFd, napi: &AtomicU32) {
        if served == self.cfg.load.warmup.max(1) && self.cfg.wait == WaitMode::BusyPoll {
            napi.store(napi_id_of(fd), Ordering::Relaxed);
        }
    }
}

/// The client's run, whatever it sends: `cfg.warmup` exchanges unmeasured, then up to
/// `cfg.requests` timed ones between the phase hooks (`tids`: client's and server's thread).
/// `one(seq)` is exchange `seq`; `napi` reads the socket's NAPI id after warm-up (busy-poll).
pub fn timed_loop(
    run: &Run,
    tids: (u32, u32),
    napi: &dyn Fn() -> u32,
    one: &mut dyn FnMut(u64) -> Result<()>,
) -> Result<RrResult> {
    let Run {
        cfg,
        phases,
        deadline,
        ..
    } = *run;
    let mut seq = 0u64;
    for _ in 0..cfg.load.warmup {
        if Instant::now() >= deadline {
            break;
        }
        one(seq)?;
        seq += 1;
    }
    let napi_ids = (cfg.wait == WaitMode::BusyPoll).then(|| (napi(), 0));
    let mut hist = Histogram::<u64>::new(3).context("creating histogram")?;
    let hook_t0 = Instant::now();
    phases
        .measure_start(tids.0, tids.1)
        .context("measure_start hook failed")?;
    // Time spent in the hook (e.g. attaching probes) is not charged to the run's bound.
    let deadline = deadline + hook_t0.elapsed();
    let t0 = Instant::now();
    let mut count = 0u64;
    let mut err = None;
    while count < cfg.load.requests {
        let t = Instant::now();
        if t >= deadline {
            break;
        }
        if let Err(e) = one(seq) {
            err = Some(e);
            break;
        }
        let ns = t.elapsed().as_nanos().min(u128::from(u64::MAX)) as u64;
        hist.record(ns.max(1)).context("recording a sample")?;
        count += 1;
        seq += 1;
    }
    let elapsed = t0.elapsed();
    let end = phases.measure_end(tids.0, tids.1);
    if let Some(e) = err {
        return Err(e);
    }
    end.context("measure_end hook failed")?;
    Ok(rr_result(cfg, hist, count, elapsed, napi_ids))
}

/// A measured run's result (and the line saying so when the timeout cut it short); one for
/// the TCP and the datagram loops.
pub fn rr_result(
    cfg: &RrConfig,
    hist: Histogram<u64>,
    count: u64,
    elapsed: Duration,
    napi_ids: Option<(u32, u32)>,
) -> RrResult {
    if count < cfg.load.requests {
        log::warn!(
            "request/response stopped by the {:?} timeout after {count} of {} requests",
            cfg.load.timeout,
            cfg.load.requests
        );
    }
    let secs = elapsed.as_secs_f64();
    RrResult {
        mean_ns: if count > 0 { hist.mean() } else { 0.0 },
        rps: if secs > 0.0 { count as f64 / secs } else { 0.0 },
        hist,
        count,
        elapsed,
        napi_ids,
    }
}
