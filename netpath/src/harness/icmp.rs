//! ICMP echo request/response: the client pings the server's address from a datagram ICMP
//! socket (`SOCK_DGRAM, IPPROTO_ICMP`, what unprivileged `ping` uses) and the target's kernel
//! answers; there is no server thread. The socket needs `net.ipv4.ping_group_range` to include
//! the caller's group, a per-namespace setting: netpath sets it only inside the lab's own client
//! namespace (which is removed with the lab), never in a namespace it did not create.
use std::net::SocketAddrV4;

use anyhow::{Context, Result, bail};

use super::dgram::{Exchange, client_loop, connected};
use super::rr::{RrResult, Run};
use super::server::client_only;

/// No server thread: a thread id no thread has, so the tracer's server slot stays empty.
const NO_SERVER: u32 = u32::MAX;

/// The per-namespace sysctl naming the groups that may open ping sockets.
pub const PING_RANGE: &str = "net.ipv4.ping_group_range";

/// Whether a `ping_group_range` value (`low high`) includes root's group.
pub fn ping_allows_root(range: &str) -> bool {
    let mut it = range.split_whitespace().map(str::parse::<u64>);
    matches!((it.next(), it.next()), (Some(Ok(lo)), Some(Ok(hi))) if lo == 0 && lo <= hi)
}

/// Ping sockets for root in the calling thread's namespace `ns`: as they are (Docker opens
/// them in every container it starts), or allowed here when netpath created the namespace
/// (removed with the lab): its name starts with the run's `np<run id>`, which a container
/// `--between` measures never has (that run id is fresh). Any other namespace is left as it
/// is, with the fix in one line.
fn allow_ping(ns: &str, run_id: &str) -> Result<()> {
    let range = crate::sys::netns::read_sysctl(PING_RANGE)?;
    if ping_allows_root(&range) {
        return Ok(());
    }
    if !ns.starts_with(&format!("np{run_id}")) {
        bail!(
            "--proto icmp needs ping sockets for root in {ns}, whose {PING_RANGE} is {:?}, and \
             netpath changes no setting of a namespace it did not create: allow root there \
             (sysctl -w {PING_RANGE}=\"0 0\") or use --proto udp",
            range.replace('\t', " ")
        );
    }
    crate::sys::netns::write_sysctl(PING_RANGE, "0 0")
        .context("allowing ping sockets for root in the lab's client namespace")
}

/// ICMP header: type, code, checksum, identifier, sequence.
const HDR: usize = 8;

/// Pings `lab.connect_to`'s address from `lab.client_ns`, `cfg.requests` times after warm-up
/// (the sizes checked by `run_rr`: the reply carries the request's bytes).
pub fn run_icmp(run: &Run) -> Result<RrResult> {
    client_only("ICMP echo", || icmp_client(run))
}

fn icmp_client(run: &Run) -> Result<RrResult> {
    let Run { lab, cfg, .. } = *run;
    run.enter_client()?;
    allow_ping(&lab.client_ns.name, &lab.run_id)?;
    let to = SocketAddrV4::new(*lab.connect_to.ip(), 0);
    let sock = connected(libc::IPPROTO_ICMP, to).with_context(|| {
        format!(
            "client: cannot open an ICMP echo socket to {} from {}",
            to.ip(),
            lab.client_ns.name
        )
    })?;
    let payload = cfg.load.req_size;
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
    client_loop(&sock, run, NO_SERVER, &ex)
}

#[cfg(test)]
mod tests {
    #[test]
    fn ping_range_with_root() {
        use super::ping_allows_root as ok;
        assert!(ok("0\t2147483647") && ok("0 0"));
        assert!(!ok("1\t0") && !ok("1 1000") && !ok("") && !ok("0"));
    }
}
