//! Lab cleanup: this process's labs on Ctrl-C, SIGTERM or panic, and what killed runs left.
//!
//! The in-process registry is used on Ctrl-C / SIGTERM / panic; `cleanup_leftovers` removes
//! namespaces (and docker-proxy processes) killed runs left.

use std::collections::{BTreeMap, HashSet};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicUsize, Ordering};
use std::sync::{Mutex, Once};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow};

use super::{list_netpath_netns, run_id_of_netns};
use crate::sys::netns::{NETNS_RUN_DIR, Netns, ns_inum, require_root};
use crate::sys::nl::Nl;
use crate::sys::proxy::{proxy_process, proxy_processes};

/// What one lab of this process owns.
#[derive(Default)]
struct RunEntry {
    /// Namespace names (registered right after creation).
    netns: Vec<String>,
    /// Child processes running inside them (docker-proxy), not yet reaped.
    pids: Vec<u32>,
}

/// Set (under the registry's lock) when a signal's or a panic's cleanup takes the registry.
static CLEANING: AtomicBool = AtomicBool::new(false);

/// Fails once a signal came or a cleanup took the registry: what a run creates from then on
/// (a Docker network or container) could land after the cleanup's last sweep and be left.
fn refuse_if_interrupted() -> Result<()> {
    if CLEANING.load(Ordering::SeqCst) || SIGNALLED.load(Ordering::SeqCst) {
        anyhow::bail!("interrupted: this run is being cleaned up");
    }
    Ok(())
}

/// Creates sent to a daemon and not yet answered. A signal's cleanup waits for them before
/// it sweeps: a create in flight lands whenever the daemon gets to it (seen on a loaded CI
/// host: a bridge network created after every sweep had come back empty).
static IN_FLIGHT: AtomicUsize = AtomicUsize::new(0);

/// Held across one create request; see [`begin_create`].
pub(crate) struct CreateInFlight(());

impl Drop for CreateInFlight {
    fn drop(&mut self) {
        IN_FLIGHT.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Marks a create as in flight, or fails if a signal came. Counted first, then checked
/// (both SeqCst, as the handler sets the flag before the cleanup reads the count): either
/// this create sees the signal and is not sent, or the cleanup sees it in flight and waits.
pub(crate) fn begin_create() -> Result<CreateInFlight> {
    IN_FLIGHT.fetch_add(1, Ordering::SeqCst);
    let guard = CreateInFlight(());
    refuse_if_interrupted()?;
    Ok(guard)
}

/// Waits up to `wait` for the creates in flight to be answered; false if some still are.
pub(crate) fn wait_for_creates(wait: Duration) -> bool {
    let deadline = Instant::now() + wait;
    while IN_FLIGHT.load(Ordering::SeqCst) != 0 {
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    true
}

/// Labs of this process by run id.
static REGISTRY: Mutex<BTreeMap<String, RunEntry>> = Mutex::new(BTreeMap::new());

fn registry() -> std::sync::MutexGuard<'static, BTreeMap<String, RunEntry>> {
    REGISTRY.lock().unwrap_or_else(|e| e.into_inner())
}

fn register_in(r: &mut BTreeMap<String, RunEntry>, run_id: &str, netns: &str) {
    let v = &mut r.entry(run_id.to_string()).or_default().netns;
    if !v.iter().any(|n| n == netns) {
        v.push(netns.to_string());
    }
}

/// Creates a namespace with `create` and registers it as `run_id`'s, holding the registry
/// across both: a signal's cleanup (which takes the registry first) then either runs before
/// the namespace exists or sees it registered, never between the two (a SIGTERM there left
/// the namespace behind). Registered only once it is ours, so cleanup never touches a name
/// someone else created.
pub(crate) fn create_registered<T>(
    run_id: &str,
    create: impl FnOnce() -> Result<T>,
    name: impl Fn(&T) -> &str,
) -> Result<T> {
    let mut r = registry();
    // Once a cleanup has taken the registry, nothing new is made for it to miss.
    if CLEANING.load(Ordering::SeqCst) {
        anyhow::bail!("interrupted: this run is being cleaned up");
    }
    let made = create()?;
    register_in(&mut r, run_id, name(&made));
    Ok(made)
}

pub(crate) fn unregister(run_id: &str) {
    registry().remove(run_id);
}

/// Record a child process of a lab (the registry then owns stopping and reaping it on
/// signal/panic cleanup).
pub(crate) fn register_pid(run_id: &str, pid: u32) {
    registry()
        .entry(run_id.to_string())
        .or_default()
        .pids
        .push(pid);
}

/// Take a child process back from the registry. False if somebody else (signal/panic
/// cleanup, `cleanup_leftovers`) already stopped and reaped it.
pub(crate) fn take_pid(run_id: &str, pid: u32) -> bool {
    let mut r = registry();
    let Some(e) = r.get_mut(run_id) else {
        return false;
    };
    let before = e.pids.len();
    e.pids.retain(|p| *p != pid);
    e.pids.len() != before
}

/// How long a process gets to exit after SIGTERM before it is sent SIGKILL.
const TERM_GRACE: Duration = Duration::from_secs(2);

/// SIGTERM, wait up to [`TERM_GRACE`], then SIGKILL; always reaps.
pub(crate) fn stop_child(child: &mut std::process::Child) -> Result<()> {
    let pid = child.id();
    if child.try_wait()?.is_some() {
        return Ok(());
    }
    // SAFETY: pid is our unreaped child, so it cannot have been reused.
    unsafe { libc::kill(pid as libc::pid_t, libc::SIGTERM) };
    let deadline = Instant::now() + TERM_GRACE;
    while Instant::now() < deadline {
        if child
            .try_wait()
            .with_context(|| format!("waiting for process {pid}"))?
            .is_some()
        {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    child
        .kill()
        .with_context(|| format!("cannot kill process {pid}"))?;
    child
        .wait()
        .with_context(|| format!("waiting for process {pid}"))?;
    Ok(())
}

/// Stop and reap a child of this process known only by pid (the registry owned it).
fn stop_pid(pid: u32) {
    let p = pid as libc::pid_t;
    let reaped = |flags| {
        let mut st = 0;
        // SAFETY: plain syscall on our own child.
        let r = unsafe { libc::waitpid(p, &mut st, flags) };
        r == p || (r < 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::ECHILD))
    };
    if reaped(libc::WNOHANG) {
        return;
    }
    unsafe { libc::kill(p, libc::SIGTERM) };
    let deadline = Instant::now() + Duration::from_millis(500);
    while Instant::now() < deadline {
        if reaped(libc::WNOHANG) {
            return;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    unsafe { libc::kill(p, libc::SIGKILL) };
    reaped(0);
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
            Ok(mut r) => {
                CLEANING.store(true, Ordering::SeqCst);
                break std::mem::take(&mut *r);
            }
            Err(std::sync::TryLockError::Poisoned(p)) => {
                CLEANING.store(true, Ordering::SeqCst);
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
    for (_, entry) in labs {
        // Processes first: they keep the namespaces alive.
        for pid in entry.pids {
            stop_pid(pid);
        }
        for n in entry.netns {
            if remove_netns(&n).is_ok() {
                removed.push(n);
            }
        }
    }
    removed
}

/// More cleanup to run on SIGINT/SIGTERM after the labs (Docker objects of this process).
type Hook = (&'static str, fn() -> Vec<String>);
static HOOKS: Mutex<Vec<Hook>> = Mutex::new(Vec::new());

/// Runs `f` on SIGINT/SIGTERM (after the labs are removed, before the exit) once
/// [`install_signal_cleanup`] is in place; `f` returns what it removed. A second
/// registration under the same `name` is ignored.
pub fn on_interrupt(name: &'static str, f: fn() -> Vec<String>) {
    let mut h = HOOKS.lock().unwrap_or_else(|e| e.into_inner());
    if !h.iter().any(|(n, _)| *n == name) {
        h.push((name, f));
    }
}

/// Cleanup to run on SIGINT/SIGTERM and panic before the labs are removed (`tune --revert`:
/// a change made inside a lab's namespaces is undone while they still exist).
static FIRST: Mutex<Vec<FirstHook>> = Mutex::new(Vec::new());
type FirstHook = (&'static str, fn());

/// Runs `f` on SIGINT/SIGTERM and panic before anything is removed, once
/// [`install_signal_cleanup`] is in place; `f` says what it did itself. A second
/// registration under the same `name` is ignored.
pub fn before_labs_go(name: &'static str, f: fn()) {
    let mut h = FIRST.lock().unwrap_or_else(|e| e.into_inner());
    if !h.iter().any(|(n, _)| *n == name) {
        h.push((name, f));
    }
}

static PIPE_WR: AtomicI32 = AtomicI32::new(-1);
static SIGNALLED: AtomicBool = AtomicBool::new(false);

/// After SIGINT/SIGTERM the cleanup thread removes what this process made and exits it with
/// 128 + signal. The main thread calls this before it returns: if a signal came, it waits for
/// that exit instead of racing it (its own work may just have failed because the cleanup
/// removed things under it).
pub fn wait_if_interrupted() {
    if SIGNALLED.load(Ordering::SeqCst) && PIPE_WR.load(Ordering::SeqCst) >= 0 {
        loop {
            std::thread::park();
        }
    }
}

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

/// On Ctrl-C (SIGINT) or SIGTERM: remove every lab registered in this process and run the
/// hooks (Docker objects), then exit with 130 / 143. On panic: the same cleanup after the
/// previous hook ran, then unwinding (or abort) continues. Idempotent.
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
            .spawn(move || watch_signals(rd));
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
            cleanup_after_panic();
        }));
    });
}

/// The cleanup thread: waits for the signal handler's byte on `rd`, removes the labs and
/// runs the hooks, then exits the process with 128 + signal.
fn watch_signals(rd: libc::c_int) {
    let mut b = 0u8;
    loop {
        let n = unsafe { libc::read(rd, (&mut b as *mut u8).cast(), 1) };
        if n == 1 {
            break;
        }
        if n < 0 && std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted {
            continue;
        }
        return;
    }
    let sig = i32::from(b);
    cleanup_everything(Duration::from_secs(2), "interrupted");
    std::process::exit(128 + sig);
}

/// What Ctrl-C removes: first what [`before_labs_go`] undoes, then the labs registered in
/// this process (their processes first), then the hooks' objects (Docker). Prints what went, prefixed by `why`.
fn cleanup_everything(wait: Duration, why: &str) {
    let first = FIRST.lock().unwrap_or_else(|e| e.into_inner()).clone();
    first.into_iter().for_each(|(_, f)| f());
    let removed = cleanup_registered(wait);
    if !removed.is_empty() {
        eprintln!(
            "netpath: {why}; removed lab namespaces {}",
            removed.join(", ")
        );
    }
    let hooks = HOOKS.lock().unwrap_or_else(|e| e.into_inner()).clone();
    for (_, h) in hooks {
        let removed = h();
        if !removed.is_empty() {
            eprintln!("netpath: {why}; removed {}", removed.join(", "));
        }
    }
}

/// The panic hook's cleanup: the same as Ctrl-C's, run once, whatever happens next. A panic
/// may unwind into code that turns it into an error, or abort the process (a panic where
/// unwinding cannot start, e.g. inside the runtime's thread start when memory ran out, or a
/// second panic): removing everything now is the only way neither leaves state behind.
/// It runs on a fresh thread so that the panicking thread's async runtime context (the
/// Docker and netlink cleanups start their own) is not in the way; if no thread can be
/// started, here.
fn cleanup_after_panic() {
    static DONE: AtomicBool = AtomicBool::new(false);
    if DONE.swap(true, Ordering::SeqCst) {
        return;
    }
    let work = || cleanup_everything(Duration::from_millis(200), "panic");
    match std::thread::Builder::new()
        .name("np-panicclean".into())
        .spawn(work)
    {
        Ok(t) => {
            let _ = t.join();
        }
        Err(_) => work(),
    }
}

/// Remove every netpath namespace (`/run/netns/np<6 hex>-<role>`) left behind by runs that
/// are gone, and nothing else. A run is left alone while another live process still
/// holds one of its namespaces (an open fd or a thread inside), which every running lab
/// does. docker-proxy processes running inside a netpath namespace do not count as
/// holders: they are what a killed published-proxy run leaves behind, and they are
/// killed (reaped if they are our children) before the namespaces go. Returns the
/// names removed.
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
    let ours: HashSet<u32> = runs.values().flatten().filter_map(|(_, i)| *i).collect();
    let proxies = lab_proxies(&ours);
    let skip: HashSet<u32> = proxies.iter().map(|(pid, _)| *pid).collect();
    let busy =
        netns_held_by_other_processes(&skip).context("cannot scan /proc for namespace users")?;
    let mut removed = Vec::new();
    for (id, nss) in runs {
        if let Some((n, _)) = nss
            .iter()
            .find(|(_, i)| i.is_some_and(|i| busy.contains(&i)))
        {
            log::info!("lab {id} is in use by another process ({n}); leaving it");
            continue;
        }
        let inums: HashSet<u32> = nss.iter().filter_map(|(_, i)| *i).collect();
        for (pid, inum) in &proxies {
            if inums.contains(inum) {
                kill_leftover_proxy(*pid, *inum)
                    .with_context(|| format!("cannot stop leftover docker-proxy {pid}"))?;
                log::info!("killed leftover docker-proxy {pid} of lab {id}");
            }
        }
        for (n, _) in nss {
            remove_netns(&n).with_context(|| format!("cannot remove leftover netns {n}"))?;
            removed.push(n);
        }
        unregister(&id);
    }
    Ok(removed)
}

/// docker-proxy processes whose network namespace is one of `inums`: (pid, netns inum).
fn lab_proxies(inums: &HashSet<u32>) -> Vec<(u32, u32)> {
    proxy_processes()
        .into_iter()
        .filter(|p| inums.contains(&p.netns_inum))
        .map(|p| (p.pid, p.netns_inum))
        .collect()
}

/// Kill a leftover docker-proxy through a pidfd (so a recycled pid is never signalled),
/// wait until it has exited, and reap it if it is our own child.
fn kill_leftover_proxy(pid: u32, inum: u32) -> Result<()> {
    // SAFETY: plain syscall; the returned fd is owned below.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid as libc::pid_t, 0) };
    if fd < 0 {
        let e = std::io::Error::last_os_error();
        if e.raw_os_error() == Some(libc::ESRCH) {
            return Ok(()); // already gone
        }
        return Err(anyhow!(e).context("pidfd_open"));
    }
    // SAFETY: fd was just returned by pidfd_open and nothing else owns it.
    let pidfd = unsafe { OwnedFd::from_raw_fd(fd as i32) };
    // The pidfd pins the process: check it is still the docker-proxy we found.
    if proxy_process(pid).map(|p| p.netns_inum) != Some(inum) {
        return Ok(());
    }
    let signal = |sig: libc::c_int| {
        // SAFETY: plain syscall on a valid pidfd.
        unsafe {
            libc::syscall(
                libc::SYS_pidfd_send_signal,
                pidfd.as_raw_fd(),
                sig,
                std::ptr::null::<libc::siginfo_t>(),
                0,
            )
        }
    };
    // A pidfd polls readable once the process has exited.
    let exited = |ms: i32| {
        let mut p = libc::pollfd {
            fd: pidfd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd.
        unsafe { libc::poll(&mut p, 1, ms) == 1 }
    };
    signal(libc::SIGTERM);
    if !exited(TERM_GRACE.as_millis() as i32) {
        signal(libc::SIGKILL);
        if !exited(5000) {
            return Err(anyhow!("docker-proxy {pid} did not exit after SIGKILL"));
        }
    }
    if parent_of(pid) == Some(std::process::id()) {
        let mut st = 0;
        // SAFETY: our own child, exited; reaping it frees the pid.
        unsafe { libc::waitpid(pid as libc::pid_t, &mut st, 0) };
    }
    Ok(())
}

/// Parent of a process, from /proc/PID/stat.
fn parent_of(pid: u32) -> Option<u32> {
    let stat = procfs::process::Process::new(i32::try_from(pid).ok()?)
        .ok()?
        .stat()
        .ok()?;
    u32::try_from(stat.ppid).ok()
}

/// Inodes of network namespaces that some other process (not in `skip`) has open or is
/// inside.
fn netns_held_by_other_processes(skip: &HashSet<u32>) -> Result<HashSet<u32>> {
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
        if !pid.bytes().all(|c| c.is_ascii_digit())
            || pid == me
            || pid.parse::<u32>().is_ok_and(|p| skip.contains(&p))
        {
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
