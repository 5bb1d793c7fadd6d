//! The bench's "serve left on" section: what `netpath serve` costs a real event-loop server.
//!
//! Debian's redis-server in one container and redis-benchmark (GETs, 20 connections) in
//! another, on a Docker bridge network of their own, from an image built locally (`FROM
//! scratch`, the two binaries and their shared libraries; no registry). Five modes,
//! interleaved round by round with the order rotated: serve off, `serve` following an idle
//! third container only, `serve` following the server container (both at serve's default
//! `--sample`), `serve` with an empty program on each of its hooks instead of its own, and
//! `serve --prog-stats` following the server, whose run gives netpath's and the application's
//! CPU per request (`serve_cpu.rs`). serve's CPU share per core comes from /proc of the serve
//! process over the benchmark run. Every object is named `np<run>…` and labelled `netpath`,
//! and removed on the way out.
use std::io::Write as _;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, bail};
use serde::Serialize;

use super::Rounds;
pub use super::serve_cpu::CpuPerRequest;
use super::serve_cpu::{Meter, clk_tck, container_cpu_file, scrape};

/// Benchmark connections (redis-benchmark -c).
pub const CONNECTIONS: u32 = 20;
/// Goals: throughput at least this fraction of serve off, p50 at most this multiple.
pub const GOAL_THROUGHPUT: f64 = 0.97;
pub const GOAL_P50: f64 = 1.05;
/// Goal: netpath's CPU (programs + serve) at most this % of the machine's busy CPU.
pub const GOAL_CPU_PCT: f64 = 1.0;

/// GETs per redis-benchmark run, per `--requests`: a GET costs the server a fraction of a
/// harness round trip, and a run under a second moved by 10% between rounds here.
pub const GETS_PER_REQUEST: u64 = 5;

/// One mode's figures per round and their ratios against serve off.
#[derive(Clone, Debug, Serialize, schemars::JsonSchema)]
pub struct ModeRow {
    pub mode: String,
    pub rps: Rounds<f64>,
    pub p50_ms: Rounds<f64>,
    /// This mode's figure over serve off's in the same round (the modes of a round run back to
    /// back, so the machine's drift between rounds cancels); the rounds' spread is the noise a
    /// ratio is read against.
    pub rps_ratio: Rounds<f64>,
    pub p50_ratio: Rounds<f64>,
    /// serve's CPU time over the run's wall time, per core, % (None when serve was off).
    pub serve_cpu_pct_per_core: Option<f64>,
}

#[derive(Clone, Debug, Serialize, schemars::JsonSchema)]
pub struct ServeOn {
    pub rounds: usize,
    pub requests: u64,
    pub sample: u32,
    pub rows: Vec<ModeRow>,
    /// CPU per request with serve following the server, its programs' run time counted
    /// (`serve --prog-stats`): the median of the rounds', each field on its own.
    pub cpu_per_request: Option<CpuPerRequest>,
    /// Each round's, in order.
    pub cpu_rounds: Vec<CpuPerRequest>,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Mode {
    Off,
    Other,
    Server,
    /// serve following the server with one empty program on each of its hooks instead of
    /// its own: the least any program on those hooks costs the application.
    Empty,
    /// serve following the server with the kernel's BPF statistics on, for CPU per request
    /// (the statistics' two clock reads a run make its throughput no reference).
    Counted,
    /// `Empty` with the statistics on: their floor per run, taken out of `Counted`'s.
    EmptyCounted,
}

/// In the order of round 1 (each round starts one further on).
const MODES: [Mode; 6] = [
    Mode::Off,
    Mode::Other,
    Mode::Server,
    Mode::Empty,
    Mode::Counted,
    Mode::EmptyCounted,
];

impl Mode {
    fn name(self) -> &'static str {
        match self {
            Mode::Off => "serve off",
            Mode::Other => "serve following another container",
            Mode::Server => "serve following the server",
            Mode::Empty => "empty programs on serve's hooks",
            Mode::Counted => "serve following the server, CPU counted",
            Mode::EmptyCounted => "empty programs on serve's hooks, CPU counted",
        }
    }
}

/// One benchmark run: requests/s, p50 ms, serve's CPU % per core.
struct Sample {
    rps: f64,
    p50_ms: f64,
    cpu: Option<f64>,
    /// Counted mode only.
    per_request: Option<CpuPerRequest>,
}

/// The Docker objects of one run, removed on drop.
struct Objects {
    id: String,
    containers: Vec<String>,
    network: Option<String>,
    image: Option<String>,
}

impl Drop for Objects {
    fn drop(&mut self) {
        for c in &self.containers {
            let _ = docker(&["rm", "-f", c]);
        }
        if let Some(n) = &self.network {
            let _ = docker(&["network", "rm", n]);
        }
        if let Some(i) = &self.image {
            let _ = docker(&["rmi", "-f", i]);
        }
    }
}

fn docker(args: &[&str]) -> Result<String> {
    let out = Command::new("docker")
        .args(args)
        .stdin(Stdio::null())
        .output()
        .context("cannot run docker (the serve-left-on section needs the docker CLI)")?;
    if !out.status.success() {
        bail!(
            "docker {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// The section: `rounds` × three modes of `requests` GETs each.
pub fn run(rounds: usize, requests: u64) -> Result<ServeOn> {
    docker(&["info", "--format", "{{.ServerVersion}}"])
        .context("no Docker daemon answers (the serve-left-on section runs two containers)")?;
    let id = format!("{:06x}", (std::process::id() ^ nanos()) & 0xff_ffff);
    let mut o = Objects {
        id: id.clone(),
        containers: Vec::new(),
        network: None,
        image: None,
    };
    let image = build_image(&mut o)?;
    let net = format!("np{id}net");
    // A subnet of its own (containers get fixed addresses, so redis binds one, not all).
    let third = u8::try_from(nanos() % 250).unwrap_or(0) + 1;
    let subnet = format!("10.213.{third}.0/24");
    docker(&[
        "network",
        "create",
        "--label",
        "netpath=1",
        "--subnet",
        &subnet,
        &net,
    ])?;
    o.network = Some(net.clone());
    let base = std::net::Ipv4Addr::new(10, 213, third, 0);
    let [a, b, c, _] = base.octets();
    let srv_ip = format!("{a}.{b}.{c}.10");
    let oth_ip = format!("{a}.{b}.{c}.11");
    let srv = start_redis(&mut o, &image, &net, "srv", &srv_ip)?;
    let oth = start_redis(&mut o, &image, &net, "oth", &oth_ip)?;
    let ready = Instant::now();
    while let Err(e) = bench_once(&o, &image, &net, &srv_ip, 100) {
        if ready.elapsed() > Duration::from_secs(20) {
            bail!("redis-server in {srv} did not answer within 20 s: {e:#}");
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    let mut all: Vec<(usize, Mode, Sample)> = Vec::new();
    for r in 0..rounds.max(1) {
        for k in 0..MODES.len() {
            let m = MODES[(r + k) % MODES.len()];
            eprintln!("bench: serve left on, round {}: {}", r + 1, m.name());
            let s = measure(&o, &image, &net, &srv_ip, requests, m, &srv, &oth)?;
            all.push((r, m, s));
        }
    }
    let cpu_rounds = cpu_rounds(&all);
    Ok(ServeOn {
        rounds: rounds.max(1),
        requests,
        sample: crate::probe::DEFAULT_SAMPLE,
        rows: rows(&all),
        cpu_per_request: CpuPerRequest::median(&cpu_rounds),
        cpu_rounds,
    })
}

/// Each round's CPU per request following the server, the statistics' floor per run (the
/// empty programs' run of that round) taken out.
fn cpu_rounds(all: &[(usize, Mode, Sample)]) -> Vec<CpuPerRequest> {
    let of = |r: usize, m: Mode| {
        (all.iter())
            .find(|(r2, k, _)| *r2 == r && *k == m)
            .and_then(|(_, _, s)| s.per_request.clone())
    };
    let rounds = all.iter().map(|(r, _, _)| *r).max().map_or(0, |r| r + 1);
    (0..rounds)
        .filter_map(|r| {
            let mut c = of(r, Mode::Counted)?;
            c.less_floor(of(r, Mode::EmptyCounted)?.per_run_ns()?);
            Some(c)
        })
        .collect()
}

fn nanos() -> u32 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos())
}

fn rows(all: &[(usize, Mode, Sample)]) -> Vec<ModeRow> {
    let of = |m: Mode, f: fn(&Sample) -> f64| -> Rounds<f64> {
        Rounds::of(
            (all.iter())
                .filter(|(_, k, _)| *k == m)
                .map(|(_, _, s)| f(s))
                .collect(),
        )
    };
    // Per round: this mode's figure over serve off's of the same round.
    let ratios = |m: Mode, f: fn(&Sample) -> f64| -> Rounds<f64> {
        Rounds::of(
            (all.iter())
                .filter(|(_, k, _)| *k == m)
                .filter_map(|(r, _, s)| {
                    let off = all.iter().find(|(r2, k, _)| r2 == r && *k == Mode::Off)?;
                    Some(f(s) / f(&off.2))
                })
                .collect(),
        )
    };
    MODES
        .into_iter()
        .map(|m| {
            let cpu: Vec<f64> = (all.iter())
                .filter(|(_, k, _)| *k == m)
                .filter_map(|(_, _, s)| s.cpu)
                .collect();
            ModeRow {
                mode: m.name().to_string(),
                rps: of(m, |s| s.rps),
                p50_ms: of(m, |s| s.p50_ms),
                rps_ratio: ratios(m, |s| s.rps),
                p50_ratio: ratios(m, |s| s.p50_ms),
                serve_cpu_pct_per_core: crate::sys::stats::median(cpu),
            }
        })
        .collect()
}

/// One benchmark run in `mode`: serve started before (and waited for) and stopped after.
#[allow(clippy::too_many_arguments)]
fn measure(
    o: &Objects,
    image: &str,
    net: &str,
    ip: &str,
    requests: u64,
    mode: Mode,
    srv: &str,
    oth: &str,
) -> Result<Sample> {
    let follow = match mode {
        Mode::Off => None,
        Mode::Other => Some(oth),
        Mode::Server | Mode::Empty | Mode::Counted | Mode::EmptyCounted => Some(srv),
    };
    let empty = matches!(mode, Mode::Empty | Mode::EmptyCounted);
    let counted = matches!(mode, Mode::Counted | Mode::EmptyCounted);
    let mut serve = follow.map(|c| start_serve(c, empty, counted)).transpose()?;
    // The application's CPU file, found once for the run (a docker inspect and /proc read).
    let app = if counted {
        Some(container_cpu_file(container_pid(srv)?)?)
    } else {
        None
    };
    let meter = |s: &Serve, publish: Duration| -> Result<Meter> {
        let app = app.as_deref().context("a counted run's cgroup")?;
        Meter::read(s.addr, s.child.id(), app, publish)
    };
    let before = match &serve {
        Some(s) if counted => Some(meter(s, Duration::ZERO)?),
        _ => None,
    };
    let t0 = Instant::now();
    let cpu0 = serve.as_ref().map(|s| cpu_ticks(s.child.id()));
    let res = bench_once(o, image, net, ip, requests);
    let wall = t0.elapsed().as_secs_f64();
    let cpu = match (&serve, cpu0) {
        (Some(s), Some(Ok(c0))) => {
            let c1 = cpu_ticks(s.child.id())?;
            let hz = clk_tck();
            Some((c1 - c0) as f64 / hz / wall * 100.0)
        }
        _ => None,
    };
    let per_request = match (&serve, before) {
        (Some(s), Some(b)) => Some(b.per_request(&meter(s, Duration::from_millis(300))?, requests)),
        _ => None,
    };
    if let Some(s) = serve.as_mut() {
        s.stop();
    }
    let (rps, p50_ms) = res?;
    Ok(Sample {
        rps,
        p50_ms,
        cpu,
        per_request,
    })
}

/// The host pid of a running container's first process.
fn container_pid(name: &str) -> Result<u32> {
    let pid = docker(&["inspect", "--format", "{{.State.Pid}}", name])?;
    pid.parse()
        .with_context(|| format!("container {name} has no pid ({pid})"))
}

/// A running `netpath serve` and where its metrics answer, stopped (SIGTERM, then waited for)
/// on drop.
struct Serve {
    child: Child,
    addr: std::net::SocketAddr,
}

impl Serve {
    fn stop(&mut self) {
        // SAFETY: our own child, not yet reaped.
        unsafe { libc::kill(self.child.id() as libc::pid_t, libc::SIGTERM) };
        let _ = self.child.wait();
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            self.stop();
        }
    }
}

/// `netpath serve --container name` on a loopback port; ready once its /metrics answers.
/// `empty`: its hooks get an empty program instead of its own (`Tracer::attach_empty`);
/// `counted`: with the kernel's BPF statistics (`--prog-stats`).
fn start_serve(container: &str, empty: bool, counted: bool) -> Result<Serve> {
    let l = std::net::TcpListener::bind("127.0.0.1:0").context("picking a port for serve")?;
    let addr = l.local_addr()?;
    drop(l);
    let mut cmd = Command::new("/proc/self/exe");
    if empty {
        cmd.env(crate::probe::EMPTY_PROGRAMS_ENV, "1");
    }
    cmd.args(["serve", "--container", container, "--listen"])
        .arg(addr.to_string());
    if counted {
        cmd.arg("--prog-stats");
    }
    let child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .context("starting netpath serve")?;
    let mut s = Serve { child, addr };
    let t0 = Instant::now();
    loop {
        if let Ok(Some(st)) = s.child.try_wait() {
            bail!("`netpath serve --container {container}` exited early ({st})");
        }
        if scrape(addr).is_ok() {
            // Its first rescan has attached and followed the container by now.
            std::thread::sleep(Duration::from_secs(3));
            return Ok(s);
        }
        if t0.elapsed() > Duration::from_secs(60) {
            bail!("`netpath serve --container {container}` did not answer on {addr} within 60 s");
        }
        std::thread::sleep(Duration::from_millis(250));
    }
}

/// utime + stime of `pid`, clock ticks (fields 14 and 15 of /proc/pid/stat).
fn cpu_ticks(pid: u32) -> Result<u64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    let rest = s.rsplit_once(')').map(|(_, r)| r).unwrap_or("");
    let f: Vec<&str> = rest.split_whitespace().collect();
    let num = |i: usize| f.get(i).and_then(|x| x.parse::<u64>().ok()).unwrap_or(0);
    // After ")": state is field 3, so utime (14) and stime (15) are at 11 and 12.
    Ok(num(11) + num(12))
}

fn start_redis(o: &mut Objects, image: &str, net: &str, role: &str, ip: &str) -> Result<String> {
    let name = format!("np{}{role}", o.id);
    o.containers.push(name.clone());
    let mut args = vec!["run", "-d", "--name", &name, "--label", "netpath=1"];
    args.extend(["--network", net, "--ip", ip, image]);
    args.extend(redis_server_cmd(ip));
    docker(&args)?;
    Ok(name)
}

/// The command that runs the image's redis-server on `ip` alone, nothing saved. Without a
/// password redis answers only loopback clients: the client is another container, and the
/// address is on netpath's own network, so protected mode is off.
pub fn redis_server_cmd(ip: &str) -> [&str; 9] {
    [
        "/usr/bin/redis-server",
        "--bind",
        ip,
        "--protected-mode",
        "no",
        "--save",
        "",
        "--appendonly",
        "no",
    ]
}

/// One redis-benchmark run in its own container: (requests/s, p50 ms) of its GET test.
fn bench_once(o: &Objects, image: &str, net: &str, ip: &str, n: u64) -> Result<(f64, f64)> {
    let name = format!("np{}cli", o.id);
    let (n, c) = (n.to_string(), CONNECTIONS.to_string());
    let out = docker(&[
        "run",
        "--rm",
        "--name",
        &name,
        "--label",
        "netpath=1",
        "--network",
        net,
        image,
        "/usr/bin/redis-benchmark",
        "-h",
        ip,
        "-c",
        &c,
        "-n",
        &n,
        "-t",
        "get",
        "--csv",
    ]);
    let _ = docker(&["rm", "-f", &name]);
    parse_csv(&out?)
}

/// redis-benchmark --csv: a header, then `"GET","rps","avg","min","p50",…`.
fn parse_csv(text: &str) -> Result<(f64, f64)> {
    for line in text.lines() {
        let f: Vec<&str> = line.split(',').map(|x| x.trim_matches('"')).collect();
        if f.first() == Some(&"GET")
            && let (Some(Ok(rps)), Some(Ok(p50))) = (
                f.get(1).map(|x| x.parse::<f64>()),
                f.get(4).map(|x| x.parse::<f64>()),
            )
        {
            return Ok((rps, p50));
        }
    }
    bail!("no GET line in redis-benchmark's output: {text}")
}

/// `FROM scratch` with redis-server, redis-benchmark and their libraries, built from a tar
/// on stdin (no registry).
fn build_image(o: &mut Objects) -> Result<String> {
    let tag = format!("np{}redis:bench", o.id);
    o.image = Some(tag.clone());
    redis_image(&tag)?;
    Ok(tag)
}

/// Builds the image `tag` (label `netpath`): redis-server and redis-benchmark from the host's
/// redis-tools, their libraries and the loader. The real-traffic tests use it too.
pub fn redis_image(tag: &str) -> Result<()> {
    let bins = [redis_server()?, Path::new("/usr/bin/redis-benchmark")];
    let mut b = tar::Builder::new(Vec::new());
    add(
        &mut b,
        "Dockerfile",
        b"FROM scratch\nCOPY rootfs/ /\n",
        0o644,
    )?;
    let mut files = std::collections::BTreeSet::new();
    for bin in bins {
        if !bin.exists() {
            bail!(
                "{} is missing: apt-get install redis-tools (or cargo xtask setup --bench)",
                bin.display()
            );
        }
        files.extend(crate::docker::image::shared_libraries(bin)?);
    }
    for f in &files {
        let data = std::fs::read(f).with_context(|| format!("reading {}", f.display()))?;
        let rel = f.strip_prefix("/").unwrap_or(f);
        add(&mut b, &format!("rootfs/{}", rel.display()), &data, 0o755)?;
    }
    for (bin, at) in bins
        .iter()
        .zip(["/usr/bin/redis-server", "/usr/bin/redis-benchmark"])
    {
        // redis-server is a link (to redis-check-rdb): the file itself, at the name run.
        let data = std::fs::read(std::fs::canonicalize(bin)?)?;
        add(&mut b, &format!("rootfs{at}"), &data, 0o755)?;
    }
    let ctx = b.into_inner()?;
    let mut child = Command::new("docker")
        .args(["build", "-q", "--label", "netpath=1", "-t", tag, "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .context("cannot run docker build")?;
    child
        .stdin
        .take()
        .context("docker build's stdin")?
        .write_all(&ctx)?;
    let out = child.wait_with_output()?;
    if !out.status.success() {
        bail!(
            "docker build {tag}: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(())
}

/// The redis server binary: redis-server's, or redis-tools' redis-check-rdb, the same
/// program, which runs as the server when named redis-server (so the bench installs only
/// redis-tools, and no redis service starts on the machine).
fn redis_server() -> Result<&'static Path> {
    let server = Path::new("/usr/bin/redis-server");
    Ok(if server.exists() {
        server
    } else {
        Path::new("/usr/bin/redis-check-rdb")
    })
}

fn add(b: &mut tar::Builder<Vec<u8>>, path: &str, data: &[u8], mode: u32) -> Result<()> {
    let mut h = tar::Header::new_gnu();
    h.set_entry_type(tar::EntryType::Regular);
    h.set_size(data.len() as u64);
    h.set_mode(mode);
    h.set_mtime(0);
    b.append_data(&mut h, path, data)
        .with_context(|| format!("adding {path} to the build context"))
}

#[cfg(test)]
mod tests {
    #[test]
    fn parses_redis_benchmark_csv() {
        let t = "\"test\",\"rps\",\"avg_latency_ms\",\"min_latency_ms\",\"p50_latency_ms\",\"p95_latency_ms\"\n\
                 \"GET\",\"65789.47\",\"0.180\",\"0.056\",\"0.167\",\"0.263\"\n";
        assert_eq!(super::parse_csv(t).unwrap(), (65789.47, 0.167));
        assert!(super::parse_csv("nothing").is_err());
    }
}
