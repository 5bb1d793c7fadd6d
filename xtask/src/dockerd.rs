//! A Docker daemon for the privileged tests (`netpath/tests/docker.rs`): if `docker info`
//! fails, start `dockerd` in the background and wait until it answers (≤ 60 s); the
//! returned guard stops it again on drop. A daemon that was already running is left
//! alone.

use std::{
    path::PathBuf,
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use anyhow::{Context as _, bail};

use crate::cmd;

const START_TIMEOUT: Duration = Duration::from_secs(60);
const STOP_TIMEOUT: Duration = Duration::from_secs(30);

/// Stops the daemon [`ensure_dockerd`] started, if it started one.
pub struct Guard {
    child: Option<Child>,
}

impl Drop for Guard {
    fn drop(&mut self) {
        let Some(c) = self.child.take() else {
            return;
        };
        println!(
            "stopping the dockerd started for the tests (pid {})",
            c.id()
        );
        stop(c);
    }
}

fn answers() -> bool {
    cmd::probe(Command::new("docker").args(["info", "--format", "{{.ServerVersion}}"]))
        .is_some_and(|v| !v.trim().is_empty())
}

/// Make sure a Docker daemon answers; start one if none does.
pub fn ensure_dockerd() -> anyhow::Result<Guard> {
    if answers() {
        return Ok(Guard { child: None });
    }
    Ok(Guard {
        child: Some(start()?),
    })
}

impl Guard {
    /// Whether this guard started the daemon (and so may stop or restart it).
    pub fn owns_daemon(&self) -> bool {
        self.child.is_some()
    }

    /// Stops the daemon this guard started and starts it again; `Ok(false)` when the daemon
    /// was running before (someone else's: never restarted).
    pub fn restart(&mut self) -> anyhow::Result<bool> {
        let Some(c) = self.child.take() else {
            return Ok(false);
        };
        stop(c);
        self.child = Some(start()?);
        Ok(true)
    }
}

/// SIGTERM, then SIGKILL after [`STOP_TIMEOUT`].
fn stop(mut c: Child) {
    // SAFETY: our own unreaped child.
    unsafe { libc::kill(c.id() as libc::pid_t, libc::SIGTERM) };
    let _ = cmd::reap_within(&mut c, STOP_TIMEOUT);
}

/// Starts `dockerd` in the background and waits until it answers.
fn start() -> anyhow::Result<Child> {
    // In the workspace's target directory, not at a predictable name in the world-writable
    // temp directory (xtask runs as root; File::create there would follow a planted link).
    let log_path = crate::paths::target_dir(&crate::paths::workspace_root())?
        .join("netpath-xtask-dockerd.log");
    let log = std::fs::File::create(&log_path)
        .with_context(|| format!("cannot create {}", log_path.display()))?;
    let mut c = Command::new("dockerd");
    c.stdin(Stdio::null()).stdout(log.try_clone()?).stderr(log);
    println!("$ {} >{} 2>&1 &", cmd::display(&c), log_path.display());
    let mut child = c
        .spawn()
        .context("cannot start dockerd (is docker.io installed? `cargo xtask setup`)")?;
    let deadline = Instant::now() + START_TIMEOUT;
    loop {
        if let Some(st) = child.try_wait()? {
            bail!("dockerd exited with {st}{}", tail(&log_path));
        }
        if answers() {
            return Ok(child);
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            bail!(
                "dockerd did not answer within {START_TIMEOUT:?}{}",
                tail(&log_path)
            );
        }
        std::thread::sleep(Duration::from_millis(300));
    }
}

fn tail(p: &PathBuf) -> String {
    let s = std::fs::read_to_string(p).unwrap_or_default();
    let lines: Vec<&str> = s.lines().collect();
    let start = lines.len().saturating_sub(10);
    format!("; {}:\n{}", p.display(), lines[start..].join("\n"))
}
