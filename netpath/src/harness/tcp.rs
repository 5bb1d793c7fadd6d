//! TCP request/response ping-pong (like sockperf ping-pong) between the lab's client and
//! server namespaces, and the echo server the burst harness and the Docker agent use.
//!
//! Plain blocking std threads on purpose: the eBPF side correlates by thread id and by
//! the syscalls std makes here (`write` on a `TcpStream` is `sendto`, `read` is
//! `recvfrom`). Only `read_exact` / `write_all` are used, never vectored I/O.

use std::io::ErrorKind;
use std::net::{SocketAddr, TcpStream};
use std::os::fd::AsRawFd;
use std::sync::atomic::AtomicU32;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

use super::conns::connect_from;
use super::rr::{RrResult, Run, gettid, timed_loop};
use super::server::{Ends, client_server, ready_with};
use super::wait::{Receiver, WaitMode, napi_id_of};
use crate::path::NetPath;

/// TCP ping-pong from `lab.client_ns` to `lab.connect_to`, served by one connection on
/// `lab.server_bind` in `lab.server_ns`.
pub fn run_tcp(run: &Run) -> Result<RrResult> {
    // A client that failed before connecting leaves the server in accept: it gives up on its
    // own at the deadline, but is woken now with a connection.
    let stop = |failed: bool| {
        if failed {
            poke(run.lab);
        }
    };
    let ends = Ends {
        what: "request/response",
        deadline: run.deadline,
        stop: &stop,
    };
    client_server(
        &ends,
        |ready, napi| serve(run, ready, napi),
        |server_tid| client(run, server_tid),
    )
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

fn serve(run: &Run, ready: mpsc::Sender<Result<u32>>, napi: &AtomicU32) -> Result<()> {
    let Run {
        lab, cfg, deadline, ..
    } = *run;
    let listener = ready_with(&ready, gettid, || {
        run.enter_server()?;
        std::net::TcpListener::bind(lab.server_bind).with_context(|| {
            format!(
                "server: cannot listen on {} in {}",
                lab.server_bind, lab.server_ns.name
            )
        })
    })?;

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
    let rx = Receiver::new(cfg.wait, cfg.pin.same_cpu(), None).sharing(lab.proxy_pid.is_some());
    rx.prepare(&conn, None)?;

    let mut req = vec![0u8; cfg.load.req_size];
    let resp = vec![0x5au8; cfg.load.resp_size];
    let mut served = 0u64;
    loop {
        run.note_server_napi(served, conn.as_raw_fd(), napi);
        served += 1;
        if !answer(&rx, &mut conn, &mut req, &resp)? {
            return Ok(());
        }
    }
}

fn client(run: &Run, server_tid: u32) -> Result<RrResult> {
    let Run {
        lab, cfg, deadline, ..
    } = *run;
    run.enter_client()?;
    let tid = gettid();
    let mut conn = connect_from(&lab.client_ns, lab.connect_to, deadline, cfg.load.timeout)?;
    conn.set_nodelay(cfg.load.nodelay)?;
    let rx = Receiver::new(cfg.wait, cfg.pin.same_cpu(), Some(cfg.load.timeout))
        .sharing(lab.proxy_pid.is_some());
    rx.prepare(&conn, None)?;

    let mut req = vec![0xa5u8; cfg.load.req_size];
    let mut resp = vec![0u8; cfg.load.resp_size];
    let mut one = |conn: &mut TcpStream, seq: u64| -> Result<()> {
        let b = seq.to_le_bytes();
        let n = b.len().min(req.len());
        req[..n].copy_from_slice(&b[..n]);
        // Two writes when asked (each its own sendto), else one.
        let cut = if cfg.load.split_request && req.len() > 1 {
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

    let fd = conn.as_raw_fd();
    let r = timed_loop(run, (tid, server_tid), &|| napi_id_of(fd), &mut |seq| {
        one(&mut conn, seq)
    });
    // EOF for the server.
    let _ = conn.shutdown(std::net::Shutdown::Write);
    r
}

/// Server side of one request/response connection: a `resp`-byte answer (0x5a bytes) per
/// `req`-byte request, until the client closes. Used by the burst harness and by the Docker
/// traffic agent.
pub fn echo(conn: TcpStream, req: usize, resp: usize) -> Result<()> {
    let rx = Receiver::new(WaitMode::Block, false, None);
    echo_with(conn, req, resp, &rx)
}

/// [`echo`] waiting for requests as `rx` says.
pub fn echo_with(mut conn: TcpStream, req: usize, resp: usize, rx: &Receiver) -> Result<()> {
    conn.set_nodelay(true)?;
    rx.prepare(&conn, None)?;
    // No read timeout: clients always close their end (EOF), even on error.
    let mut rbuf = vec![0u8; req];
    let wbuf = vec![0x5au8; resp];
    while answer(rx, &mut conn, &mut rbuf, &wbuf)? {}
    Ok(())
}

/// Reads one request and writes its response: `false` when the client has gone.
fn answer(rx: &Receiver, conn: &mut TcpStream, req: &mut [u8], resp: &[u8]) -> Result<bool> {
    match rx.read_exact(conn, req) {
        Ok(()) => {}
        Err(e)
            if matches!(
                e.kind(),
                ErrorKind::UnexpectedEof | ErrorKind::ConnectionReset
            ) =>
        {
            return Ok(false);
        }
        Err(e) => return Err(e).context("server: reading a request"),
    }
    match rx.write_all(conn, resp) {
        Ok(()) => Ok(true),
        Err(e) if matches!(e.kind(), ErrorKind::BrokenPipe | ErrorKind::ConnectionReset) => {
            Ok(false)
        }
        Err(e) => Err(e).context("server: writing a response"),
    }
}
