//! Bulk TCP throughput (like an iperf3 summary): `streams` connections from the client
//! namespace each write `chunk`-sized buffers for `duration`; the server reads and
//! discards until EOF. Per-stream TCP_INFO (retransmits, RTT, cwnd) is read from each
//! client socket just before it is closed.

use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, SocketAddrV4, TcpStream};
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

use super::conns::{Plan, run_pairs};
use crate::path::NetPath;
use crate::sys::netns::Netns;

/// Thread names (comm) of the bulk threads.
pub const BULK_CLIENT_COMM: &str = "np-bulk-cli";
pub const BULK_SERVER_COMM: &str = "np-bulk-srv";

/// Bulk transfer parameters.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BulkConfig {
    /// Parallel connections.
    pub streams: usize,
    /// How long each stream writes.
    pub duration: Duration,
    /// Bytes per `write`.
    pub chunk: usize,
    /// Bound on setup (listen, connect, accept) and on any single blocking write; the
    /// whole run takes at most about `duration + 2 * timeout`.
    pub timeout: Duration,
}

impl Default for BulkConfig {
    fn default() -> Self {
        BulkConfig {
            streams: 1,
            duration: Duration::from_secs(3),
            chunk: 128 * 1024,
            timeout: Duration::from_secs(30),
        }
    }
}

/// One stream's summary.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
pub struct StreamResult {
    /// Bytes the client wrote.
    #[serde(default)]
    pub bytes: u64,
    /// Sender throughput over the stream's write phase.
    pub gbit_per_s: f64,
    /// `tcpi_total_retrans` at the end of the write phase.
    #[serde(default)]
    pub retransmits: u64,
    /// Smoothed RTT, `tcpi_rtt` (µs).
    #[serde(default)]
    pub rtt_us: u32,
    /// Congestion window, `tcpi_snd_cwnd` (segments).
    #[serde(default)]
    pub cwnd: u32,
}

/// Summary of a bulk run (sender side, like iperf3's "sender" line).
#[derive(Clone, Debug, PartialEq)]
pub struct BulkResult {
    /// Bytes written by all clients.
    pub bytes: u64,
    /// Bytes the server read (equals `bytes` unless a connection broke).
    pub received: u64,
    /// Write phase, from the common start to the last stream's end.
    pub elapsed: Duration,
    pub gbit_per_s: f64,
    /// Sum of the streams' retransmits.
    pub retransmits: u64,
    pub per_stream: Vec<StreamResult>,
}

/// Bulk run from `lab.client_ns` to `lab.connect_to`, served on `lab.server_bind`
/// (the request/response port: do not run both at once).
pub fn run_bulk(lab: &NetPath, cfg: &BulkConfig) -> Result<BulkResult> {
    run_bulk_to(
        &lab.client_ns,
        &lab.server_ns,
        lab.server_bind,
        lab.connect_to,
        cfg,
    )
}

/// Bulk run from `client_ns` to `connect`, served on `bind` in `server_ns`.
pub fn run_bulk_to(
    client_ns: &Netns,
    server_ns: &Netns,
    bind: SocketAddrV4,
    connect: SocketAddrV4,
    cfg: &BulkConfig,
) -> Result<BulkResult> {
    if cfg.streams == 0 {
        bail!("bulk needs at least one stream");
    }
    if cfg.chunk == 0 {
        bail!("bulk chunk size must be at least 1 byte");
    }
    let plan = Plan {
        client_ns,
        server_ns,
        bind,
        connect,
        connections: cfg.streams,
        setup_timeout: cfg.timeout,
        io_timeout: cfg.timeout,
        client_comm: BULK_CLIENT_COMM,
        server_comm: BULK_SERVER_COMM,
    };
    let (streams, received) = run_pairs(
        &plan,
        |_, conn, start| send(conn, start, cfg),
        |_, conn| sink(conn, cfg.chunk),
    )?;

    let elapsed = streams.iter().map(|(_, e)| *e).max().unwrap_or_default();
    let per_stream: Vec<StreamResult> = streams.into_iter().map(|(s, _)| s).collect();
    let bytes = per_stream.iter().map(|s| s.bytes).sum();
    Ok(BulkResult {
        bytes,
        received: received.iter().sum(),
        elapsed,
        gbit_per_s: gbit_per_s(bytes, elapsed),
        retransmits: per_stream.iter().map(|s| s.retransmits).sum(),
        per_stream,
    })
}

fn gbit_per_s(bytes: u64, d: Duration) -> f64 {
    let s = d.as_secs_f64();
    if s > 0.0 {
        bytes as f64 * 8.0 / s / 1e9
    } else {
        0.0
    }
}

fn send(mut conn: TcpStream, start: Instant, cfg: &BulkConfig) -> Result<(StreamResult, Duration)> {
    let buf = vec![0x5au8; cfg.chunk];
    let end = start + cfg.duration;
    let mut bytes = 0u64;
    while Instant::now() < end {
        match conn.write(&buf) {
            Ok(0) => bail!("client: connection closed by the server"),
            Ok(n) => bytes += n as u64,
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => return Err(e).context("client: bulk write failed"),
        }
    }
    let elapsed = start.elapsed();
    let info = tcp_info(&conn)?;
    // EOF for the server.
    let _ = conn.shutdown(Shutdown::Write);
    drop(conn);
    Ok((
        StreamResult {
            bytes,
            gbit_per_s: gbit_per_s(bytes, elapsed),
            retransmits: u64::from(info.tcpi_total_retrans),
            rtt_us: info.tcpi_rtt,
            cwnd: info.tcpi_snd_cwnd,
        },
        elapsed,
    ))
}

/// Read and discard until EOF; bytes read.
fn sink(mut conn: TcpStream, chunk: usize) -> Result<u64> {
    // No read timeout: the clients always close their end (EOF), even on error.
    let mut buf = vec![0u8; chunk.clamp(64 * 1024, 1024 * 1024)];
    let mut total = 0u64;
    loop {
        match conn.read(&mut buf) {
            Ok(0) => return Ok(total),
            Ok(n) => total += n as u64,
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) if e.kind() == ErrorKind::ConnectionReset => return Ok(total),
            Err(e) => return Err(e).context("server: bulk read failed"),
        }
    }
}

/// `getsockopt(TCP_INFO)`.
pub fn tcp_info(conn: &TcpStream) -> Result<libc::tcp_info> {
    // SAFETY: tcp_info is plain old data; all zeroes is a valid value.
    let mut info: libc::tcp_info = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::tcp_info>() as libc::socklen_t;
    // SAFETY: info is valid for len bytes and len points to its size.
    let rc = unsafe {
        libc::getsockopt(
            conn.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_INFO,
            (&raw mut info).cast(),
            &mut len,
        )
    };
    if rc != 0 {
        return Err(std::io::Error::last_os_error()).context("getsockopt(TCP_INFO) failed");
    }
    Ok(info)
}
