//! TCP request/response ping-pong (like sockperf ping-pong) between the lab's client and
//! server namespaces.
//!
//! Plain blocking std threads on purpose: the eBPF side correlates by thread id and by
//! the syscalls std makes here (`write` on a `TcpStream` is `sendto`, `read` is
//! `recvfrom`). Only `read_exact` / `write_all` are used, never vectored I/O.

use std::io::ErrorKind;
use std::net::{SocketAddr, TcpStream};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};
use hdrhistogram::Histogram;

use super::proto::Proto;
use super::runmode::{Pin, Receiver, WaitMode, incoming_napi_id, pin_current};
use crate::path::NetPath;

/// Ping-pong parameters.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RrConfig {
    /// Measured requests.
    pub requests: u64,
    /// Unmeasured requests on the same connection before measuring.
    pub warmup: u64,
    pub req_size: usize,
    pub resp_size: usize,
    /// Bound on the run: connect, warmup and measured requests (time spent inside the
    /// `Phases` hooks is not counted).
    pub timeout: Duration,
    /// How both ends wait for data.
    pub wait: WaitMode,
    /// Where the client and server threads run.
    pub pin: Pin,
    /// TCP_NODELAY on the client's socket (the server's always has it: it answers in one
    /// write). Off, with `split_request`, Nagle holds the request's second part until the
    /// first is acknowledged, and the server delays that acknowledgement: `tune --knob nodelay`.
    pub nodelay: bool,
    /// The client writes each request in two writes (first half, then the rest), the
    /// small-write pattern Nagle's algorithm meets in request/response protocols.
    pub split_request: bool,
    /// TCP connection, UDP datagrams or ICMP echo.
    pub proto: Proto,
    /// `compare --proto a,b,…`: the other protocols measured in the same interleaved rounds,
    /// each in a row of its own (the harness itself runs `proto`).
    pub also: Vec<Proto>,
}

impl Default for RrConfig {
    fn default() -> Self {
        RrConfig {
            requests: 20_000,
            warmup: 1_000,
            req_size: 1024,
            resp_size: 1024,
            timeout: Duration::from_secs(30),
            wait: WaitMode::Block,
            pin: Pin::default(),
            nodelay: true,
            split_request: false,
            proto: Proto::Tcp,
            also: Vec::new(),
        }
    }
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
        self.count < cfg.requests
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

pub(super) fn gettid() -> u32 {
    // SAFETY: gettid has no preconditions.
    unsafe { libc::gettid() as u32 }
}

/// Run the ping-pong from `lab.client_ns` to `lab.connect_to`, served by one connection
/// on `lab.server_bind` in `lab.server_ns`.
pub fn run_rr(lab: &NetPath, cfg: &RrConfig, phases: &dyn Phases) -> Result<RrResult> {
    if cfg.req_size == 0 || cfg.resp_size == 0 {
        bail!("request and response sizes must be at least 1 byte");
    }
    if lab.server_bind.ip().is_unspecified() {
        bail!("refusing to bind the lab server to a wildcard address");
    }
    if let Some(max) = cfg.proto.max_payload()
        && cfg.req_size.max(cfg.resp_size) > max
    {
        bail!(
            "--proto {}: a request or response of {} bytes does not fit one datagram (at most {max}): use --req-size/--resp-size up to {max}",
            cfg.proto,
            cfg.req_size.max(cfg.resp_size)
        );
    }
    match cfg.proto {
        Proto::Tcp => {}
        Proto::Udp => return super::dgram::run_udp(lab, cfg, phases),
        Proto::Icmp => return super::icmp::run_icmp(lab, cfg, phases),
    }
    let deadline = Instant::now() + cfg.timeout;

    let server_napi = &std::sync::atomic::AtomicU32::new(0);
    std::thread::scope(|s| {
        let (ready_tx, ready_rx) = mpsc::channel::<Result<u32>>();

        let server = std::thread::Builder::new()
            .name(SERVER_COMM.into())
            .spawn_scoped(s, move || serve(lab, cfg, deadline, ready_tx, server_napi))
            .context("spawning the server thread")?;

        let wait = deadline.saturating_duration_since(Instant::now());
        let server_tid = match ready_rx.recv_timeout(wait) {
            Ok(Ok(tid)) => tid,
            Ok(Err(e)) => {
                let _ = server.join();
                return Err(e);
            }
            Err(_) => {
                return Err(match server.join() {
                    Ok(Err(e)) => e,
                    Ok(Ok(())) => anyhow!("server thread ended before listening"),
                    Err(p) => anyhow!("server thread panicked: {}", panic_msg(&p)),
                });
            }
        };

        let client = std::thread::Builder::new()
            .name(CLIENT_COMM.into())
            .spawn_scoped(s, move || client(lab, cfg, deadline, phases, server_tid))
            .context("spawning the client thread")?;

        let cres = client
            .join()
            .unwrap_or_else(|p| Err(anyhow!("client thread panicked: {}", panic_msg(&p))));
        // If the client failed before connecting, the server is still in accept: it
        // gives up on its own at the deadline, but wake it now with a connection.
        if cres.is_err() {
            poke(lab);
        }
        let sres = server
            .join()
            .unwrap_or_else(|p| Err(anyhow!("server thread panicked: {}", panic_msg(&p))));
        match (cres, sres) {
            (Ok(mut r), Ok(())) => {
                if let Some(ids) = r.napi_ids.as_mut() {
                    ids.1 = server_napi.load(std::sync::atomic::Ordering::Relaxed);
                }
                Ok(r)
            }
            (Err(e), _) => Err(e.context("request/response client failed")),
            (Ok(_), Err(e)) => Err(e.context("request/response server failed")),
        }
    })
}

pub(super) fn panic_msg(p: &Box<dyn std::any::Any + Send>) -> String {
    if let Some(s) = p.downcast_ref::<&str>() {
        s.to_string()
    } else if let Some(s) = p.downcast_ref::<String>() {
        s.clone()
    } else {
        "unknown panic".into()
    }
}

/// Wake a server stuck in accept (connect and close at once), best effort.
fn poke(lab: &NetPath) {
    let ns = lab.server_ns.clone();
    let addr = SocketAddr::V4(lab.server_bind);
    let _ = std::thread::Builder::new()
        .name("np-rr-poke".into())
        .spawn(move || {
            if ns.enter().is_ok() {
                let _ = TcpStream::connect_timeout(&addr, Duration::from_millis(200));
            }
        });
}

fn serve(
    lab: &NetPath,
    cfg: &RrConfig,
    deadline: Instant,
    ready: mpsc::Sender<Result<u32>>,
    napi: &std::sync::atomic::AtomicU32,
) -> Result<()> {
    if let Err(e) = pin_current(cfg.pin.server) {
        let msg = format!("{e:#}");
        let _ = ready.send(Err(e));
        bail!(msg);
    }
    let listener = super::listen_in(&lab.server_ns, lab.server_bind, &ready, gettid)?;

    // Accept with a bound: poll a non-blocking listener until the deadline.
    listener.set_nonblocking(true)?;
    let (mut conn, _) = loop {
        match listener.accept() {
            Ok(c) => break c,
            Err(e) if e.kind() == ErrorKind::WouldBlock => {
                if Instant::now() >= deadline {
                    bail!("server: no connection before the timeout");
                }
                std::thread::sleep(Duration::from_millis(1));
            }
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => return Err(e).context("server: accept failed"),
        }
    };
    drop(listener);
    conn.set_nonblocking(false)?;
    conn.set_nodelay(true)?;
    // No read timeout: the client may pause in its phase hooks for as long as they
    // take, and it always closes the connection when it ends (EOF ends this loop).
    let rx = Receiver::new(cfg.wait, cfg.pin, None).sharing(lab.proxy_pid.is_some());
    rx.prepare(&conn)?;

    let mut req = vec![0u8; cfg.req_size];
    let resp = vec![0x5au8; cfg.resp_size];
    let mut served = 0u64;
    loop {
        if served == cfg.warmup.max(1) && cfg.wait == WaitMode::BusyPoll {
            napi.store(
                incoming_napi_id(&conn),
                std::sync::atomic::Ordering::Relaxed,
            );
        }
        served += 1;
        match rx.read_exact(&mut conn, &mut req) {
            Ok(()) => {}
            Err(e) if e.kind() == ErrorKind::UnexpectedEof => return Ok(()),
            Err(e) if e.kind() == ErrorKind::ConnectionReset => return Ok(()),
            Err(e) => return Err(e).context("server: reading a request"),
        }
        match rx.write_all(&mut conn, &resp) {
            Ok(()) => {}
            Err(e) if matches!(e.kind(), ErrorKind::BrokenPipe | ErrorKind::ConnectionReset) => {
                return Ok(());
            }
            Err(e) => return Err(e).context("server: writing a response"),
        }
    }
}

fn client(
    lab: &NetPath,
    cfg: &RrConfig,
    deadline: Instant,
    phases: &dyn Phases,
    server_tid: u32,
) -> Result<RrResult> {
    pin_current(cfg.pin.client)?;
    lab.client_ns.enter()?;
    let tid = gettid();
    let mut conn =
        super::conns::connect_from(&lab.client_ns, lab.connect_to, deadline, cfg.timeout)?;
    conn.set_nodelay(cfg.nodelay)?;
    let rx = Receiver::new(cfg.wait, cfg.pin, Some(cfg.timeout)).sharing(lab.proxy_pid.is_some());
    rx.prepare(&conn)?;

    let mut req = vec![0xa5u8; cfg.req_size];
    let mut resp = vec![0u8; cfg.resp_size];
    let mut seq: u64 = 0;
    let mut one = |conn: &mut TcpStream, seq: u64| -> Result<()> {
        let b = seq.to_le_bytes();
        let n = b.len().min(req.len());
        req[..n].copy_from_slice(&b[..n]);
        // Two writes when asked (each its own sendto), else one.
        let cut = if cfg.split_request && req.len() > 1 {
            req.len() / 2
        } else {
            req.len()
        };
        for part in [&req[..cut], &req[cut..]] {
            if !part.is_empty() {
                rx.write_all(conn, part)
                    .context("client: writing a request")?;
            }
        }
        rx.read_exact(conn, &mut resp)
            .context("client: reading a response")?;
        Ok(())
    };

    for _ in 0..cfg.warmup {
        if Instant::now() >= deadline {
            break;
        }
        one(&mut conn, seq)?;
        seq += 1;
    }

    let napi_ids = (cfg.wait == WaitMode::BusyPoll).then(|| (incoming_napi_id(&conn), 0));
    let mut hist = Histogram::<u64>::new(3).context("creating histogram")?;
    let hook_t0 = Instant::now();
    phases
        .measure_start(tid, server_tid)
        .context("measure_start hook failed")?;
    // Time spent in the hook (e.g. attaching probes) is not charged to the run's bound.
    let deadline = deadline + hook_t0.elapsed();
    let t0 = Instant::now();
    let mut count = 0u64;
    let mut err = None;
    while count < cfg.requests {
        let t = Instant::now();
        if t >= deadline {
            break;
        }
        if let Err(e) = one(&mut conn, seq) {
            err = Some(e);
            break;
        }
        let ns = t.elapsed().as_nanos().min(u128::from(u64::MAX)) as u64;
        hist.record(ns.max(1)).context("recording a sample")?;
        count += 1;
        seq += 1;
    }
    let elapsed = t0.elapsed();
    let end = phases.measure_end(tid, server_tid);
    // EOF for the server.
    let _ = conn.shutdown(std::net::Shutdown::Write);
    drop(conn);
    if let Some(e) = err {
        return Err(e);
    }
    end.context("measure_end hook failed")?;
    Ok(rr_result(cfg, hist, count, elapsed, napi_ids))
}

/// A measured run's result (and the line saying so when the timeout cut it short); one for
/// the TCP and the datagram loops.
pub(super) fn rr_result(
    cfg: &RrConfig,
    hist: Histogram<u64>,
    count: u64,
    elapsed: Duration,
    napi_ids: Option<(u32, u32)>,
) -> RrResult {
    if count < cfg.requests {
        log::warn!(
            "request/response stopped by the {:?} timeout after {count} of {} requests",
            cfg.timeout,
            cfg.requests
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
