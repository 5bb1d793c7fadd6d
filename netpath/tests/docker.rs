//! Privileged integration tests against a real Docker engine (docker.io 20.10, API 1.41), as
//! root with dockerd (started in the background if none answers, stopped when the tests exit):
//! `sudo -E cargo test -p netpath --test docker -- --test-threads=1`. Without either they FAIL,
//! saying so. The agent image needs a netpath that routes `netpath agent …`
//! (`CARGO_BIN_EXE_netpath`, or `NETPATH_AGENT_EXE`). Here: what the topics in `docker/` share
//! (setup, build-run-teardown, the leftover checks), the killed-run child and the last test.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use netpath::docker::{self, DockerLab, DockerLabOptions, Engine};
use netpath::driver::Driver;
use netpath::harness::{NoPhases, RrConfig, run_rr};
use netpath::lab;
use netpath::path::Device;
use netpath_common::DevKind;

mod common;
use common::usernet::docker as docker_cli;
use common::{ensure_daemon, root_links};

// The tests, by topic. A crate root's `mod x;` looks for tests/x.rs: hence the paths.
#[path = "docker/bridge.rs"]
mod bridge;
#[path = "docker/cleanup.rs"]
mod cleanup;
#[path = "docker/drivers.rs"]
mod drivers;
#[path = "docker/egress.rs"]
mod egress;
#[path = "docker/published.rs"]
mod published;
#[path = "docker/realtraffic.rs"]
mod realtraffic;
#[path = "docker/resolve.rs"]
mod resolve;

/// Tests share the engine, /run/netns and the swarm: one at a time even without
/// `--test-threads=1`.
static SERIAL: Mutex<()> = Mutex::new(());

fn agent_exe() -> PathBuf {
    std::env::var_os("NETPATH_AGENT_EXE")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_netpath")))
}

/// Root, a daemon (started here if needed), and a netpath binary that has the agent.
fn setup() -> (std::sync::MutexGuard<'static, ()>, Engine) {
    let g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    assert!(
        nix::unistd::geteuid().is_root(),
        "this test needs root (it runs Docker containers and enters their namespaces): run `sudo -E cargo test -p netpath --test docker -- --test-threads=1`"
    );
    let engine = ensure_daemon();
    static AGENT_OK: OnceLock<Result<(), String>> = OnceLock::new();
    let ok = AGENT_OK.get_or_init(|| {
        let exe = agent_exe();
        let out = Command::new(&exe)
            .args(["agent", "help"])
            .output()
            .map_err(|e| format!("cannot run {}: {e}", exe.display()))?;
        if out.status.success() {
            Ok(())
        } else {
            Err(format!(
                "{} does not route `netpath agent …` to netpath::docker::agent_main ({}); wire the hidden `agent` subcommand or set NETPATH_AGENT_EXE",
                exe.display(),
                String::from_utf8_lossy(&out.stderr).trim()
            ))
        }
    });
    if let Err(e) = ok {
        panic!("{e}");
    }
    (g, engine)
}

fn opts() -> DockerLabOptions {
    DockerLabOptions {
        exe: Some(agent_exe()),
        reuse_image: true,
        ..Default::default()
    }
}

/// common's, with 30 s for an exchange (as since the first Docker tests) rather than 20.
fn small_rr() -> RrConfig {
    let mut rr = common::small_rr();
    rr.load.timeout = Duration::from_secs(30);
    rr
}

/// Names of netpath-labelled containers and networks of run `id` (or of any run).
fn labelled(kind: &str, run: Option<&str>) -> Vec<String> {
    let filter = match run {
        Some(id) => format!("label=netpath.run={id}"),
        None => "label=netpath".to_string(),
    };
    let mut args = vec![kind, "ls", "-q", "--filter", filter.as_str()];
    if kind == "container" {
        args.push("-a");
    }
    docker_cli(&args)
        .lines()
        .filter(|l| !l.is_empty())
        .map(String::from)
        .collect()
}

fn assert_run_gone(id: &str) {
    assert!(
        labelled("container", Some(id)).is_empty(),
        "containers of run {id} left"
    );
    assert!(
        labelled("network", Some(id)).is_empty(),
        "networks of run {id} left"
    );
    let nss: Vec<String> = lab::list_netpath_netns()
        .unwrap()
        .into_iter()
        .filter(|n| n.starts_with(&format!("np{id}")))
        .collect();
    assert!(nss.is_empty(), "namespaces of run {id} left: {nss:?}");
    let links: Vec<String> = root_links()
        .into_iter()
        .filter(|l| l.starts_with(&format!("np{id}")))
        .collect();
    assert!(links.is_empty(), "links of run {id} left: {links:?}");
    assert!(
        !Path::new(&format!("/run/netpath/docker-run-{id}.lock")).exists(),
        "lock of run {id} left"
    );
    for role in ["mvp", "rmt"] {
        assert!(
            !Path::new(&format!("/run/netpath/docker-{role}-{id}")).exists(),
            "{role} marker of run {id} left"
        );
    }
}

fn server_name(dl: &DockerLab) -> String {
    dl.server.as_ref().expect("a server container").name.clone()
}

fn has(devs: &[Device], kind: DevKind, name_prefix: &str) -> bool {
    devs.iter()
        .any(|d| d.kind == kind && d.name.starts_with(name_prefix))
}

/// The kinds on Docker's path of `driver` are the kinds on the lab's path of that driver:
/// one function assigns them from the real links of both. (The lab's overlay also lists the
/// underlay between its two nodes; a single-node swarm has none.)
fn assert_kinds_agree_with_the_lab(driver: Driver, docker: &[Device]) {
    let lab = lab::build(driver).unwrap();
    let kinds = |ds: &[Device]| -> BTreeSet<DevKind> {
        ds.iter()
            .map(|d| d.kind)
            .filter(|k| *k != DevKind::Underlay)
            .collect()
    };
    assert_eq!(
        kinds(docker),
        kinds(&lab.devices),
        "{driver}: Docker {docker:?} vs lab {:?}",
        lab.devices
    );
    assert!(kinds(docker).iter().all(|k| *k != DevKind::Unknown));
    lab.teardown().unwrap();
}

/// Build, run 200 requests through the harness, hand the lab and its run id to `check`, tear
/// down, check nothing is left; returns what `check` did.
fn rr_on<T>(
    engine: &Engine,
    driver: Driver,
    o: &DockerLabOptions,
    check: impl FnOnce(&DockerLab, &str) -> T,
) -> T {
    let dl = built_and_run(engine, driver, o);
    let id = dl.path.run_id.clone();
    let t = check(&dl, &id);
    dl.teardown().unwrap();
    assert_run_gone(&id);
    t
}

/// The lab built, 200 requests run through the harness, its devices where it says.
fn built_and_run(engine: &Engine, driver: Driver, o: &DockerLabOptions) -> DockerLab {
    let t0 = Instant::now();
    let dl = DockerLab::build(engine, driver, o)
        .unwrap_or_else(|e| panic!("building the Docker {driver} lab: {e:#}"));
    eprintln!("{driver}: built in {:?}: {dl:?}", t0.elapsed());
    let lab = &dl.path;
    let r = run_rr(lab, &small_rr(), &NoPhases)
        .unwrap_or_else(|e| panic!("request/response on the Docker {driver} lab: {e:#}"));
    assert_eq!(r.count, 200, "{driver}");
    assert_eq!(r.hist.len(), 200, "{driver}");
    eprintln!("{driver}: p50 {} us", r.percentile_ns(50.0) as f64 / 1000.0);
    // Every device exists where the lab says, with its ifindex.
    for d in &lab.devices {
        let ns = lab
            .namespaces()
            .into_iter()
            .find(|n| n.name == d.netns)
            .unwrap_or_else(|| panic!("no namespace {} for {}", d.netns, d.name));
        assert_eq!(ns.inum, d.netns_inum, "{d:?}");
        let name = d.name.clone();
        let idx = ns
            .run(move || Ok(nix::net::if_::if_nametoindex(name.as_str()).unwrap_or(0)))
            .unwrap();
        assert_eq!(idx, d.ifindex, "{d:?}");
    }
    assert_kinds_agree_with_the_lab(driver, &lab.devices);
    dl
}

/// `netpath compare --between CLIENT SERVER` (RR only, untraced run skipped): the JSON
/// report, or the one-line error.
fn compare_between(client: &str, server: &str, n: u64) -> Result<serde_json::Value, String> {
    compare_between_rows(client, server, n, &[]).map(|rows| rows[0].clone())
}

/// [`compare_between`] with `extra` arguments: every row.
fn compare_between_rows(
    client: &str,
    server: &str,
    n: u64,
    extra: &[&str],
) -> Result<Vec<serde_json::Value>, String> {
    let out = common::compare_between(client, server, n)
        .args(extra)
        .output()
        .unwrap();
    if out.status.success() {
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        Ok(v["drivers"].as_array().expect("drivers").clone())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).into_owned())
    }
}

// The child stays in this root file: the killed-run test (docker/cleanup.rs) starts this
// binary with `--exact child_docker_labs_process`, which must be the test's full path.
const CHILD_ENV: &str = "NETPATH_DOCKER_TEST_CHILD";

/// Child side (ignored in normal runs): builds a macvlan, a published-nat and an egress lab,
/// prints their run ids, then waits to be killed (nothing is torn down).
#[test]
#[ignore = "helper run as a child process by the killed-run test"]
fn child_docker_labs_process() {
    if std::env::var(CHILD_ENV).is_err() {
        return;
    }
    let engine = Engine::connect().unwrap();
    let a = DockerLab::build(&engine, Driver::Macvlan, &opts()).unwrap();
    let b = DockerLab::build(&engine, Driver::PublishedNat, &opts()).unwrap();
    let c = DockerLab::build(&engine, Driver::Egress, &opts()).unwrap();
    println!(
        "RUNIDS={} {} {}",
        a.path.run_id, b.path.run_id, c.path.run_id
    );
    std::mem::forget(a);
    std::mem::forget(b);
    std::mem::forget(c);
    std::thread::sleep(Duration::from_secs(120));
    panic!("child was not killed");
}

// Runs last with --test-threads=1, which orders tests by their full path: `zz_…` here, at the
// root, sorts after every `<module>::…` test (keep any new module's name below "zz").
#[test]
fn zz_cleanup_docker_leaves_nothing() {
    let (_g, engine) = setup();
    docker::cleanup_docker(&engine).unwrap();
    assert!(labelled("container", None).is_empty());
    assert!(labelled("network", None).is_empty());
    // Images built by `netpath image` carry `netpath.keep`: cleanup leaves them on purpose.
    let kept = docker_cli(&["image", "ls", "-q", "--filter", "label=netpath.keep"]);
    let imgs = docker_cli(&["image", "ls", "-q", "--filter", "label=netpath"]);
    let left: Vec<&str> = imgs.lines().filter(|i| !kept.contains(i)).collect();
    assert!(left.is_empty(), "images left: {left:?}");
    assert!(docker::image::agent_tag().starts_with("netpath-agent:"));
}
