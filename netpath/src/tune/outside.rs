//! `tune --apply CMD --revert CMD`: a change made outside netpath (firewall rules, a sysctl, a
//! qdisc), put in place before side A's turns and taken out before side B's.
//!
//! The machine starts in B's state: `--apply` takes it to A's, `--revert` back, and each runs
//! only when the side changes (neither needs to be idempotent). Whatever ends the run (its
//! end, an error, a failing command, Ctrl-C, SIGTERM, a panic), a change in place is reverted
//! before the lab goes: the state lives in one static that the signal and panic cleanup reads
//! (`lab::before_labs_go`), and a command and that cleanup never run at once.
//!
//! Each command is `sh -c CMD` in its own process group (a Ctrl-C at the terminal reaches
//! netpath, which reverts, not a command halfway through), with the path's names in its
//! environment ([`environment`]), stdout and stderr captured (the output stays clean JSON).

use std::os::fd::AsRawFd as _;
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::{Mutex, MutexGuard, TryLockError};
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, bail};
use serde::Serialize;

/// Where the commands run: netpath's own network namespace (the host's) or one of the path's.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, clap::ValueEnum, schemars::JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum RunIn {
    Host,
    Client,
    Server,
    Node,
}

/// The two commands and where they run.
#[derive(Clone, Debug, Serialize, schemars::JsonSchema)]
pub struct Commands {
    pub apply: String,
    pub revert: String,
    pub run_in: RunIn,
}

/// How often each command ran and how long the longest run took.
#[derive(Clone, Debug, Default, Serialize, schemars::JsonSchema)]
pub struct Tally {
    pub applied: u32,
    pub reverted: u32,
    pub longest_apply_s: f64,
    pub longest_revert_s: f64,
}

/// The change of this process, read by the signal and panic cleanup.
struct Active {
    cmds: Commands,
    env: Vec<(String, String)>,
    /// The namespace file the commands enter (None: netpath's own).
    netns: Option<PathBuf>,
    /// A's state is (or may be, after a failed or interrupted apply) in place.
    applied: bool,
    /// The cleanup took over: no command runs from now on.
    closed: bool,
    tally: Tally,
}

static ACTIVE: Mutex<Option<Active>> = Mutex::new(None);
/// The process group of the command running now (0: none), for the cleanup to stop one
/// that does not end.
static RUNNING: AtomicI32 = AtomicI32::new(0);
/// How long a signal's cleanup waits for a running command before it stops it.
const WAIT_FOR_COMMAND: Duration = Duration::from_secs(30);

fn active() -> MutexGuard<'static, Option<Active>> {
    ACTIVE.lock().unwrap_or_else(|e| e.into_inner())
}

/// The change armed for one run: [`Change::enter`] before each side's turns,
/// [`Change::finish`] at the end; dropped without `finish`, it reverts all the same.
pub struct Change(());

impl Change {
    /// Arms `cmds` with the path's environment; nothing runs yet (the machine is in B's state).
    pub fn arm(cmds: &Commands, env: Vec<(String, String)>, netns: Option<PathBuf>) -> Change {
        crate::lab::before_labs_go("tune --revert", revert_on_interrupt);
        *active() = Some(Active {
            cmds: cmds.clone(),
            env,
            netns,
            applied: false,
            closed: false,
            tally: Tally::default(),
        });
        Change(())
    }

    /// Puts the machine in side A's state (`a`) or B's, running the command if the state
    /// changes. A failing `--apply` is reverted at once; the error carries what the command
    /// wrote to stderr and its exit status.
    pub fn enter(&self, a: bool) -> Result<()> {
        let mut g = active();
        let st = g.as_mut().context("no change armed")?;
        if st.closed {
            bail!("interrupted: the change was reverted");
        }
        if st.applied == a {
            return Ok(());
        }
        if !a {
            return revert(st);
        }
        st.applied = true;
        match run(&st.cmds.apply, "--apply", st) {
            Ok(took) => {
                st.tally.applied += 1;
                st.tally.longest_apply_s = st.tally.longest_apply_s.max(took.as_secs_f64());
                Ok(())
            }
            Err(e) => match revert(st) {
                Ok(()) => Err(anyhow::anyhow!("{e:#}; reverted with --revert")),
                Err(r) => Err(anyhow::anyhow!("{e:#}; then {r:#}")),
            },
        }
    }

    /// Reverts if A's state is in place and says how often each command ran.
    pub fn finish(self) -> Result<Tally> {
        let mut g = active();
        let Some(mut st) = g.take() else {
            return Ok(Tally::default());
        };
        if st.applied && !st.closed {
            revert(&mut st)?;
        }
        Ok(st.tally)
    }
}

impl Drop for Change {
    fn drop(&mut self) {
        let mut g = active();
        if let Some(mut st) = g.take()
            && st.applied
            && !st.closed
            && let Err(e) = revert(&mut st)
        {
            eprintln!("netpath: {e:#}");
        }
    }
}

/// Runs `--revert`; A's state counts as gone even if it fails (it is not run twice).
fn revert(st: &mut Active) -> Result<()> {
    st.applied = false;
    let took = run(&st.cmds.revert, "--revert", st).context("the change may still be in place")?;
    st.tally.reverted += 1;
    st.tally.longest_revert_s = st.tally.longest_revert_s.max(took.as_secs_f64());
    Ok(())
}

/// `sh -c cmd` with the path's environment, in the chosen namespace and a process group of
/// its own; fails with the command's stderr and exit status unless it exits 0.
fn run(cmd: &str, flag: &str, st: &Active) -> Result<Duration> {
    let mut c = Command::new("sh");
    c.arg("-c")
        .arg(cmd)
        .envs(st.env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0);
    let ns = match &st.netns {
        Some(p) => Some(
            std::fs::File::open(p)
                .with_context(|| format!("{flag}: cannot open namespace {}", p.display()))?,
        ),
        None => None,
    };
    if let Some(f) = &ns {
        // The fd stays open in the parent until spawn returns, so the child has it.
        crate::sys::netns::spawn_in(&mut c, f.as_raw_fd());
    }
    let t0 = Instant::now();
    let child = c
        .spawn()
        .with_context(|| format!("{flag} `{}`: cannot start sh", short(cmd, 60)))?;
    drop(ns);
    RUNNING.store(child.id() as i32, Ordering::SeqCst);
    let out = child.wait_with_output();
    RUNNING.store(0, Ordering::SeqCst);
    let out = out.with_context(|| format!("{flag} `{}`", short(cmd, 60)))?;
    if !out.status.success() {
        bail!(
            "{flag} `{}` failed ({}){}",
            short(cmd, 60),
            out.status,
            stderr_tail(&out.stderr)
        );
    }
    Ok(t0.elapsed())
}

/// The last lines of a command's stderr on one line: ": line | line".
fn stderr_tail(err: &[u8]) -> String {
    let text = String::from_utf8_lossy(err);
    let lines: Vec<&str> = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    if lines.is_empty() {
        return ", nothing on stderr".to_string();
    }
    let tail = &lines[lines.len().saturating_sub(5)..];
    format!(": {}", tail.join(" | "))
}

/// `cmd` on one line, at most `max` characters (an ellipsis where it was cut).
pub fn short(cmd: &str, max: usize) -> String {
    let one: String = cmd.split_whitespace().collect::<Vec<_>>().join(" ");
    if one.chars().count() <= max {
        return one;
    }
    let cut: String = one.chars().take(max.saturating_sub(1)).collect();
    format!("{}…", cut.trim_end())
}

/// The signal's and panic's cleanup: waits for a running command (stopping it after
/// [`WAIT_FOR_COMMAND`]), then reverts a change in place and closes the change for good.
fn revert_on_interrupt() {
    let Some(mut g) = lock_for_cleanup() else {
        eprintln!("netpath: cannot revert the change: a command is still running");
        return;
    };
    let Some(st) = g.as_mut() else {
        return;
    };
    st.closed = true;
    if !st.applied {
        return;
    }
    eprintln!(
        "netpath: reverting the change: {}",
        short(&st.cmds.revert, 60)
    );
    if let Err(e) = revert(st) {
        eprintln!("netpath: {e:#}");
    }
}

/// The change's lock, once the command holding it ends (stopped with SIGKILL to its process
/// group after [`WAIT_FOR_COMMAND`]); None if it still does not come.
fn lock_for_cleanup() -> Option<MutexGuard<'static, Option<Active>>> {
    let t0 = Instant::now();
    let mut killed = false;
    loop {
        match ACTIVE.try_lock() {
            Ok(g) => return Some(g),
            Err(TryLockError::Poisoned(p)) => return Some(p.into_inner()),
            Err(TryLockError::WouldBlock) => {}
        }
        let waited = t0.elapsed();
        if !killed && waited >= WAIT_FOR_COMMAND {
            let pg = RUNNING.load(Ordering::SeqCst);
            if pg > 0 {
                eprintln!("netpath: stopping a command that ran {}s", waited.as_secs());
                // SAFETY: kill(2) on the command's own process group.
                unsafe { libc::kill(-pg, libc::SIGKILL) };
            }
            killed = true;
        }
        if waited >= WAIT_FOR_COMMAND + Duration::from_secs(5) {
            return None;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// The environment the commands see: the path's names.
pub fn environment(path: &crate::path::NetPath) -> Vec<(String, String)> {
    let mut env = vec![
        ("NP_RUN_ID".to_string(), path.run_id.clone()),
        ("NP_DRIVER".to_string(), path.driver.name().to_string()),
    ];
    let mut put = |k: &str, v: String| env.push((format!("NP_{k}"), v));
    let nss = [
        ("CLIENT", Some(&path.client_ns)),
        ("SERVER", Some(&path.server_ns)),
        ("NODE", path.node_ns.as_ref()),
    ];
    for (role, ns) in nss {
        let Some(ns) = ns else { continue };
        // `ip netns exec` takes names under /run/netns; nsenter --net= takes any file.
        if ns.path.starts_with(crate::sys::netns::NETNS_RUN_DIR) {
            put(&format!("{role}_NS"), ns.name.clone());
        }
        put(&format!("{role}_NS_PATH"), outside_path(&ns.path));
    }
    if let Some(ip) = client_addr(path) {
        put("CLIENT_ADDR", ip);
    }
    put("SERVER_ADDR", path.server_bind.ip().to_string());
    put("SERVER_PORT", path.server_bind.port().to_string());
    put("CONNECT_ADDR", path.connect_to.ip().to_string());
    put("CONNECT_PORT", path.connect_to.port().to_string());
    if let Some(p) = path.published {
        put("PUBLISHED", p.to_string());
    }
    if let Some((net, len)) = path.subnet {
        put("SUBNET", format!("{net}/{len}"));
    }
    if let Some(t) = &path.nft_table {
        put("NFT_TABLE", t.clone());
    }
    let list: Vec<String> = path
        .devices
        .iter()
        .map(|d| format!("{}@{}", d.name, d.netns))
        .collect();
    put("DEVICES", list.join(" "));
    put("DEVICE_COUNT", path.devices.len().to_string());
    for (i, d) in path.devices.iter().enumerate() {
        put(&format!("DEVICE_{i}"), d.name.clone());
        put(&format!("DEVICE_{i}_NS"), d.netns.clone());
        put(&format!("DEVICE_{i}_KIND"), d.kind.name().to_string());
    }
    env
}

/// A namespace file as another process reaches it: netpath's `/proc/self/…` (a container's
/// namespace held through an fd) named through netpath's pid.
fn outside_path(p: &Path) -> String {
    match p.strip_prefix("/proc/self") {
        Ok(rest) => Path::new("/proc")
            .join(std::process::id().to_string())
            .join(rest)
            .display()
            .to_string(),
        Err(_) => p.display().to_string(),
    }
}

/// The client's source address towards the server: what a connected datagram socket in the
/// client's namespace is given (nothing is sent; it is never bound to a wildcard).
fn client_addr(path: &crate::path::NetPath) -> Option<String> {
    let to = path.connect_to;
    path.client_ns
        .run(|| {
            let s = crate::harness::dgram::connected(libc::IPPROTO_UDP, to)?;
            Ok(s.local_addr()?.ip().to_string())
        })
        .ok()
}

/// The namespace file `RunIn` names on `path` (None: netpath's own).
pub fn netns_of(path: &crate::path::NetPath, run_in: RunIn) -> Result<Option<PathBuf>> {
    Ok(match run_in {
        RunIn::Host => None,
        RunIn::Client => Some(path.client_ns.path.clone()),
        RunIn::Server => Some(path.server_ns.path.clone()),
        RunIn::Node => Some(
            path.node_ns
                .as_ref()
                .map(|n| n.path.clone())
                .context("--commands-in node: this path has no node namespace (use host)")?,
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_are_shortened_on_one_line() {
        assert_eq!(short("a  b\n c", 10), "a b c");
        assert_eq!(short("iptables -I FORWARD -j ACCEPT", 12), "iptables -I…");
    }

    #[test]
    fn stderr_keeps_its_last_lines() {
        assert_eq!(stderr_tail(b""), ", nothing on stderr");
        assert_eq!(stderr_tail(b"1\n2\n\n3\n4\n5\n6\n"), ": 2 | 3 | 4 | 5 | 6");
    }

    #[test]
    fn a_namespace_held_through_an_fd_is_named_through_netpath_pid() {
        let pid = std::process::id();
        assert_eq!(
            outside_path(Path::new("/proc/self/fd/7")),
            format!("/proc/{pid}/fd/7")
        );
        assert_eq!(outside_path(Path::new("/run/netns/x")), "/run/netns/x");
    }
}
