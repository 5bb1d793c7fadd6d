//! ICMP echo request/response: the client pings the server's address from a datagram ICMP
//! socket (`SOCK_DGRAM, IPPROTO_ICMP`, what unprivileged `ping` uses) and the target's kernel
//! answers; there is no server thread. The socket needs `net.ipv4.ping_group_range` to include
//! the caller's group, a per-namespace setting: netpath sets it only inside the lab's own client
//! namespace (which is removed with the lab), never in a namespace it did not create.
use std::net::SocketAddrV4;
use std::time::Instant;

use anyhow::{Context, Result, bail};

use super::dgram::{Exchange, client_loop, connected};
use super::rr::{CLIENT_COMM, Phases, RrConfig, RrResult, panic_msg};
use super::runmode::pin_current;
use crate::path::NetPath;

/// No server thread: a thread id no thread has, so the tracer's server slot stays empty.
const NO_SERVER: u32 = u32::MAX;

/// ICMP header: type, code, checksum, identifier, sequence.
const HDR: usize = 8;

/// Pings `lab.connect_to`'s address from `lab.client_ns`, `cfg.requests` times after warm-up.
pub fn run_icmp(lab: &NetPath, cfg: &RrConfig, phases: &dyn Phases) -> Result<RrResult> {
    if cfg.resp_size != cfg.req_size {
        bail!(
            "--proto icmp: the echo reply carries the request's {} bytes back, so a {}-byte response cannot be asked: drop --resp-size or make it equal to --req-size",
            cfg.req_size,
            cfg.resp_size
        );
    }
    let deadline = Instant::now() + cfg.timeout;
    std::thread::scope(|s| {
        let client = std::thread::Builder::new()
            .name(CLIENT_COMM.into())
            .spawn_scoped(s, move || icmp_client(lab, cfg, deadline, phases))
            .context("spawning the client thread")?;
        client
            .join()
            .unwrap_or_else(|p| Err(anyhow::anyhow!("client thread panicked: {}", panic_msg(&p))))
            .context("ICMP echo client failed")
    })
}

fn icmp_client(
    lab: &NetPath,
    cfg: &RrConfig,
    deadline: Instant,
    phases: &dyn Phases,
) -> Result<RrResult> {
    pin_current(cfg.pin.client)?;
    if !lab.client_ns.name.starts_with("np") {
        bail!(
            "--proto icmp sets net.ipv4.ping_group_range in the client's namespace, and {} is not one netpath created",
            lab.client_ns.name
        );
    }
    lab.client_ns.enter()?;
    crate::netns::write_sysctl("net.ipv4.ping_group_range", "0 0")
        .context("allowing ping sockets for root in the lab's client namespace")?;
    let to = SocketAddrV4::new(*lab.connect_to.ip(), 0);
    let sock = connected(libc::IPPROTO_ICMP, to).with_context(|| {
        format!(
            "client: cannot open an ICMP echo socket to {} from {}",
            to.ip(),
            lab.client_ns.name
        )
    })?;
    let payload = cfg.req_size;
    // Echo request, sequence in the header; the kernel fills in the identifier (the socket's)
    // and the checksum.
    let fill = |seq: u64, b: &mut [u8]| {
        b[..HDR].copy_from_slice(&[8, 0, 0, 0, 0, 0, 0, 0]);
        b[6..8].copy_from_slice(&(seq as u16).to_be_bytes());
    };
    let answers = move |seq: u64, b: &[u8]| {
        b.len() == HDR + payload && b[0] == 0 && b[6..8] == (seq as u16).to_be_bytes()
    };
    let ex = Exchange {
        fill: &fill,
        answers: &answers,
        req_len: HDR + payload,
        resp_len: HDR + payload,
    };
    client_loop(&sock, cfg, deadline, phases, NO_SERVER, &ex)
}
