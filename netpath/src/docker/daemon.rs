//! A second dockerd for `published-nat`, with `--userland-proxy=false`, in its own namespace.
//!
//! Its published ports are pure DNAT, no docker-proxy.
//! It runs in a network namespace of its own (`np<id>-dkr`), with its own socket,
//! data root, exec root, pidfile, config file and (managed) containerd. The namespace is
//! what makes it safe: dockerd starts by deleting and recreating the `DOCKER`,
//! `DOCKER-ISOLATION-STAGE-*` chains (libnetwork's bridge driver calls `removeIPChains`
//! then `setupIPChains`), so a second daemon with `--iptables` in the host's namespace
//! would wipe the first daemon's NAT and isolation rules; and with `--iptables=false`
//! nothing would forward the published port at all. In its own namespace it has its own
//! iptables, its own `docker0` and its own `127.0.0.1`, which is also where its published
//! ports bind: nothing it does is visible from the host.

use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

use super::state::{self, DaemonRecord};
use super::{Engine, STATE_DIR};
use crate::lab::netns_name;
use crate::sys::netns::{Netns, ns_inum};
use crate::sys::nl::Nl;

/// How long the daemon gets to answer on its socket.
const START_TIMEOUT: Duration = Duration::from_secs(60);
/// How long it gets to exit after SIGTERM.
const STOP_TIMEOUT: Duration = Duration::from_secs(20);

/// A dockerd netpath started, in its own namespace. Stopped (and everything it left on
/// disk removed) by [`SecondDaemon::stop`] or on drop.
pub struct SecondDaemon {
    pub run_id: String,
    /// `np<id>-dkr`: the daemon's (and its published ports') namespace.
    pub netns: Netns,
    ns_fd: OwnedFd,
    child: Option<Child>,
    record: DaemonRecord,
    done: bool,
}

impl std::fmt::Debug for SecondDaemon {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SecondDaemon")
            .field("run_id", &self.run_id)
            .field("netns", &self.netns.name)
            .field("socket", &self.record.socket)
            .finish()
    }
}

impl SecondDaemon {
    /// Start `dockerd --userland-proxy=false` for run `run_id` and wait (≤ 60 s) until it
    /// answers.
    pub fn start(run_id: &str) -> Result<SecondDaemon> {
        let dockerd = which_dockerd()?;
        state::ensure_dir()?;
        let netns = Netns::create(&netns_name(run_id, "dkr"))?;
        let ns_fd = match netns.open() {
            Ok(fd) => fd,
            Err(e) => {
                let _ = netns.delete();
                return Err(e);
            }
        };
        let dir = Path::new(STATE_DIR);
        let record = DaemonRecord {
            run_id: run_id.to_string(),
            pid: 0,
            socket: dir.join(format!("dockerd-{run_id}.sock")),
            data_root: PathBuf::from(format!("/var/lib/netpath-docker-{run_id}")),
            exec_root: dir.join(format!("docker-{run_id}")),
            pidfile: dir.join(format!("dockerd-{run_id}.pid")),
            config: dir.join(format!("dockerd-{run_id}.conf.json")),
            log: dir.join(format!("dockerd-{run_id}.log")),
            netns: netns.name.clone(),
        };
        let mut d = SecondDaemon {
            run_id: run_id.to_string(),
            netns,
            ns_fd,
            child: None,
            record,
            done: false,
        };
        match d.spawn(&dockerd) {
            Ok(()) => Ok(d),
            Err(e) => {
                let log = tail(&d.record.log, 15);
                if let Err(e2) = d.teardown() {
                    log::warn!("{e2:#}");
                }
                Err(e.context(format!(
                    "second dockerd for run {run_id} did not start{log}"
                )))
            }
        }
    }

    fn spawn(&mut self, dockerd: &Path) -> Result<()> {
        self.netns
            .run(|| Nl::new()?.lo_up().map(|_| ()))
            .context("bringing lo up in the daemon's namespace")?;
        // No inherited daemon.json (it could name other hosts or a bridge).
        std::fs::write(&self.record.config, "{}\n")
            .with_context(|| format!("cannot write {}", self.record.config.display()))?;
        let log = std::fs::File::create(&self.record.log)
            .with_context(|| format!("cannot create {}", self.record.log.display()))?;
        let r = &self.record;
        let mut cmd = Command::new(dockerd);
        cmd.arg(format!("--host=unix://{}", r.socket.display()))
            .arg(format!("--data-root={}", r.data_root.display()))
            .arg(format!("--exec-root={}", r.exec_root.display()))
            .arg(format!("--pidfile={}", r.pidfile.display()))
            .arg(format!("--config-file={}", r.config.display()))
            .arg("--userland-proxy=false")
            .arg("--iptables=true")
            .arg("--log-level=warn")
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            // Its own process group: a Ctrl-C at the terminal is netpath's to handle.
            .process_group(0);
        crate::sys::netns::spawn_in(&mut cmd, self.ns_fd.as_raw_fd());
        let child = cmd
            .spawn()
            .with_context(|| format!("cannot run {}", dockerd.display()))?;
        self.record.pid = child.id();
        self.child = Some(child);
        state::write_daemon(&self.record)?;

        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            if let Some(st) = self
                .child
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten())
            {
                bail!("dockerd exited with {st}");
            }
            if std::os::unix::net::UnixStream::connect(&self.record.socket).is_ok()
                && self.engine().is_ok()
            {
                return Ok(());
            }
            if Instant::now() >= deadline {
                bail!(
                    "dockerd did not answer on {} within {START_TIMEOUT:?}",
                    self.record.socket.display()
                );
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// An engine handle on this daemon (its namespace is the "host" side).
    pub fn engine(&self) -> Result<Engine> {
        let mut e = Engine::connect_to(&format!("unix://{}", self.record.socket.display()))?;
        e.host_netns = self.netns.path.clone();
        e.host_netns_name = self.netns.name.clone();
        e.exec_root = self.record.exec_root.clone();
        Ok(e)
    }

    /// The daemon's socket.
    pub fn socket(&self) -> &Path {
        &self.record.socket
    }

    /// Stop the daemon and remove its namespace, directories and files.
    pub fn stop(mut self) -> Result<()> {
        self.teardown()
    }

    fn teardown(&mut self) -> Result<()> {
        if self.done {
            return Ok(());
        }
        self.done = true;
        let mut first: Option<anyhow::Error> = None;
        if let Some(mut c) = self.child.take()
            && let Err(e) = stop_child(&mut c)
        {
            first.get_or_insert(e);
        }
        if let Err(e) = remove_daemon_files(&self.record, Some(&self.netns)) {
            first.get_or_insert(e);
        }
        match first {
            None => Ok(()),
            Some(e) => Err(e.context(format!(
                "stopping the second dockerd of run {}",
                self.run_id
            ))),
        }
    }
}

impl Drop for SecondDaemon {
    fn drop(&mut self) {
        if let Err(e) = self.teardown() {
            log::warn!("{e:#}");
        }
    }
}

fn which_dockerd() -> Result<PathBuf> {
    for p in [
        "/usr/sbin/dockerd",
        "/usr/bin/dockerd",
        "/usr/local/bin/dockerd",
    ] {
        if Path::new(p).exists() {
            return Ok(PathBuf::from(p));
        }
    }
    bail!("dockerd not found (install docker.io)")
}

/// SIGTERM, wait, SIGKILL; reaps.
fn stop_child(c: &mut Child) -> Result<()> {
    if c.try_wait()?.is_some() {
        return Ok(());
    }
    // SAFETY: our unreaped child.
    unsafe { libc::kill(c.id() as libc::pid_t, libc::SIGTERM) };
    let deadline = Instant::now() + STOP_TIMEOUT;
    while Instant::now() < deadline {
        if c.try_wait()?.is_some() {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let _ = c.kill();
    c.wait()?;
    Ok(())
}

/// Stop a second daemon from its record (a run that was killed): the recorded pid is
/// signalled only if it is still a dockerd using the recorded socket.
pub(crate) fn stop_recorded(r: &DaemonRecord) -> Result<()> {
    if is_our_dockerd(r.pid, &r.socket) {
        // SAFETY: plain kill of a verified pid.
        unsafe { libc::kill(r.pid as libc::pid_t, libc::SIGTERM) };
        let deadline = Instant::now() + STOP_TIMEOUT;
        while Instant::now() < deadline && is_our_dockerd(r.pid, &r.socket) {
            std::thread::sleep(Duration::from_millis(100));
        }
        if is_our_dockerd(r.pid, &r.socket) {
            unsafe { libc::kill(r.pid as libc::pid_t, libc::SIGKILL) };
            std::thread::sleep(Duration::from_millis(200));
        }
    }
    let ns = Netns::open_existing(&r.netns).ok();
    remove_daemon_files(r, ns.as_ref())
}

fn is_our_dockerd(pid: u32, socket: &Path) -> bool {
    if pid == 0 {
        return false;
    }
    let Some(args) = i32::try_from(pid)
        .ok()
        .and_then(|p| procfs::process::Process::new(p).ok()?.cmdline().ok())
    else {
        return false;
    };
    let sock = format!("--host=unix://{}", socket.display());
    args.first().is_some_and(|a| a.ends_with("dockerd")) && args.contains(&sock)
}

/// After the daemon is gone: kill what is left inside its namespace (managed containerd,
/// shims), unmount what it mounted under its roots, remove the roots, the namespace and
/// the files.
fn remove_daemon_files(r: &DaemonRecord, ns: Option<&Netns>) -> Result<()> {
    if !r.data_root.starts_with("/var/lib")
        || !r
            .data_root
            .file_name()
            .is_some_and(|n| n.to_string_lossy().starts_with("netpath-docker-"))
        || !r.exec_root.starts_with(STATE_DIR)
    {
        bail!("refusing to remove unexpected daemon paths {:?}", r);
    }
    if let Some(ns) = ns {
        kill_in_netns(ns.inum);
    }
    for root in [&r.exec_root, &r.data_root] {
        unmount_under(root);
    }
    let mut first: Option<anyhow::Error> = None;
    for root in [&r.exec_root, &r.data_root] {
        match std::fs::remove_dir_all(root) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => {
                first.get_or_insert(
                    anyhow::Error::from(e).context(format!("cannot remove {}", root.display())),
                );
            }
        }
    }
    if let Some(ns) = ns
        && let Err(e) = ns.delete()
    {
        first.get_or_insert(e);
    }
    for f in [&r.socket, &r.pidfile, &r.config, &r.log] {
        let _ = std::fs::remove_file(f);
    }
    let _ = std::fs::remove_file(state::daemon_path(&r.run_id));
    match first {
        None => Ok(()),
        Some(e) => Err(e),
    }
}

/// SIGKILL every process whose network namespace is `inum` (the daemon's helpers).
fn kill_in_netns(inum: u32) {
    let Ok(all) = procfs::process::all_processes() else {
        return;
    };
    let me = std::process::id() as i32;
    for pid in all.filter_map(|p| Some(p.ok()?.pid)) {
        if pid == me {
            continue;
        }
        if ns_inum(Path::new(&format!("/proc/{pid}/ns/net"))).ok() == Some(inum) {
            // SAFETY: plain kill; the process is inside netpath's own namespace.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
    }
    std::thread::sleep(Duration::from_millis(100));
}

/// Lazily unmount every mount at or under `root`, deepest first.
fn unmount_under(root: &Path) {
    let Ok(mi) = procfs::process::Process::myself().and_then(|p| p.mountinfo()) else {
        return;
    };
    // procfs keeps the kernel's octal escape of a space.
    let mut mps: Vec<PathBuf> = mi
        .into_iter()
        .map(|m| PathBuf::from(m.mount_point.to_string_lossy().replace("\\040", " ")))
        .filter(|m| m.starts_with(root))
        .collect();
    mps.sort_by_key(|m| std::cmp::Reverse(m.components().count()));
    for m in mps {
        let _ = nix::mount::umount2(&m, nix::mount::MntFlags::MNT_DETACH);
    }
}

fn tail(p: &Path, n: usize) -> String {
    let Ok(s) = std::fs::read_to_string(p) else {
        return String::new();
    };
    let lines: Vec<&str> = s.lines().collect();
    let start = lines.len().saturating_sub(n);
    if lines.is_empty() {
        return String::new();
    }
    format!("; dockerd log:\n{}", lines[start..].join("\n"))
}
