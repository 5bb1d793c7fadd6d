//! Cleanup of labs: the in-process registry used on Ctrl-C / SIGTERM / panic, and
//! `cleanup_leftovers` for namespaces left behind by killed runs.

use std::collections::{BTreeMap, HashSet};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::sync::{Mutex, Once};
use std::time::Duration;

use anyhow::{Context, Result};

use super::netns::{NETNS_RUN_DIR, Netns, ns_inum, require_root};
use super::nl::Nl;
use super::{list_netpath_netns, run_id_of_netns};

/// Labs of this process: run id → namespace names (registered before creation).
static REGISTRY: Mutex<BTreeMap<String, Vec<String>>> = Mutex::new(BTreeMap::new());

pub(crate) fn register(run_id: &str, netns: &str) {
    let mut r = REGISTRY.lock().unwrap_or_else(|e| e.into_inner());
    let v = r.entry(run_id.to_string()).or_default();
    if !v.iter().any(|n| n == netns) {
        v.push(netns.to_string());
    }
}

pub(crate) fn unregister(run_id: &str) {
    let mut r = REGISTRY.lock().unwrap_or_else(|e| e.into_inner());
    r.remove(run_id);
}

/// Remove one namespace by name: its links first (so veth pairs are destroyed even if
/// some reference keeps the namespace alive), then the mount. Best effort for links.
fn remove_netns(name: &str) -> Result<()> {
    let ns = Netns {
        name: name.to_string(),
        path: Path::new(NETNS_RUN_DIR).join(name),
        inum: 0,
    };
    if ns.path.exists() {
        // Fails harmlessly if the file is not (or no longer) a namespace mount.
        let _ = ns.run(|| Nl::new()?.purge_links());
    }
    ns.delete()
}

/// Tear down every lab registered in this process. Used from the signal watcher and the
/// panic hook; never blocks on the registry for long.
fn cleanup_registered(wait: Duration) -> Vec<String> {
    let deadline = std::time::Instant::now() + wait;
    let labs = loop {
        match REGISTRY.try_lock() {
            Ok(mut r) => break std::mem::take(&mut *r),
            Err(std::sync::TryLockError::Poisoned(p)) => {
                break std::mem::take(&mut *p.into_inner());
            }
            Err(std::sync::TryLockError::WouldBlock) => {
                if std::time::Instant::now() >= deadline {
                    return Vec::new();
                }
                std::thread::sleep(Duration::from_millis(5));
            }
        }
    };
    let mut removed = Vec::new();
    for (_, names) in labs {
        for n in names {
            if remove_netns(&n).is_ok() {
                removed.push(n);
            }
        }
    }
    removed
}

static PIPE_WR: AtomicI32 = AtomicI32::new(-1);
static SIGNALLED: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(sig: libc::c_int) {
    // Async-signal-safe only: a second signal while cleaning up exits at once.
    if SIGNALLED.swap(true, Ordering::SeqCst) {
        unsafe { libc::_exit(128 + sig) };
    }
    let fd = PIPE_WR.load(Ordering::SeqCst);
    let b = sig as u8;
    if fd < 0 || unsafe { libc::write(fd, (&b as *const u8).cast(), 1) } != 1 {
        unsafe { libc::_exit(128 + sig) };
    }
}

/// On Ctrl-C (SIGINT) or SIGTERM: remove every lab registered in this process, then exit
/// with 130 / 143. On panic: the same cleanup after the previous hook ran, then unwinding
/// (or abort) continues. Idempotent.
///
/// The signal handler only writes to a pipe; a watcher thread does the cleanup. It
/// replaces any SIGINT/SIGTERM handler installed before it (e.g. tokio::signal).
pub fn install_signal_cleanup() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let mut fds = [0 as libc::c_int; 2];
        if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
            log::warn!(
                "cannot install lab cleanup on signals: pipe2: {}",
                std::io::Error::last_os_error()
            );
            return;
        }
        let (rd, wr) = (fds[0], fds[1]);
        PIPE_WR.store(wr, Ordering::SeqCst);
        let spawned = std::thread::Builder::new()
            .name("np-sigclean".into())
            .spawn(move || {
                let mut b = 0u8;
                loop {
                    let n = unsafe { libc::read(rd, (&mut b as *mut u8).cast(), 1) };
                    if n == 1 {
                        break;
                    }
                    if n < 0
                        && std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted
                    {
                        continue;
                    }
                    return;
                }
                let sig = i32::from(b);
                let removed = cleanup_registered(Duration::from_secs(2));
                if !removed.is_empty() {
                    eprintln!(
                        "netpath: interrupted; removed lab namespaces {}",
                        removed.join(", ")
                    );
                }
                std::process::exit(128 + sig);
            });
        if let Err(e) = spawned {
            log::warn!("cannot install lab cleanup on signals: {e}");
            return;
        }
        for sig in [libc::SIGINT, libc::SIGTERM] {
            let mut sa: libc::sigaction = unsafe { std::mem::zeroed() };
            sa.sa_sigaction = on_signal as *const () as usize;
            sa.sa_flags = libc::SA_RESTART;
            unsafe {
                libc::sigemptyset(&mut sa.sa_mask);
                if libc::sigaction(sig, &sa, std::ptr::null_mut()) != 0 {
                    log::warn!(
                        "cannot install handler for signal {sig}: {}",
                        std::io::Error::last_os_error()
                    );
                }
            }
        }
        let prev = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            prev(info);
            let removed = cleanup_registered(Duration::from_millis(200));
            if !removed.is_empty() {
                eprintln!(
                    "netpath: panic; removed lab namespaces {}",
                    removed.join(", ")
                );
            }
        }));
    });
}

/// Remove every netpath namespace (`/run/netns/np<6 hex>-<role>`) left behind by runs that
/// are gone, and nothing else. A run is left alone while another live process still
/// holds one of its namespaces (an open fd or a thread inside), which every running lab
/// does. Returns the names removed.
pub fn cleanup_leftovers() -> Result<Vec<String>> {
    let names = list_netpath_netns()?;
    if names.is_empty() {
        return Ok(Vec::new());
    }
    require_root()?;
    let mut runs: BTreeMap<String, Vec<(String, Option<u32>)>> = BTreeMap::new();
    for n in names {
        let id = run_id_of_netns(&n).unwrap_or_default().to_string();
        let inum = ns_inum(&Path::new(NETNS_RUN_DIR).join(&n)).ok();
        runs.entry(id).or_default().push((n, inum));
    }
    let busy = netns_held_by_other_processes().context("cannot scan /proc for namespace users")?;
    let mut removed = Vec::new();
    for (id, nss) in runs {
        if let Some((n, _)) = nss
            .iter()
            .find(|(_, i)| i.is_some_and(|i| busy.contains(&i)))
        {
            log::info!("lab {id} is in use by another process ({n}); leaving it");
            continue;
        }
        for (n, _) in nss {
            remove_netns(&n).with_context(|| format!("cannot remove leftover netns {n}"))?;
            removed.push(n);
        }
        unregister(&id);
    }
    Ok(removed)
}

/// Inodes of network namespaces that some other process has open or is inside.
fn netns_held_by_other_processes() -> Result<HashSet<u32>> {
    let me = std::process::id().to_string();
    let mut held = HashSet::new();
    // A namespace shows up as `net:[INUM]` (ns links, fds from /proc/*/ns/net) or as the
    // path it was opened by (`/run/netns/NAME`, possibly "(deleted)"): stat that one.
    let parse = |p: &Path, held: &mut HashSet<u32>| {
        if let Ok(t) = std::fs::read_link(p) {
            let t = t.to_string_lossy();
            if let Some(i) = t.strip_prefix("net:[").and_then(|r| r.strip_suffix(']')) {
                if let Ok(i) = i.parse::<u32>() {
                    held.insert(i);
                }
            } else if t.starts_with(NETNS_RUN_DIR)
                && let Ok(i) = ns_inum(p)
            {
                held.insert(i);
            }
        }
    };
    for e in std::fs::read_dir("/proc")?.filter_map(|e| e.ok()) {
        let pid = e.file_name().to_string_lossy().into_owned();
        if !pid.bytes().all(|c| c.is_ascii_digit()) || pid == me {
            continue;
        }
        let base = e.path();
        if let Ok(fds) = std::fs::read_dir(base.join("fd")) {
            for fd in fds.filter_map(|f| f.ok()) {
                parse(&fd.path(), &mut held);
            }
        }
        if let Ok(tasks) = std::fs::read_dir(base.join("task")) {
            for t in tasks.filter_map(|t| t.ok()) {
                parse(&t.path().join("ns/net"), &mut held);
            }
        }
    }
    Ok(held)
}
