//! `cargo xtask churn --minutes N`: `netpath serve --all` while containers of netpath's agent
//! image start and stop for N minutes (three at a time, each living about a second and
//! answering a few request/response round trips from the host, so each makes series of its
//! own), scraped with each batch up and after it is gone. In each batch one container is
//! killed first (its network namespace and veth go while the exporter still follows it) and
//! the batch is removed while scrapes are in flight. Prints the exporter's RSS, open fds,
//! series count and what it follows once a minute, and fails if a scrape failed, or if the
//! containers' series, the followed set or the fds did not come back down once the churn
//! stopped (a node's own series, such as a drop reason first seen, may stay). RSS is
//! reported, not judged: the machine is shared. `--seconds` runs a short version. When the
//! churn started the Docker daemon itself, it restarts it every third of the run (at most
//! every 15 minutes), between batches, and fails if a scrape failed meanwhile or if the next
//! batch makes no series; a daemon that was already running is someone else's and is left be.

use std::{
    io::{Read as _, Write as _},
    net::{TcpListener, TcpStream},
    path::PathBuf,
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use anyhow::{Context as _, bail};
use clap::Args;

use crate::{cmd, dockerd, paths, setup};

#[derive(Args, Debug)]
pub struct ChurnArgs {
    /// How long to churn containers.
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..=1440))]
    pub minutes: u64,
    /// Churn this many seconds instead (a short run).
    #[arg(long, conflicts_with = "minutes", value_parser = clap::value_parser!(u64).range(5..=3600))]
    pub seconds: Option<u64>,
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
    // docker.io (the daemon it churns containers on) is among the lab's packages.
    setup::run(&setup::SetupArgs::default())?;
    let exe = match &args.netpath {
        Some(p) => p.clone(),
        None => paths::release_netpath()?,
    };
    let mut dockerd = dockerd::ensure_dockerd()?;
    // The containers carry this run's id and its lock is held while they churn, so a
    // `netpath cleanup` (a test's, or a user's) running meanwhile leaves them alone.
    let lock = RunLock::acquire()?;
    let net = Network::create(&lock)?;
    let image = capture(Command::new(&exe).arg("image"))?
        .lines()
        .last()
        .unwrap_or_default()
        .to_string();
    let port = TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
    let serve = Serve(
        Command::new(&exe)
            // Every journey followed: each container's 20 round trips make its series (at
            // the default one in 64 a batch often makes none).
            .args(["serve", "--all", "--rescan", "500ms", "--sample-every", "1"])
            .args(["--listen", &format!("127.0.0.1:{port}")])
            .stdout(Stdio::null())
            .spawn()
            .context("starting netpath serve")?,
    );
    let pid = serve.0.id();
    wait_ready(port)?;
    let start = snapshot(pid, port);
    println!("start: {start}");
    let secs = args.seconds.unwrap_or(args.minutes * 60);
    let end = Instant::now() + Duration::from_secs(secs);
    let mut next_report = Instant::now() + Duration::from_secs(60);
    let (mut started, mut peak) = (0u64, start);
    // After the first batch, whatever the exporter opens once (runtime connections) is open.
    let mut warm: Option<Snap> = None;
    let every = restart_every(secs);
    let mut next_restart = Instant::now() + every;
    let mut restarts = 0u32;
    if !dockerd.owns_daemon() {
        println!(
            "no daemon restarts: the Docker daemon was running before the churn (not ours to restart)"
        );
    }
    while Instant::now() < end {
        if dockerd.owns_daemon() && Instant::now() >= next_restart {
            restart_daemon(&mut dockerd, pid, port, start)?;
            restarts += 1;
            next_restart += every;
        }
        let alive = batch(&image, &lock.label, &net, port, start.containers, || {
            snapshot(pid, port)
        })?;
        if alive.container_series <= start.container_series {
            bail!(
                "a batch's containers made no series ({alive}; start {start}, {restarts} daemon restarts before it)"
            );
        }
        started += 3;
        let s = snapshot(pid, port);
        warm.get_or_insert(s);
        peak.rss_kib = peak.rss_kib.max(s.rss_kib).max(alive.rss_kib);
        peak.series = peak.series.max(alive.series);
        peak.container_series = peak.container_series.max(alive.container_series);
        if Instant::now() >= next_report {
            println!("{started:>6} containers started and removed: {s} (with a batch up: {alive})");
            next_report += Duration::from_secs(60);
        }
    }
    std::thread::sleep(Duration::from_secs(3));
    let last = snapshot(pid, port);
    println!(
        "after {secs} s, {started} containers, {restarts} daemon restarts: {last}; peak RSS {} KiB, peak {} series (start {start})",
        peak.rss_kib, peak.series
    );
    if peak.container_series <= start.container_series {
        bail!("no container's traffic made a series: the churn measured nothing");
    }
    // Series of the node's own (a drop reason seen for the first time) may stay; those of a
    // container must go with it.
    if last.containers != start.containers || last.container_series > start.container_series {
        bail!("the exporter still follows what churned away: start {start}, end {last}");
    }
    if let Some(w) = warm {
        // Against the larger of the start and the first batch: a restarted daemon's client
        // connection is opened once more (runs with restarts end one fd above the first
        // batch, below the start, over 66 containers as over 3873), while a leak per
        // container would grow with the churn. A connection the HTTP side still holds closes
        // by itself: up to 10 s for it, as the exporter test allows.
        let base = w.fds.max(start.fds);
        let deadline = Instant::now() + Duration::from_secs(10);
        let mut fds = last.fds;
        while fds > base && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(500));
            fds = snapshot(pid, port).fds;
        }
        if fds > base {
            bail!(
                "the exporter's open fds grew: {} at the start, {} after the first batch, {fds} 10 s after the end",
                start.fds,
                w.fds
            );
        }
    }
    Ok(())
}

/// How often the churn restarts a daemon of its own: twice in a short run, every 15 minutes in
/// a long one.
fn restart_every(secs: u64) -> Duration {
    Duration::from_secs((secs / 3).clamp(2, 900))
}

/// Restarts the churn's own Docker daemon between batches while the exporter on `port` is
/// scraped: every `/ready` and `/metrics` answers meanwhile, and the exporter still follows
/// no more than it did at the start (the daemon's restart stopped nothing it follows).
fn restart_daemon(
    dockerd: &mut dockerd::Guard,
    pid: u32,
    port: u16,
    start: Snap,
) -> anyhow::Result<()> {
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let flag = stop.clone();
    let scrapes = std::thread::spawn(move || {
        let (mut n, mut failed) = (0u32, 0u32);
        while !flag.load(std::sync::atomic::Ordering::SeqCst) {
            for path in ["/ready", "/metrics"] {
                n += 1;
                if !get(port, path).is_some_and(|r| r.contains(" 200 ")) {
                    failed += 1;
                }
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        (n, failed)
    });
    let t = Instant::now();
    let restarted = dockerd.restart();
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    let (n, failed) = scrapes.join().unwrap_or((0, 1));
    restarted?;
    println!(
        "daemon restarted in {:.1} s; {n} scrapes meanwhile, {failed} failed",
        t.elapsed().as_secs_f64()
    );
    if failed > 0 {
        bail!("{failed} of {n} scrapes of the exporter failed while the Docker daemon restarted");
    }
    // The exporter keeps what a daemon that is down had named, and lets it go at its first
    // listing after the daemon answers (it lists every 0.5 s here).
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let s = snapshot(pid, port);
        if s.containers <= start.containers {
            return Ok(());
        }
        if Instant::now() >= deadline {
            bail!(
                "10 s after the daemon's restart the exporter still follows containers that are gone ({s})"
            );
        }
        std::thread::sleep(Duration::from_millis(250));
    }
}

/// Three containers serving request/response on addresses of netpath's churn network, a few
/// round trips to each from the host (so the exporter makes their hop series), scraped with
/// all three up (`alive`, returned); then the first one killed (its network namespace goes
/// under the exporter, which follows it until its next listing) and all removed while the
/// exporter on `port` is scraped.
fn batch(
    image: &str,
    run_label: &str,
    net: &Network,
    port: u16,
    baseline: u64,
    alive: impl Fn() -> Snap,
) -> anyhow::Result<Snap> {
    // The last batch's containers first let go (one 0.5 s listing after their removal), so
    // the count below is this batch's.
    followed_within("let the last batch go", &alive, |n| n <= baseline)?;
    let mut ids = Vec::new();
    let addrs: Vec<String> = (10..13).map(|h| net.host(h)).collect();
    for ip in &addrs {
        let bind = format!("{ip}:8080");
        let out = capture(&mut docker(&[
            "run",
            "-d",
            "--label",
            "netpath=churn",
            "--label",
            run_label,
            "--network",
            &net.name,
            "--ip",
            ip,
            image,
            "serve",
            "--bind",
            &bind,
        ]))?;
        ids.push(out.trim().to_string());
    }
    // Traffic before the exporter's listing names a container is not its to measure: wait
    // for the batch to be followed. Failing here means it stopped following new containers.
    followed_within("follow a new batch", &alive, |n| {
        n >= baseline + addrs.len() as u64
    })?;
    for ip in &addrs {
        round_trips(ip, 20)?;
    }
    // The exporter rescans every 0.5 s and drains the programs every 0.1 s.
    std::thread::sleep(Duration::from_secs(1));
    let snap = alive();
    capture(docker(&["kill", &ids[0]]).stdout(Stdio::null()))?;
    let scrapes = std::thread::spawn(move || {
        (0..10)
            .filter(|_| !get(port, "/metrics").is_some_and(|r| r.contains(" 200 ")))
            .count()
    });
    let mut rm = docker(&["rm", "-f"]);
    rm.args(&ids).stdout(Stdio::null());
    capture(&mut rm)?;
    let failed = scrapes.join().unwrap_or(10);
    if failed > 0 {
        bail!("{failed} of 10 scrapes failed while a batch was removed");
    }
    Ok(snap)
}

/// Waits up to 10 s for the number of containers the exporter follows to satisfy `ok`.
fn followed_within(
    what: &str,
    alive: &impl Fn() -> Snap,
    ok: impl Fn(u64) -> bool,
) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let s = alive();
        if ok(s.containers) {
            return Ok(());
        }
        if Instant::now() >= deadline {
            bail!("the exporter did not {what} within 10 s ({s})");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// `n` request/response exchanges (1 KiB each way, the agent's defaults) with the agent
/// serving on `ip`:8080, retrying the connect while the container starts.
fn round_trips(ip: &str, n: usize) -> anyhow::Result<()> {
    let addr: std::net::SocketAddr = format!("{ip}:8080").parse()?;
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut s = loop {
        match TcpStream::connect_timeout(&addr, Duration::from_secs(1)) {
            Ok(s) => break s,
            Err(e) if Instant::now() > deadline => bail!("connecting to {addr}: {e}"),
            Err(_) => std::thread::sleep(Duration::from_millis(50)),
        }
    };
    s.set_read_timeout(Some(Duration::from_secs(5)))?;
    let (req, mut resp) = ([7u8; 1024], [0u8; 1024]);
    for _ in 0..n {
        s.write_all(&req)?;
        s.read_exact(&mut resp)
            .with_context(|| format!("the agent on {addr} answering"))?;
    }
    Ok(())
}

/// A Docker bridge network of the churn's own (`npchurn<pid>`, bridge `np<pid>ch`, subnet
/// 10.218.K.0/24, no prefix a lab uses), labelled with its run; removed on drop.
struct Network {
    name: String,
    prefix: String,
}

impl Network {
    fn create(lock: &RunLock) -> anyhow::Result<Network> {
        let pid = std::process::id();
        let prefix = format!("10.218.{}", pid % 254 + 1);
        let name = format!("npchurn{pid}");
        capture(&mut docker(&[
            "network",
            "create",
            "--label",
            "netpath",
            "--label",
            &lock.label,
            "--subnet",
            &format!("{prefix}.0/24"),
            "-o",
            &format!("com.docker.network.bridge.name=np{pid}ch"),
            &name,
        ]))?;
        Ok(Network { name, prefix })
    }

    fn host(&self, h: u8) -> String {
        format!("{}.{h}", self.prefix)
    }
}

impl Drop for Network {
    fn drop(&mut self) {
        let _ = capture(&mut docker(&["network", "rm", &self.name]));
    }
}

/// The docker CLI, bounded: Docker 20.10 can stall on a remove under load, which is then
/// said rather than waited on forever.
fn docker(args: &[&str]) -> Command {
    let mut c = Command::new("timeout");
    c.args(["--kill-after=5", "120", "docker"]).args(args);
    c
}

/// netpath's run lock (`/run/netpath/docker-run-<id>.lock`, flock held while this lives),
/// the way a netpath run holds it: what carries its id is not a leftover.
struct RunLock {
    path: PathBuf,
    _file: std::fs::File,
    /// `netpath.run=<id>`.
    label: String,
}

impl RunLock {
    fn acquire() -> anyhow::Result<RunLock> {
        use std::os::{fd::AsRawFd as _, unix::fs::DirBuilderExt as _};
        let dir = std::path::Path::new("/run/netpath");
        if !dir.exists() {
            std::fs::DirBuilder::new().mode(0o700).create(dir)?;
        }
        let id = format!("churn{}", std::process::id());
        let path = dir.join(format!("docker-run-{id}.lock"));
        let file = std::fs::File::create(&path).with_context(|| path.display().to_string())?;
        // SAFETY: flock on an fd this process owns; released when it closes.
        if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
            bail!("{} is held by another process", path.display());
        }
        Ok(RunLock {
            path,
            _file: file,
            label: format!("netpath.run={id}"),
        })
    }
}

impl Drop for RunLock {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
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
    fds: u64,
    series: u64,
    /// Series labelled with a container: what must go when the container goes.
    container_series: u64,
    containers: u64,
}

impl std::fmt::Display for Snap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "RSS {} KiB, {} fds, {} series ({} of containers), {} containers followed",
            self.rss_kib, self.fds, self.series, self.container_series, self.containers
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
    let fds = std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, |d| d.count() as u64);
    let body = get(port, "/metrics").unwrap_or_default();
    let samples: Vec<&str> = body
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .collect();
    let series = samples.len() as u64;
    let container_series = samples
        .iter()
        .filter(|l| l.contains("container=\""))
        .count() as u64;
    let containers = body
        .lines()
        .find_map(|l| l.strip_prefix("netpath_watched_containers "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0);
    Snap {
        rss_kib,
        fds,
        series,
        container_series,
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
