//! What netpath remembers about Docker between runs, under `/run/netpath/`.
//!
//! A tmpfs: gone after a reboot, like everything it describes.
//!
//! * `docker-run-<id>.lock`: flock-held by the process running Docker lab `<id>`;
//!   cleanup leaves a run alone while its lock is held.
//! * `swarm.json`: netpath initialised the swarm of that engine (node id), so cleanup
//!   may leave it; a swarm without this record is never touched.
//! * `dockerd-<id>.json`: a second dockerd netpath started.
//! * `docker-mvp-<id>`, `docker-rmt-<id>`: netns `np<id>-mvp` / `np<id>-rmt` is a Docker
//!   lab's (the peer of its macvlan parent / egress uplink).

use std::fs::{File, OpenOptions};
use std::io::ErrorKind;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

use super::STATE_DIR;

/// Creates [`STATE_DIR`] root-only (0700) and checks that what is there is a real directory
/// owned by this user that nobody else can write: netpath runs as root and writes files with
/// predictable names in it (locks, records, a daemon's config and log), so a directory or
/// symlink someone else planted there must stop it.
pub(crate) fn ensure_dir() -> Result<()> {
    use std::os::unix::fs::{DirBuilderExt, MetadataExt};
    match std::fs::DirBuilder::new().mode(0o700).create(STATE_DIR) {
        Ok(()) => {}
        Err(e) if e.kind() == ErrorKind::AlreadyExists => {}
        Err(e) => return Err(e).with_context(|| format!("cannot create {STATE_DIR}")),
    }
    let m =
        std::fs::symlink_metadata(STATE_DIR).with_context(|| format!("cannot read {STATE_DIR}"))?;
    let me = nix::unistd::geteuid().as_raw();
    if !m.file_type().is_dir() || m.uid() != me || m.mode() & 0o022 != 0 {
        anyhow::bail!(
            "{STATE_DIR} is not a directory owned by uid {me} that only it can write \
             (type {:?}, owner {}, mode {:o}): remove it and run again",
            m.file_type(),
            m.uid(),
            m.mode() & 0o7777
        );
    }
    Ok(())
}

fn lock_path(run_id: &str) -> PathBuf {
    Path::new(STATE_DIR).join(format!("docker-run-{run_id}.lock"))
}

/// Held while a Docker lab is alive.
pub(crate) struct RunLock {
    path: PathBuf,
    file: File,
}

/// Fds of the run locks this process holds, so an interrupt can release them before it
/// removes those runs' objects (cleanup skips runs whose lock is held, ours included).
static HELD: std::sync::Mutex<Vec<i32>> = std::sync::Mutex::new(Vec::new());

fn held() -> std::sync::MutexGuard<'static, Vec<i32>> {
    HELD.lock().unwrap_or_else(|e| e.into_inner())
}

/// Releases every run lock this process holds (the fds stay open until their labs drop);
/// returns how many there were.
pub(crate) fn release_held_locks() -> usize {
    let fds = held();
    for &fd in fds.iter() {
        // SAFETY: flock on an fd a live RunLock owns (removed from HELD before it closes).
        unsafe { libc::flock(fd, libc::LOCK_UN) };
    }
    fds.len()
}

impl RunLock {
    pub(crate) fn acquire(run_id: &str) -> Result<RunLock> {
        ensure_dir()?;
        let path = lock_path(run_id);
        let f = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .with_context(|| format!("cannot create {}", path.display()))?;
        // SAFETY: flock on an fd we own.
        if unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
            anyhow::bail!(
                "Docker lab {run_id} is in use by another process ({})",
                path.display()
            );
        }
        held().push(f.as_raw_fd());
        Ok(RunLock { path, file: f })
    }
}

impl Drop for RunLock {
    fn drop(&mut self) {
        let fd = self.file.as_raw_fd();
        held().retain(|&h| h != fd);
        let _ = std::fs::remove_file(&self.path);
    }
}

/// True if a live process holds run `run_id`'s lock.
pub(crate) fn run_in_use(run_id: &str) -> bool {
    let Ok(f) = File::open(lock_path(run_id)) else {
        return false;
    };
    // SAFETY: flock on an fd we own; released when `f` closes.
    let r = unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
    r != 0
}

/// Remove the lock files of runs whose process is gone; returns their run ids.
pub(crate) fn remove_stale_locks() -> Vec<String> {
    let Ok(rd) = std::fs::read_dir(STATE_DIR) else {
        return Vec::new();
    };
    let mut v = Vec::new();
    for e in rd.filter_map(|e| e.ok()) {
        let n = e.file_name().to_string_lossy().into_owned();
        let Some(id) = n
            .strip_prefix("docker-run-")
            .and_then(|r| r.strip_suffix(".lock"))
        else {
            continue;
        };
        if !run_in_use(id) && std::fs::remove_file(e.path()).is_ok() {
            v.push(id.to_string());
        }
    }
    v
}

fn ns_marker(role: &str, run_id: &str) -> PathBuf {
    Path::new(STATE_DIR).join(format!("docker-{role}-{run_id}"))
}

/// Mark netns `np<id>-<role>` as made by a Docker lab, beside a link in the Docker host's
/// namespace (the macvlan parent's `mvp`, the egress remote's `rmt`; the netns lab makes
/// namespaces of those names too, which Docker cleanup must never touch).
pub(crate) fn write_ns_marker(role: &str, run_id: &str) -> Result<()> {
    ensure_dir()?;
    std::fs::write(ns_marker(role, run_id), b"")
        .with_context(|| format!("cannot write {}", ns_marker(role, run_id).display()))
}

pub(crate) fn remove_ns_marker(role: &str, run_id: &str) {
    let _ = std::fs::remove_file(ns_marker(role, run_id));
}

/// Run ids with a `role` marker.
pub(crate) fn ns_markers(role: &str) -> Vec<String> {
    let Ok(rd) = std::fs::read_dir(STATE_DIR) else {
        return Vec::new();
    };
    let prefix = format!("docker-{role}-");
    rd.filter_map(|e| e.ok())
        .filter_map(|e| {
            e.file_name()
                .to_str()?
                .strip_prefix(&prefix)
                .map(String::from)
        })
        .collect()
}

/// Record of a swarm netpath initialised.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize, PartialEq, Eq)]
pub(crate) struct SwarmRecord {
    /// Engine address (`unix:///var/run/docker.sock`).
    pub host: String,
    pub node_id: String,
    /// `docker_gwbridge` did not exist before the swarm (so it is netpath's to remove).
    pub gwbridge_created: bool,
}

fn swarm_path() -> PathBuf {
    Path::new(STATE_DIR).join("swarm.json")
}

pub(crate) fn read_swarm() -> Option<SwarmRecord> {
    let s = std::fs::read_to_string(swarm_path()).ok()?;
    serde_json::from_str(&s).ok()
}

pub(crate) fn write_swarm(r: &SwarmRecord) -> Result<()> {
    ensure_dir()?;
    std::fs::write(swarm_path(), serde_json::to_vec_pretty(r)?)
        .with_context(|| format!("cannot write {}", swarm_path().display()))
}

pub(crate) fn remove_swarm() {
    match std::fs::remove_file(swarm_path()) {
        Ok(()) => {}
        Err(e) if e.kind() == ErrorKind::NotFound => {}
        Err(e) => log::warn!("cannot remove {}: {e}", swarm_path().display()),
    }
}

/// Record of a second dockerd netpath started.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize, PartialEq, Eq)]
pub(crate) struct DaemonRecord {
    pub run_id: String,
    pub pid: u32,
    pub socket: PathBuf,
    pub data_root: PathBuf,
    pub exec_root: PathBuf,
    pub pidfile: PathBuf,
    pub config: PathBuf,
    pub log: PathBuf,
    /// `/run/netns/np<id>-dkr`.
    pub netns: String,
}

pub(crate) fn daemon_path(run_id: &str) -> PathBuf {
    Path::new(STATE_DIR).join(format!("dockerd-{run_id}.json"))
}

pub(crate) fn write_daemon(r: &DaemonRecord) -> Result<()> {
    ensure_dir()?;
    let p = daemon_path(&r.run_id);
    std::fs::write(&p, serde_json::to_vec_pretty(r)?)
        .with_context(|| format!("cannot write {}", p.display()))
}

/// Every second-daemon record.
pub(crate) fn daemons() -> Vec<DaemonRecord> {
    let Ok(rd) = std::fs::read_dir(STATE_DIR) else {
        return Vec::new();
    };
    rd.filter_map(|e| e.ok())
        .filter(|e| {
            let n = e.file_name();
            let n = n.to_string_lossy();
            n.starts_with("dockerd-") && n.ends_with(".json")
        })
        .filter_map(|e| serde_json::from_slice(&std::fs::read(e.path()).ok()?).ok())
        .collect()
}
