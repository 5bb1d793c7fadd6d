//! `published-proxy` driver: `docker run -p` through Docker's docker-proxy, used from the node.
//!
//! dockerd's default `--userland-proxy=true`, reached from the Docker host the way users hit
//! it: the client in the node namespace (the "host"), the server in the container, on the
//! bridge network without a client container.
//!
//! ```text
//!  np<id>-node                                                         np<id>-srv
//!  client ─lo─ 127.0.0.1:18080 docker-proxy ── np<id>br .1 ─ np<id>s ─veth─ eth0 .3:11111
//! ```
//!
//! Docker's real `/usr/sbin/docker-proxy` ([`spawn_proxy`]) relays each connection to the
//! container. Docker's OUTPUT DNAT skips 127.0.0.0/8, and so does netpath's table, so
//! loopback traffic really goes through the proxy, as with Docker.

use std::fs::File;
use std::io::Read;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};

use super::PUBLISHED_PORT;
use super::bridge::{Containers, build_net};
use crate::driver::Driver;
use crate::sys::netns::{Netns, ns_inum};
use crate::path::NetPath;
use crate::sys::proxy::DOCKER_PROXY;

/// How long docker-proxy gets to report that it listens.
const PROXY_START_TIMEOUT: Duration = Duration::from_secs(10);

pub(super) fn build(run_id: &str) -> Result<NetPath> {
    if !Path::new(DOCKER_PROXY).exists() {
        bail!(
            "{DOCKER_PROXY} not found: the published-proxy driver runs Docker's userland proxy; \
             install docker.io (apt-get install docker.io, or `cargo xtask setup`)"
        );
    }
    let mut b = build_net(run_id, Containers::Server)?;
    let listen = SocketAddrV4::new(Ipv4Addr::LOCALHOST, PUBLISHED_PORT);
    let target = b.server.context("bridge network built without a server")?;
    let (child, status) = spawn_proxy(&b.node, listen, target)?;
    let pid = child.id();
    // Owned by the lab from here on: any error below tears it down with the rest.
    b.nss.adopt(child);
    wait_ready(status, pid)?;
    let inum = ns_inum(Path::new(&format!("/proc/{pid}/ns/net")))
        .with_context(|| format!("docker-proxy {pid} vanished"))?;
    if inum != b.node.inum {
        bail!(
            "docker-proxy {pid} runs in netns {inum}, not in {}",
            b.node.name
        );
    }
    let node = b.node.clone();
    let mut p = b.into_path(Driver::PublishedProxy, run_id, node)?;
    p.connect_to = listen;
    p.published = Some(listen);
    p.proxy_pid = Some(pid);
    Ok(p)
}

/// Start `docker-proxy -proto tcp -host-ip … -host-port … -container-ip …
/// -container-port …` inside `node`, as dockerd does: it reports "0\n" (listening) or
/// "1\n<error>" on fd 3. Returns the child and the read end of that pipe.
///
/// It listens on 127.0.0.1 inside the node namespace only. Its pid is
/// `NetPath::proxy_pid`; it is stopped and reaped on teardown, drop and signal/panic cleanup,
/// and `cleanup_leftovers` kills the ones killed runs leave behind.
fn spawn_proxy(node: &Netns, listen: SocketAddrV4, target: SocketAddrV4) -> Result<(Child, File)> {
    let mut fds = [0 as libc::c_int; 2];
    // SAFETY: fds is valid for two ints.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(std::io::Error::last_os_error()).context("pipe2 for docker-proxy status");
    }
    // SAFETY: both fds were just created and are owned here only.
    let (rd, wr) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    let wr_raw = wr.as_raw_fd();
    // Spawned from a thread inside the node namespace: the child starts there.
    let child = node
        .run(|| {
            let mut cmd = Command::new(DOCKER_PROXY);
            cmd.args(["-proto", "tcp", "-host-ip"])
                .arg(listen.ip().to_string())
                .arg("-host-port")
                .arg(listen.port().to_string())
                .arg("-container-ip")
                .arg(target.ip().to_string())
                .arg("-container-port")
                .arg(target.port().to_string())
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null());
            // SAFETY: only async-signal-safe calls (dup2, fcntl) between fork and exec.
            unsafe {
                cmd.pre_exec(move || {
                    if wr_raw == 3 {
                        if libc::fcntl(3, libc::F_SETFD, 0) != 0 {
                            return Err(std::io::Error::last_os_error());
                        }
                    } else if libc::dup2(wr_raw, 3) != 3 {
                        return Err(std::io::Error::last_os_error());
                    }
                    Ok(())
                });
            }
            cmd.spawn()
                .with_context(|| format!("cannot start {DOCKER_PROXY}"))
        })
        .with_context(|| format!("starting docker-proxy in {}", node.name))?;
    // Only the proxy holds the write end now: EOF once it has reported.
    drop(wr);
    Ok((child, File::from(rd)))
}

/// Read docker-proxy's status report: "0\n" then EOF when it listens.
fn wait_ready(mut status: File, pid: u32) -> Result<()> {
    let deadline = Instant::now() + PROXY_START_TIMEOUT;
    let mut buf = Vec::new();
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let mut p = libc::pollfd {
            fd: status.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd.
        let r = unsafe { libc::poll(&mut p, 1, left.as_millis().max(1) as i32) };
        if r < 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e).context("waiting for docker-proxy");
        }
        if r == 0 {
            bail!(
                "docker-proxy {pid} did not report within {}s",
                PROXY_START_TIMEOUT.as_secs()
            );
        }
        let mut chunk = [0u8; 512];
        let n = status
            .read(&mut chunk)
            .context("reading docker-proxy status")?;
        if n == 0 {
            break;
        }
        buf.extend_from_slice(&chunk[..n]);
        if buf.len() > 64 * 1024 {
            break;
        }
    }
    let text = String::from_utf8_lossy(&buf);
    match text.split_once('\n') {
        Some(("0", _)) => Ok(()),
        Some(("1", err)) => Err(anyhow!("docker-proxy failed: {}", err.trim())),
        _ if text.is_empty() => Err(anyhow!(
            "docker-proxy {pid} exited without reporting (is {DOCKER_PROXY} Docker's userland proxy?)"
        )),
        _ => Err(anyhow!("docker-proxy {pid} reported {text:?}")),
    }
}
