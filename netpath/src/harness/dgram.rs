//! Datagram request/response: UDP ping-pong (sockperf's default mode: one datagram each way)
//! and ICMP echo (`icmp.rs` builds on the client loop here).
//!
//! Same threads, placement and wait modes as the TCP harness. The sockets are std `UdpSocket`s
//! (an ICMP datagram socket is driven through the same type: `send` and `recv` are the
//! `sendto`/`recvfrom` syscalls either way, which is where the kernel programs start and end a
//! journey). No retransmission: a datagram that does not come back within the run's bound is
//! an error naming the request, and the kernel's drop counters say where it went.

use std::net::{SocketAddrV4, UdpSocket};
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

use super::rr::{RrResult, Run, gettid, timed_loop};
use super::server::{Ends, client_server, ready_with};
use super::wait::{Receiver, napi_id_of};

/// How often a blocked server looks whether the client has finished.
const SERVER_POLL: Duration = Duration::from_millis(100);

/// The UDP echo's server half, one for the harness's server and the container agent's: a
/// request is exactly `req_size` bytes; its answer is `resp_size` bytes of 0x5a with the
/// request's first 8 bytes (the client's sequence number) echoed, so the client knows which
/// request it answers; a datagram of any other size is not a request and gets no answer.
pub struct Answerer {
    req: Vec<u8>,
    resp: Vec<u8>,
    req_size: usize,
}

impl Answerer {
    pub fn new(req_size: usize, resp_size: usize) -> Answerer {
        Answerer {
            // One byte more: a longer datagram shows as longer, not as a request cut short.
            req: vec![0u8; req_size + 1],
            resp: vec![0x5au8; resp_size],
            req_size,
        }
    }

    /// Where the next datagram is received.
    pub fn buffer(&mut self) -> &mut [u8] {
        &mut self.req
    }

    /// The answer to the `len` bytes just received, or `None` when they are no request.
    pub fn answer(&mut self, len: usize) -> Option<&[u8]> {
        if len != self.req_size {
            return None;
        }
        let n = 8.min(self.req_size).min(self.resp.len());
        self.resp[..n].copy_from_slice(&self.req[..n]);
        Some(&self.resp)
    }
}

/// A datagram socket of `ty`/`proto` connected to `to`, never bound explicitly: the kernel
/// picks the source address the route gives and a free port (no wildcard bind).
pub fn connected(proto: i32, to: SocketAddrV4) -> std::io::Result<UdpSocket> {
    // SAFETY: plain socket(2); the fd is owned at once.
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, proto) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: `fd` is a fresh descriptor nobody else owns.
    let fd: OwnedFd = unsafe { std::os::fd::FromRawFd::from_raw_fd(fd) };
    let s = UdpSocket::from(fd);
    s.connect(to)?;
    Ok(s)
}

/// What the client loop sends and accepts: request `seq` into a buffer, and whether a
/// received datagram is the answer to `seq`.
pub struct Exchange<'a> {
    pub fill: &'a dyn Fn(u64, &mut [u8]),
    pub answers: &'a dyn Fn(u64, &[u8]) -> bool,
    /// Bytes of a request and of a response datagram.
    pub req_len: usize,
    pub resp_len: usize,
}

/// The client side: warm-up, then the measured requests between the phase hooks.
pub fn client_loop(
    sock: &UdpSocket,
    run: &Run,
    server_tid: u32,
    ex: &Exchange,
) -> Result<RrResult> {
    let cfg = run.cfg;
    let tid = gettid();
    let rx = Receiver::new(cfg.wait, cfg.pin.same_cpu(), None);
    rx.prepare(sock, Some(cfg.load.timeout))?;
    let mut req = vec![0xa5u8; ex.req_len];
    // One byte more than expected: a longer datagram is not taken for an answer.
    let mut resp = vec![0u8; ex.resp_len + 1];
    let bound = cfg.load.timeout;
    let one = |seq: u64, req: &mut [u8], resp: &mut [u8]| -> Result<()> {
        (ex.fill)(seq, req);
        sock.send(req).context("client: sending a request")?;
        let t0 = Instant::now();
        loop {
            let mut late = || t0.elapsed() >= bound;
            match rx
                .poll(|| sock.recv(resp), &mut late)
                .context("client: receiving a response")?
            {
                Some(n) if (ex.answers)(seq, &resp[..n]) => return Ok(()),
                // An answer to an earlier request (its own bound expired): not this one.
                Some(_) => {}
                None => bail!(
                    "client: no answer to request {seq} within {bound:?} (the datagram or its answer was lost; the drop counters say where)"
                ),
            }
        }
    };
    let fd = sock.as_raw_fd();
    timed_loop(run, (tid, server_tid), &|| napi_id_of(fd), &mut |seq| {
        one(seq, &mut req, &mut resp)
    })
}

/// UDP ping-pong from `lab.client_ns` to `lab.connect_to`, served on `lab.server_bind`.
pub fn run_udp(run: &Run) -> Result<RrResult> {
    let done = &AtomicBool::new(false);
    let stop = |_| done.store(true, Ordering::Relaxed);
    let ends = Ends {
        what: "UDP request/response",
        deadline: run.deadline,
        stop: &stop,
    };
    client_server(
        &ends,
        |ready, napi| serve_udp(run, ready, done, napi),
        |server_tid| udp_client(run, server_tid),
    )
}

fn udp_client(run: &Run, server_tid: u32) -> Result<RrResult> {
    let Run { lab, cfg, .. } = *run;
    run.enter_client()?;
    let sock = connected(libc::IPPROTO_UDP, lab.connect_to).with_context(|| {
        format!(
            "client: cannot open a UDP socket to {} from {}",
            lab.connect_to, lab.client_ns.name
        )
    })?;
    // The request carries its sequence number; the server echoes it at the start of the
    // response.
    let fill = |seq: u64, b: &mut [u8]| {
        let s = seq.to_le_bytes();
        let n = s.len().min(b.len());
        b[..n].copy_from_slice(&s[..n]);
    };
    let n = 8.min(cfg.load.req_size).min(cfg.load.resp_size);
    let answers =
        move |seq: u64, b: &[u8]| b.len() == cfg.load.resp_size && b[..n] == seq.to_le_bytes()[..n];
    let ex = Exchange {
        fill: &fill,
        answers: &answers,
        req_len: cfg.load.req_size,
        resp_len: cfg.load.resp_size,
    };
    client_loop(&sock, run, server_tid, &ex)
}

fn serve_udp(
    run: &Run,
    ready: mpsc::Sender<Result<u32>>,
    done: &AtomicBool,
    napi: &AtomicU32,
) -> Result<()> {
    let Run { lab, cfg, .. } = *run;
    let sock = ready_with(&ready, gettid, || {
        run.enter_server()?;
        UdpSocket::bind(lab.server_bind).with_context(|| {
            format!(
                "server: cannot bind UDP {} in {}",
                lab.server_bind, lab.server_ns.name
            )
        })
    })?;
    let rx = Receiver::new(cfg.wait, cfg.pin.same_cpu(), None);
    rx.prepare(&sock, Some(SERVER_POLL))?;
    let mut echo = Answerer::new(cfg.load.req_size, cfg.load.resp_size);
    let mut finished = || done.load(Ordering::Relaxed);
    let mut served = 0u64;
    loop {
        run.note_server_napi(served, sock.as_raw_fd(), napi);
        // The server answers whoever asked (behind NAT: the translated address).
        let got = rx.poll(|| sock.recv_from(echo.buffer()), &mut finished);
        let (len, peer) = match got.context("server: receiving a request")? {
            Some(x) => x,
            None => return Ok(()),
        };
        let Some(resp) = echo.answer(len) else {
            continue;
        };
        served += 1;
        sock.send_to(resp, peer)
            .context("server: sending a response")?;
    }
}

#[cfg(test)]
mod tests {
    use super::Answerer;

    #[test]
    fn a_request_is_answered_with_its_sequence_and_nothing_else_is() {
        let mut a = Answerer::new(16, 32);
        a.buffer()[..16].copy_from_slice(&[7u8; 16]);
        let r = a.answer(16).unwrap().to_vec();
        assert_eq!(r.len(), 32);
        assert_eq!(&r[..8], &[7u8; 8]);
        assert!(r[8..].iter().all(|b| *b == 0x5a));
        // Shorter or longer: no request.
        assert!(a.answer(15).is_none());
        assert!(a.answer(17).is_none());
        assert_eq!(a.buffer().len(), 17);
    }
}
