//! `cargo xtask churn --minutes N`: `netpath serve --all` while containers of netpath's agent
//! image start and stop for N minutes (three at a time, each living about a second), scraped
//! after every batch. Prints the exporter's RSS, its series count and what it follows once a
//! minute, and fails if the series or the followed set did not come back down once the churn
//! stopped. RSS is reported, not judged: the machine is shared.

use std::{
    io::{Read as _, Write as _},
    net::{TcpListener, TcpStream},
    path::PathBuf,
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use anyhow::{Context as _, bail};
use clap::Args;

use crate::{cmd, dockerd, target_dir, workspace_root};

#[derive(Args, Debug)]
pub struct ChurnArgs {
    /// How long to churn containers.
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..=1440))]
    pub minutes: u64,
    /// The netpath binary (default: build it in release mode).
    #[arg(long)]
    pub netpath: Option<PathBuf>,
}

/// Kills the exporter on the way out, pass or fail.
struct Serve(Child);

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

pub fn run(args: &ChurnArgs) -> anyhow::Result<()> {
    let exe = match &args.netpath {
        Some(p) => p.clone(),
        None => {
            let root = workspace_root();
            cmd::run(Command::new("cargo").current_dir(&root).args([
                "build",
                "--release",
                "-p",
                "netpath",
            ]))?;
            target_dir(&root)?.join("release/netpath")
        }
    };
    let _dockerd = dockerd::ensure_dockerd()?;
    let image = capture(Command::new(&exe).arg("image"))?
        .lines()
        .last()
        .unwrap_or_default()
        .to_string();
    let port = TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
    let serve = Serve(
        Command::new(&exe)
            .args(["serve", "--all", "--rescan-secs", "0.5"])
            .args(["--listen", &format!("127.0.0.1:{port}")])
            .stdout(Stdio::null())
            .spawn()
            .context("starting netpath serve")?,
    );
    let pid = serve.0.id();
    wait_ready(port)?;
    let start = snapshot(pid, port);
    println!("start: {start}");
    let end = Instant::now() + Duration::from_secs(args.minutes * 60);
    let mut next_report = Instant::now() + Duration::from_secs(60);
    let (mut started, mut peak) = (0u64, start.rss_kib);
    while Instant::now() < end {
        started += batch(&image)?;
        let s = snapshot(pid, port);
        peak = peak.max(s.rss_kib);
        if Instant::now() >= next_report {
            println!("{started:>6} containers started and removed: {s}");
            next_report += Duration::from_secs(60);
        }
    }
    std::thread::sleep(Duration::from_secs(3));
    let last = snapshot(pid, port);
    println!(
        "after {} min, {started} containers: {last}; peak RSS {peak} KiB (start {} KiB)",
        args.minutes, start.rss_kib
    );
    if last.containers != start.containers || last.series > start.series {
        bail!("the exporter still follows what churned away: start {start}, end {last}");
    }
    Ok(())
}

/// Three containers up for a second, scraped, then removed. Returns how many started.
fn batch(image: &str) -> anyhow::Result<u64> {
    let mut ids = Vec::new();
    for _ in 0..3 {
        let out = capture(Command::new("docker").args([
            "run",
            "-d",
            "--label",
            "netpath=churn",
            image,
            "hold",
        ]))?;
        ids.push(out.trim().to_string());
    }
    std::thread::sleep(Duration::from_secs(1));
    let mut rm = Command::new("docker");
    rm.args(["rm", "-f"]).args(&ids).stdout(Stdio::null());
    capture(&mut rm)?;
    Ok(ids.len() as u64)
}

/// Runs `c`, returns its stdout; fails with its stderr when it exits non-zero.
fn capture(c: &mut Command) -> anyhow::Result<String> {
    let out = c
        .stderr(Stdio::piped())
        .output()
        .with_context(|| cmd::display(c))?;
    if !out.status.success() {
        bail!(
            "{}: {}",
            cmd::display(c),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

fn wait_ready(port: u16) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(60);
    while Instant::now() < deadline {
        if get(port, "/ready").is_some_and(|b| b.contains(" 200 ")) {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(300));
    }
    bail!("netpath serve did not become ready within 60 s")
}

/// The exporter's state at one moment.
#[derive(Clone, Copy, Default)]
struct Snap {
    rss_kib: u64,
    series: u64,
    containers: u64,
}

impl std::fmt::Display for Snap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "RSS {} KiB, {} series, {} containers followed",
            self.rss_kib, self.series, self.containers
        )
    }
}

fn snapshot(pid: u32, port: u16) -> Snap {
    let rss_kib = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0);
    let body = get(port, "/metrics").unwrap_or_default();
    let series = body
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .count() as u64;
    let containers = body
        .lines()
        .find_map(|l| l.strip_prefix("netpath_watched_containers "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0);
    Snap {
        rss_kib,
        series,
        containers,
    }
}

/// One HTTP GET on loopback: the whole response.
fn get(port: u16, path: &str) -> Option<String> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
    write!(s, "GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n").ok()?;
    let mut buf = String::new();
    s.read_to_string(&mut buf).ok()?;
    Some(buf)
}
