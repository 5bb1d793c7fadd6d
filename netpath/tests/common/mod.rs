//! Helpers shared by the privileged lab test binaries.
#![allow(dead_code)] // each test binary uses its own subset

pub mod dgram;
pub mod leftovers;
pub mod schema;
pub mod usernet;

use std::collections::HashSet;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use netpath::docker::{DockerLab, DockerLabOptions, Engine};

use netpath::driver::Driver;
use netpath::harness::{RrConfig, RrLoad};
use netpath::measure::compare::CompareOptions;
use netpath::path::NetPath;
use netpath::probe::backend::{self, BackendChoice};
use netpath::probe::tracer::{Tracer, TracerOptions};
use netpath::sys::netns::Netns;

/// The counters under which the kernel counts a journey it could not finish (`LOST` less
/// the ring's and the flight map's, which lose samples and starts, not journeys): with the
/// completed ones they cover every journey sent, or a loss went uncounted.
pub const JOURNEY_LOSSES: [&str; 7] = [
    "consumed_early",
    "stale",
    "reused",
    "dropped",
    "recv_unmatched",
    "relay_unmatched",
    "probe_misses",
];

/// The journeys `lost` (a run record's `lost`) counts as not finished.
pub fn counted_losses(lost: &std::collections::BTreeMap<&str, u64>) -> u64 {
    JOURNEY_LOSSES
        .iter()
        .map(|k| lost.get(k).copied().unwrap_or(0))
        .sum()
}

/// The same from a record's JSON `lost` object.
pub fn counted_losses_json(lost: &serde_json::Value) -> u64 {
    JOURNEY_LOSSES
        .iter()
        .map(|k| lost[*k].as_u64().unwrap_or(0))
        .sum()
}

/// The `netpath` bin of this build.
pub const NETPATH: &str = env!("CARGO_BIN_EXE_netpath");

/// No bulk phase and no burst: a `compare` or `diff` round measures latency alone, the
/// quickest live run.
pub const LATENCY_ONLY: [&str; 4] = ["--bulk", "0", "--burst", "0"];

/// A small `compare` with every phase (2 rounds of host and bridge, 300 requests, 0.3 s of
/// bulk, bursts at 300 and 600 per second) and program stats, as JSON: the whole program in
/// seconds, for the tests of its output and of what it leaves behind.
pub const SMALL_COMPARE: &[&str] = &[
    "compare",
    "-d",
    "host,bridge",
    "-n",
    "300",
    "--warmup",
    "20",
    "--rounds",
    "2",
    "--bulk",
    "0.3",
    "--burst",
    "300",
    "--burst-duration",
    "0.3",
    "--prog-stats",
    "--json",
];

/// A command line for a latency-only run: `args`, then [`LATENCY_ONLY`].
pub fn latency_only<'a>(args: &[&'a str]) -> Vec<&'a str> {
    [args, &LATENCY_ONLY].concat()
}

/// `compare -d <drivers>` measuring latency alone, with `more` options.
pub fn latency_compare<'a>(drivers: &'a str, more: &[&'a str]) -> Vec<&'a str> {
    latency_only(&[&["compare", "-d", drivers][..], more].concat())
}

/// `compare --between client server` as the Docker and containerd tests run it: `n` traced
/// requests after 50 warm-up ones, latency only, no untraced run, JSON on stdout.
pub fn compare_between(client: &str, server: &str, n: u64) -> Command {
    let mut cmd = Command::new(NETPATH);
    cmd.args(["compare", "--between", client, server, "-n", &n.to_string()])
        .args(["--warmup", "50", "--no-untraced", "--json"])
        .args(LATENCY_ONLY);
    cmd
}

/// Tests share /run/netns and `cleanup_leftovers` removes every lab not held by another
/// process, so they run one at a time even without `--test-threads=1`.
pub static SERIAL: Mutex<()> = Mutex::new(());

pub fn need_root() -> std::sync::MutexGuard<'static, ()> {
    let g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    assert!(
        nix::unistd::geteuid().is_root(),
        "this test needs root (it creates network namespaces): run the privileged tests as root, e.g. `cargo xtask test`"
    );
    g
}

/// Netpath namespaces that exist now but did not before: what a test left behind. (Other
/// processes on a developer machine may run labs of their own meanwhile; CI runs alone.)
pub fn leftovers(before: &[String]) -> Vec<String> {
    netpath::lab::list_netpath_netns()
        .unwrap()
        .into_iter()
        .filter(|n| !before.contains(n))
        .collect()
}

/// The backend `NETPATH_BACKEND` names (each VM pass sets it) or the one netpath picks on
/// this kernel.
pub fn backend() -> backend::Backend {
    let caps = netpath::probe::doctor::probe().expect("doctor");
    backend::select(BackendChoice::from_env().unwrap(), &caps).expect("a backend")
}

/// The programs, loaded under [`backend`].
pub fn load_tracer(opts: &TracerOptions) -> Tracer {
    Tracer::load(backend(), opts).expect("load programs")
}

/// compare's options for one traced request/response run of `driver` (`requests` after
/// `warmup`): no untraced run, bulk, burst or wire delay, one round, default tracer; each test
/// sets what it looks at.
pub fn one_traced_run(driver: Driver, requests: u64, warmup: u64) -> CompareOptions {
    CompareOptions {
        drivers: vec![driver],
        protos: vec![netpath::harness::Proto::Tcp],
        rr: RrLoad {
            requests,
            warmup,
            ..RrLoad::default()
        },
        untraced: false,
        tracer: TracerOptions::default(),
        tc_counters: false,
        parts: false,
        keep_timelines: 0,
        rounds: 1,
        bulk: None,
        burst: None,
        underlay: None,
        mode: netpath::sys::runmode::RunMode {
            wait: netpath::harness::WaitMode::Block,
            ..Default::default()
        },
    }
}

/// `program ARGS`, which must exit 0 (the command and its stderr in the failure); its stdout,
/// trimmed.
pub fn run_ok(program: &str, args: &[&str]) -> String {
    let out = output_ok(Command::new(program).args(args));
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// Runs `cmd` to its end; it must exit 0 (the command and its stderr in the failure).
pub fn output_ok(cmd: &mut Command) -> std::process::Output {
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "{cmd:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// `netpath ARGS`, which must fail with one line on stderr: that line.
pub fn one_line_error(args: &[&str]) -> String {
    let out = Command::new(NETPATH).args(args).output().unwrap();
    assert!(!out.status.success(), "{args:?} should fail");
    let err = String::from_utf8_lossy(&out.stderr).trim().to_string();
    assert_eq!(err.lines().count(), 1, "one line, got: {err}");
    err
}

/// `netpath ARGS` refused: it fails with one line on stderr and prints nothing on stdout.
/// Returns that line.
pub fn refused(args: &[&str]) -> String {
    let out = Command::new(NETPATH).args(args).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{args:?} was accepted");
    assert_eq!(err.trim().lines().count(), 1, "{args:?}: {err}");
    assert!(
        out.stdout.is_empty(),
        "{args:?}: printed {:?}",
        String::from_utf8_lossy(&out.stdout)
    );
    err.into_owned()
}

/// The `hop` of every element of the JSON array `v[key]` (a timeline's `points`, a report's
/// `hops`), in order; each must name one.
pub fn json_hops<'a>(v: &'a serde_json::Value, key: &str) -> Vec<&'a str> {
    let items = v[key]
        .as_array()
        .unwrap_or_else(|| panic!("no {key} array in {v}"));
    items
        .iter()
        .map(|e| e["hop"].as_str().unwrap_or_else(|| panic!("no hop in {e}")))
        .collect()
}

/// Crossings of `hop` in direction `dir` in a report's JSON `hops` (0 when it has no row).
pub fn json_crossings(r: &serde_json::Value, dir: &str, hop: &str) -> u64 {
    r["hops"]
        .as_array()
        .unwrap()
        .iter()
        .find(|h| h["dir"] == dir && h["hop"] == hop)
        .map_or(0, |h| h["crossings"].as_u64().unwrap())
}

/// Kills and reaps a child process when dropped: no child is left behind when an assertion
/// fails.
pub struct KillOnDrop(pub std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// This test binary again, running only its ignored test `test` with `env` set: the child and
/// what follows `marker` on the first stdout line that has it ("" when none came within
/// `wait`). Its stdout is drained for its whole life, so it never writes into a closed pipe.
pub fn spawn_test_child(
    test: &str,
    env: (&str, &str),
    stderr: Stdio,
    marker: &'static str,
    wait: Duration,
) -> (KillOnDrop, String) {
    let exe = std::env::current_exe().unwrap();
    let mut child = Command::new(exe)
        .args([
            "--exact",
            test,
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(env.0, env.1)
        .stdout(Stdio::piped())
        .stderr(stderr)
        .spawn()
        .unwrap();
    let out = child.stdout.take().unwrap();
    let child = KillOnDrop(child);
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        use std::io::BufRead;
        for line in std::io::BufReader::new(out).lines() {
            let Ok(line) = line else { break };
            // libtest prints "test NAME ... " without a newline before the output.
            if let Some((_, v)) = line.split_once(marker) {
                let _ = tx.send(v.trim().to_string());
            }
        }
    });
    (child, rx.recv_timeout(wait).unwrap_or_default())
}

/// `netpath ARGS`, which must succeed (its stderr in the failure), its stdout parsed as JSON.
pub fn run_json(args: &[&str]) -> serde_json::Value {
    let out = Command::new(NETPATH).args(args).output().unwrap();
    assert!(
        out.status.success(),
        "netpath {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

pub fn small_rr() -> RrConfig {
    RrConfig {
        load: RrLoad {
            requests: 200,
            warmup: 20,
            req_size: 1024,
            resp_size: 1024,
            timeout: Duration::from_secs(20),
            ..Default::default()
        },
        wait: netpath::harness::WaitMode::Block,
        ..Default::default()
    }
}

/// The lab's 200 request/response round trips ran, each one timed.
pub fn rr_200(lab: &NetPath) -> netpath::harness::RrResult {
    let r = netpath::harness::run_rr(lab, &small_rr(), &netpath::harness::NoPhases).unwrap();
    assert_eq!(r.count, 200);
    assert_eq!(r.hist.len(), 200);
    assert!(r.mean_ns > 0.0 && r.rps > 0.0);
    r
}

/// A lab's namespaces, sorted.
pub fn sorted_names(lab: &NetPath) -> Vec<String> {
    let mut v = lab.netns_names();
    v.sort();
    v
}

/// The namespaces a lab `id` with these roles has (`np<id>-<role>`), sorted.
pub fn want_names(id: &str, roles: &[&str]) -> Vec<String> {
    let mut v: Vec<String> = roles.iter().map(|r| format!("np{id}-{r}")).collect();
    v.sort();
    v
}

/// How every driver test starts: the root lock held, the root's links taken before the build
/// (for `tear_down_cleanly`), a lab of `driver` that shows the CLI's `name` and has a
/// namespace for each of `roles`. Returns (lock, root links, lab).
pub fn build_checked(
    driver: Driver,
    name: &str,
    roles: &[&str],
) -> (std::sync::MutexGuard<'static, ()>, HashSet<String>, NetPath) {
    let serial = need_root();
    let before = root_links();
    let lab = netpath::lab::build(driver).unwrap();
    assert_eq!(lab.driver.to_string(), name);
    assert_eq!(sorted_names(&lab), want_names(&lab.run_id, roles));
    (serial, before, lab)
}

/// A child netpath's exit status, once it exits: a hang detector, not a timing assertion
/// (past `limit` it is killed and the test fails).
pub fn exit_within(c: &mut std::process::Child, limit: Duration) -> std::process::ExitStatus {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(st) = c.try_wait().unwrap() {
            return st;
        }
        if Instant::now() > deadline {
            let _ = c.kill();
            panic!("netpath did not exit within {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// /run/netns entries of a run id.
pub fn netns_files(run_id: &str) -> Vec<String> {
    let Ok(rd) = std::fs::read_dir("/run/netns") else {
        return Vec::new();
    };
    rd.filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(&format!("np{run_id}")))
        .collect()
}

/// Names of links in the root namespace (read via netlink from a fresh thread, which
/// starts in the process's namespace).
pub fn root_links() -> HashSet<String> {
    link_names(None).into_iter().collect()
}

/// Names of the links in the namespace `netns` (the process's when `None`), read via netlink
/// from a fresh thread that enters it.
pub fn link_names(netns: Option<std::os::fd::OwnedFd>) -> Vec<String> {
    std::thread::spawn(|| {
        if let Some(fd) = netns {
            nix::sched::setns(fd, nix::sched::CloneFlags::CLONE_NEWNET).unwrap();
        }
        netpath::sys::nl::Nl::new()
            .unwrap()
            .links()
            .unwrap()
            .into_iter()
            .map(|l| l.name)
            .collect()
    })
    .join()
    .unwrap()
}

/// if_nametoindex run inside the namespace.
pub fn ifindex_in(ns: &Netns, name: &str) -> u32 {
    let name = name.to_string();
    ns.run(move || Ok(nix::net::if_::if_nametoindex(name.as_str()).unwrap_or(0)))
        .unwrap()
}

/// The lab left the root netns as it found it; after teardown none of its namespaces remain.
pub fn tear_down_cleanly(lab: NetPath, before: &HashSet<String>) {
    assert_eq!(
        &root_links(),
        before,
        "the lab must not touch the root netns"
    );
    let id = lab.run_id.clone();
    lab.teardown().unwrap();
    assert!(netns_files(&id).is_empty(), "{:?}", netns_files(&id));
    assert_eq!(&root_links(), before);
}

/// The log of a dockerd the tests start: in cargo's per-target temporary directory, not at a
/// predictable name in the world-writable /tmp (the tests run as root).
fn dockerd_log() -> PathBuf {
    PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("netpath-test-dockerd.log")
}

/// A daemon an earlier test binary started gets SIGTERM when that binary exits and may still
/// be shutting down; while it lives, its pid file makes a new dockerd refuse to start.
fn wait_for_exiting_dockerd() {
    let deadline = Instant::now() + Duration::from_secs(30);
    while let Some(pid) = std::fs::read_to_string("/var/run/docker.pid")
        .ok()
        .and_then(|s| s.trim().parse::<u32>().ok())
    {
        if !std::path::Path::new(&format!("/proc/{pid}")).exists() || Instant::now() > deadline {
            return;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// A bridge Docker lab on `engine` whose containers run this build's netpath (the agent
/// image reused when it is there).
pub fn bridge_lab(engine: &Engine) -> DockerLab {
    let o = DockerLabOptions {
        exe: Some(env!("CARGO_BIN_EXE_netpath").into()),
        reuse_image: true,
        ..Default::default()
    };
    DockerLab::build(engine, Driver::Bridge, &o).unwrap()
}

/// The names of a Docker lab's (client, server) containers.
pub fn container_names(dl: &DockerLab) -> (String, String) {
    let (client, server) = (dl.client.as_ref(), dl.server.as_ref());
    (client.unwrap().name.clone(), server.unwrap().name.clone())
}

/// A `bridge_lab` on the daemon (started if need be) and its containers' (client, server)
/// names: where the exporter tests start.
pub fn named_bridge_lab() -> (DockerLab, String, String) {
    let dl = bridge_lab(&ensure_daemon());
    let (client, server) = container_names(&dl);
    (dl, client, server)
}

/// `rounds` small request/response runs over `dl`'s path.
pub fn traffic(dl: &DockerLab, rounds: usize) {
    for _ in 0..rounds {
        netpath::harness::run_rr(&dl.path, &small_rr(), &netpath::harness::NoPhases).unwrap();
    }
}

/// Connect to the default engine; if nothing answers, start `dockerd` from a thread that
/// lives as long as the test process (its death signal stops the daemon when the tests
/// end) and wait up to 60 s.
pub fn ensure_daemon() -> Engine {
    static STARTED: OnceLock<Result<(), String>> = OnceLock::new();
    if let Ok(e) = Engine::connect() {
        return e;
    }
    let r = STARTED.get_or_init(|| {
        wait_for_exiting_dockerd();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            use std::os::unix::process::CommandExt;
            let log = std::fs::File::create(dockerd_log());
            let mut cmd = Command::new("dockerd");
            cmd.stdin(Stdio::null());
            if let Ok(l) = log {
                cmd.stdout(l.try_clone().unwrap()).stderr(l);
            }
            // SAFETY: prctl is async-signal-safe.
            unsafe {
                cmd.pre_exec(|| {
                    libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM);
                    Ok(())
                });
            }
            match cmd.spawn() {
                Ok(mut c) => {
                    let _ = tx.send(Ok(()));
                    let _ = c.wait();
                }
                Err(e) => {
                    let _ = tx.send(Err(format!("cannot start dockerd: {e}")));
                }
            }
        });
        rx.recv().map_err(|e| e.to_string())??;
        let deadline = Instant::now() + Duration::from_secs(60);
        while Instant::now() < deadline {
            if Engine::connect().is_ok() {
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(300));
        }
        Err(format!(
            "dockerd started but did not answer within 60 s (see {})",
            dockerd_log().display()
        ))
    });
    if let Err(e) = r {
        panic!("no Docker daemon and none could be started: {e}");
    }
    Engine::connect().unwrap_or_else(|e| panic!("{e:#}"))
}

/// Whether this kernel can build `driver`'s lab; if not, why (the line `compare` prints).
pub fn unavailable_here(driver: netpath::driver::Driver) -> Option<String> {
    match netpath::lab::build(driver) {
        Ok(lab) => {
            lab.teardown().unwrap();
            None
        }
        Err(e) => Some(netpath::driver::unavailable(&e).unwrap_or_else(|| panic!("{e:#}"))),
    }
}

/// Every device must exist in its namespace with the reported ifindex, inum, MTU.
pub fn check_devices(lab: &netpath::path::NetPath) {
    let nss = lab.namespaces();
    for d in &lab.devices {
        assert!(
            d.name.len() <= netpath::lab::IFNAME_MAX,
            "{} too long",
            d.name
        );
        let ns = nss
            .iter()
            .find(|n| n.name == d.netns)
            .unwrap_or_else(|| panic!("device {d:?} in a netns not of this lab"));
        assert_eq!(d.netns_inum, ns.inum, "{d:?}");
        // inum is the real namespace inode: compare with the thread's own view.
        let seen = ns.run(netpath::sys::netns::current_inum).unwrap();
        assert_eq!(seen, d.netns_inum, "{d:?}");
        assert_eq!(ifindex_in(ns, &d.name), d.ifindex, "{d:?}");
        assert!(d.mtu > 0, "{d:?}");
    }
}
