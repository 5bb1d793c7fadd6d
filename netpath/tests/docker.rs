//! Privileged integration tests against a real Docker engine (docker.io 20.10, API 1.41).
//! They build the agent image, real networks and containers, so they need root and
//! dockerd; a dockerd is started (in the background, stopped when the tests exit) if
//! none answers:
//!
//!     sudo -E cargo test -p netpath --test docker -- --test-threads=1
//!
//! Without root or without a dockerd that can be started they FAIL with a message saying
//! so (no silent skips). The agent image needs a netpath binary that routes
//! `netpath agent …`: `CARGO_BIN_EXE_netpath`, or `NETPATH_AGENT_EXE` to override.

use std::collections::BTreeSet;
use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use netpath::docker::{self, DockerLab, DockerLabOptions, Engine};
use netpath::driver::Driver;
use netpath::harness::{NoPhases, RrConfig, run_rr};
use netpath::lab;
use netpath::path::Device;
use netpath::sys::netns::Netns;
use netpath_common::DevKind;

mod common;
use common::usernet::{UserNet, docker as docker_cli, exchange_until};
use common::{ensure_daemon, root_links};
#[path = "docker/realtraffic.rs"]
mod realtraffic;

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
    RrConfig {
        timeout: Duration::from_secs(30),
        ..common::small_rr()
    }
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

#[test]
fn agent_image_builds_and_bridge_container_is_inspected() {
    let (_g, engine) = setup();
    let t0 = Instant::now();
    let tag = docker::image::ensure_agent_image_from(&engine, &agent_exe(), false).unwrap();
    eprintln!("image {tag} ready in {:?}", t0.elapsed());
    assert!(tag.starts_with("netpath-agent:"));
    // A second call reuses it.
    let t1 = Instant::now();
    docker::image::ensure_agent_image_from(&engine, &agent_exe(), false).unwrap();
    assert!(t1.elapsed() < Duration::from_secs(5));

    let o = DockerLabOptions {
        default_bridge: true,
        ..opts()
    };
    let dl = DockerLab::build(&engine, Driver::Bridge, &o).unwrap();
    let id = dl.path.run_id.clone();
    // The containers run `hold`.
    let cmd = docker_cli(&[
        "inspect",
        "-f",
        "{{json .Config.Cmd}} {{.State.Running}}",
        &server_name(&dl),
    ]);
    assert_eq!(cmd, "[\"hold\"] true");

    let rep = docker::inspect(&engine, &server_name(&dl)).unwrap();
    eprintln!("{}", rep.render());
    assert_eq!(rep.mtu, Some(1500));
    assert_eq!(rep.network_mode, "bridge");
    let eth0 = rep.interfaces.iter().find(|i| i.name == "eth0").unwrap();
    assert_eq!(eth0.kind, "veth");
    let peer = eth0.peer.as_deref().unwrap();
    assert!(peer.starts_with("host/veth"), "{peer}");
    assert_eq!(eth0.bridge.as_deref(), Some("docker0"));
    assert_eq!(eth0.network.as_deref(), Some("bridge"));
    assert!(
        rep.devices
            .iter()
            .any(|d| d.name == "docker0" && d.mtu == 1500)
    );
    assert!(
        serde_json::to_string(&rep)
            .unwrap()
            .contains("\"mtu\":1500")
    );
    // The CLI's JSON, header included, matches the committed schema.
    let v = common::run_json(&["inspect", &server_name(&dl), "--json"]);
    common::schema::validate("inspect", &v);
    assert_eq!(v["mtu"], 1500);
    dl.teardown().unwrap();
    assert_run_gone(&id);
}

#[test]
fn bridge_lab_runs_rr_and_cleans_up() {
    let (_g, engine) = setup();
    let br = rr_on(&engine, Driver::Bridge, &opts(), |dl, id| {
        let br = format!("np{id}br");
        assert!(
            has(&dl.path.devices, DevKind::Bridge, &br),
            "{:?}",
            dl.path.devices
        );
        assert!(has(&dl.path.devices, DevKind::BridgePort, "veth"));
        assert_eq!(
            dl.path
                .devices
                .iter()
                .filter(|d| d.kind == DevKind::Veth)
                .count(),
            2
        );
        assert!(root_links().contains(&br));
        br
    });
    assert!(!root_links().contains(&br));
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
    let out = Command::new(env!("CARGO_BIN_EXE_netpath"))
        .args(["compare", "--between", client, server, "-n", &n.to_string()])
        .args(extra)
        .args([
            "--warmup",
            "50",
            "--no-untraced",
            "--bulk-secs",
            "0",
            "--burst",
            "0",
        ])
        .arg("--json")
        .output()
        .unwrap();
    if out.status.success() {
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        Ok(v["drivers"].as_array().expect("drivers").clone())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).into_owned())
    }
}

#[test]
fn host_lab_runs_rr() {
    let (_g, engine) = setup();
    rr_on(&engine, Driver::Host, &opts(), |dl, id| {
        assert_eq!(dl.path.client_ns.inum, dl.path.server_ns.inum);
        assert_eq!(dl.path.server_bind.ip(), &Ipv4Addr::LOCALHOST);
        assert_eq!(dl.path.devices.len(), 1);
        assert_eq!(dl.path.devices[0].kind, DevKind::Loopback);
        // Two --network host containers: --between measures over the host's loopback.
        let (cli, srv) = (format!("np{id}-cli"), format!("np{id}-srv"));
        let r = compare_between(&cli, &srv, 200).unwrap();
        assert_eq!(r["driver"], format!("{cli}→{srv} (host via host)"), "{r}");
        let hops = common::json_hops(&r, "hops");
        assert!(
            hops.contains(&"loopback") && !hops.contains(&"veth"),
            "{hops:?}"
        );
    });
}

#[test]
fn none_lab_runs_rr() {
    let (_g, engine) = setup();
    rr_on(&engine, Driver::None, &opts(), |dl, id| {
        assert_eq!(dl.path.client_ns.inum, dl.path.server_ns.inum);
        // A --network none container shares no network with anyone: one clear line.
        let srv = format!("np{id}-srv");
        let err = compare_between(&srv, &srv, 10).unwrap_err();
        assert!(
            err.contains("share no Docker network") && err.trim().lines().count() == 1,
            "{err}"
        );
    });
}

#[test]
fn overlay_lab_runs_rr_and_inspect_reports_mtu_1450() {
    let (_g, engine) = setup();
    let (state_before, _) = engine.swarm_state().unwrap();
    rr_on(&engine, Driver::Overlay, &opts(), |dl, _| {
        assert!(
            has(&dl.path.devices, DevKind::Vxlan, "vxlan"),
            "{:?}",
            dl.path.devices
        );
        assert!(has(&dl.path.devices, DevKind::Bridge, "br0"));
        let rep = docker::inspect(&engine, &server_name(dl)).unwrap();
        eprintln!("{}", rep.render());
        assert_eq!(rep.mtu, Some(1450));
        let eth0 = rep.interfaces.iter().find(|i| i.name == "eth0").unwrap();
        assert_eq!(eth0.bridge.as_deref(), Some("br0"));
        assert!(!eth0.vxlans.is_empty());
        assert!(eth0.peer.as_deref().unwrap().starts_with("1-"), "{eth0:?}");
    });
    // A swarm netpath initialised is gone again; one that was there stays.
    let (state_after, _) = engine.swarm_state().unwrap();
    assert_eq!(state_before, state_after);
}

#[test]
fn macvlan_lab_runs_rr() {
    let (_g, engine) = setup();
    rr_on(&engine, Driver::Macvlan, &opts(), |dl, id| {
        assert_eq!(
            dl.path
                .devices
                .iter()
                .filter(|d| d.kind == DevKind::Macvlan)
                .count(),
            2,
            "{:?}",
            dl.path.devices
        );
        assert!(has(
            &dl.path.devices,
            DevKind::MacvlanParent,
            &format!("np{id}mp")
        ));
    });
}

#[test]
fn published_proxy_lab_goes_through_docker_proxy() {
    let (_g, engine) = setup();
    rr_on(&engine, Driver::PublishedProxy, &opts(), |dl, _| {
        let pid = dl.path.proxy_pid.expect("docker-proxy pid");
        let exe = std::fs::read_link(format!("/proc/{pid}/exe")).unwrap();
        assert!(exe.to_string_lossy().contains("docker-proxy"), "{exe:?}");
        let p = dl.path.published.unwrap();
        assert_eq!(p.ip(), &Ipv4Addr::LOCALHOST);
        let rep = docker::inspect(&engine, &server_name(dl)).unwrap();
        eprintln!("{}", rep.render());
        assert!(
            rep.proxies
                .iter()
                .any(|x| x.pid == pid && x.host_port == p.port())
        );
        assert!(rep.ports.iter().all(|m| m.host_ip == "127.0.0.1"));
    });
}

#[test]
fn published_nat_lab_uses_a_second_daemon_in_its_own_netns() {
    let (_g, engine) = setup();
    let before = docker_cli(&["info", "-f", "{{.ContainersRunning}}"]);
    let (id, sock) = rr_on(&engine, Driver::PublishedNat, &opts(), |dl, id| {
        assert!(dl.path.proxy_pid.is_none());
        assert_eq!(dl.path.client_ns.name, format!("np{id}-dkr"));
        let sock = dl.daemon_socket.clone().unwrap();
        assert!(sock.exists());
        // The second daemon's NAT rule is in its own namespace, not the host's.
        let e2 = Engine::connect_to(&format!("unix://{}", sock.display())).unwrap();
        assert!(e2.api_version.starts_with("1."));
        let host_nat = Command::new("iptables-save")
            .args(["-t", "nat"])
            .output()
            .unwrap();
        let p = dl.path.published.unwrap().port().to_string();
        assert!(
            !String::from_utf8_lossy(&host_nat.stdout).contains(&format!("--dport {p} ")),
            "published-nat rule leaked into the host namespace"
        );
        // The main daemon did not see any of it.
        assert_eq!(
            docker_cli(&["info", "-f", "{{.ContainersRunning}}"]),
            before
        );
        (id.to_string(), sock)
    });
    assert!(!sock.exists());
    assert!(!Path::new(&format!("/var/lib/netpath-docker-{id}")).exists());
}

#[test]
fn containers_started_with_the_docker_cli_are_resolved() {
    let (_g, engine) = setup();
    let tag = docker::image::ensure_agent_image_from(&engine, &agent_exe(), false).unwrap();
    let un = UserNet::create(218);
    let net = un.name.clone();
    let srv_ip = un.ip(10);
    let addr: SocketAddr = format!("{srv_ip}:11111").parse().unwrap();
    let srv = un.serve("srv", addr, &[], &tag);
    let cli = un.run("cli", None, &[], &tag, &["hold"]);

    let s = docker::resolve_container(&engine, &srv).unwrap();
    let c = docker::resolve_container(&engine, &cli).unwrap();
    assert_eq!(s.ip(), Some(srv_ip.parse().unwrap()));
    let bridge_of = |cn: &docker::ContainerNet| {
        cn.interfaces
            .iter()
            .find(|i| i.link.name == "eth0")
            .and_then(|i| i.peer.as_ref())
            .and_then(|p| p.bridge.as_ref())
            .map(|b| b.name.clone())
    };
    let br = bridge_of(&s).expect("server bridge");
    assert!(br.starts_with("br-"), "{br}");
    assert_eq!(bridge_of(&c).as_deref(), Some(br.as_str()));
    for cn in [&s, &c] {
        let devs = cn.devices();
        eprintln!("{}: {devs:?}", cn.name);
        let eth0 = devs
            .iter()
            .find(|d| d.name == "eth0" && d.kind == DevKind::Veth)
            .expect("eth0");
        assert_eq!(eth0.netns, cn.name);
        assert_eq!(eth0.netns_inum, cn.netns_inum);
        let peer = devs
            .iter()
            .find(|d| d.kind == DevKind::BridgePort)
            .expect("host veth");
        assert!(peer.name.starts_with("veth"));
        assert_eq!(peer.netns, "host");
        assert_eq!(
            std::fs::read_to_string(format!("/sys/class/net/{}/ifindex", peer.name))
                .unwrap()
                .trim(),
            peer.ifindex.to_string()
        );
        let iflink = cn
            .interfaces
            .iter()
            .find(|i| i.link.name == "eth0")
            .unwrap();
        assert_eq!(iflink.link.iflink, Some(peer.ifindex));
        assert!(
            devs.iter()
                .any(|d| d.kind == DevKind::Bridge && d.name == br)
        );
    }

    // The agent server in the foreign container answers a client in the other one.
    let ns = netns_of(&c);
    let n = ns
        .run(move || {
            let mut conn = TcpStream::connect_timeout(&addr, Duration::from_secs(5))?;
            let mut resp = [0u8; 32];
            for _ in 0..50 {
                conn.write_all(&[7u8; 64])?;
                conn.read_exact(&mut resp)?;
                assert_eq!(resp, [0x5a; 32]);
            }
            Ok(50)
        })
        .unwrap();
    assert_eq!(n, 50);

    // `netpath trace --container` on these two containers it did not start: timelines of the
    // agent traffic, from a container's eth0 across the host veth and Docker's bridge.
    let done = std::sync::atomic::AtomicBool::new(false);
    let out = std::thread::scope(|sc| {
        let traffic =
            sc.spawn(|| ns.run(|| Ok(exchange_until(addr, &done, Duration::from_millis(2))?)));
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_netpath"))
            .args([
                "trace",
                "--container",
                &cli,
                "--container",
                &srv,
                "--port",
                "11111",
                "-c",
                "20",
                "--duration",
                "30",
                "--json",
            ])
            .output()
            .unwrap();
        done.store(true, std::sync::atomic::Ordering::Relaxed);
        traffic.join().unwrap().unwrap();
        out
    });
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let timelines = v["timelines"].as_array().unwrap();
    assert_eq!(timelines.len(), 20, "{v}");
    let complete: Vec<&serde_json::Value> = timelines
        .iter()
        .filter(|t| {
            let p = t["points"].as_array().unwrap();
            p[0]["point"] == "dev_queue" && p[0]["device"].as_str().unwrap().starts_with("eth0@")
        })
        .collect();
    assert!(complete.len() >= 5, "{v}");
    for t in complete {
        let hops = common::json_hops(t, "points");
        assert!(
            hops.contains(&"veth") && hops.contains(&"bridge"),
            "{hops:?}"
        );
    }

    // `netpath compare --between`: netpath's harness between the two containers (client in
    // one, server in the other), traced on their path; nothing is created, nothing remains.
    let before_ns = lab::list_netpath_netns().unwrap();
    let (ctrs, nets) = (labelled("container", None), labelled("network", None));
    let n = 300u64;
    let r = &compare_between(&cli, &srv, n).unwrap();
    assert_eq!(
        r["driver"],
        format!("{cli}→{srv} (bridge via {net})"),
        "{r}"
    );
    assert_eq!(r["traced"]["count"], n, "{r}");
    let completed = r["lost"]["completed"].as_u64().unwrap();
    assert!(completed * 100 >= 2 * n * 99, "{}", r["lost"]);
    let crossings = |dir: &str, hop: &str| common::json_crossings(r, dir, hop);
    for dir in ["request", "response"] {
        // Container eth0 → host veth, then the bridge port → the other container's eth0.
        let done = r["one_way"][dir]["count"].as_u64().unwrap();
        assert!(crossings(dir, "veth") >= 2 * done, "{dir}: {r}");
        assert!(crossings(dir, "bridge") >= done, "{dir}: {r}");
        assert!(crossings(dir, "veth") <= 2 * n && crossings(dir, "bridge") <= n);
    }
    // UDP and ICMP echo between the same two containers, a row each: the datagram ends and
    // the ping socket in their namespaces, matched over the same veth, bridge, veth.
    let rows = compare_between_rows(&cli, &srv, n, &["--proto", "udp,icmp"]).unwrap();
    assert_eq!(rows.len(), 2, "{rows:?}");
    for (r, p) in rows.iter().zip(["udp", "icmp"]) {
        assert_eq!(r["proto"], p, "{r}");
        assert!(r["driver"].as_str().unwrap().ends_with(&format!(" {p}")));
        let l = &r["lost"];
        let completed = l["completed"].as_u64().unwrap();
        let counted: u64 = [
            "consumed_early",
            "stale",
            "reused",
            "dropped",
            "recv_unmatched",
        ]
        .iter()
        .map(|k| l[*k].as_u64().unwrap())
        .sum();
        assert!(
            completed * 100 >= 2 * n * 99 && completed + counted >= 2 * n,
            "{p}: {l}"
        );
        for dir in ["request", "response"] {
            let c = |hop: &str| common::json_crossings(r, dir, hop);
            let done = r["one_way"][dir]["count"].as_u64().unwrap();
            assert!(
                c("veth") >= 2 * done && c("bridge") >= done,
                "{p} {dir}: {r}"
            );
        }
    }
    assert_eq!(labelled("container", None), ctrs);
    assert_eq!(labelled("network", None), nets);
    assert_eq!(lab::list_netpath_netns().unwrap(), before_ns);
    // One clear line for a container that does not exist, and a non-zero exit.
    let err = compare_between(&cli, &un.container_name("nosuch"), 10).unwrap_err();
    assert!(
        err.contains("nosuch") && err.trim().lines().count() == 1,
        "{err}"
    );

    // cleanup_docker removes containers and networks nobody holds.
    let removed = docker::cleanup_docker(&engine).unwrap();
    eprintln!("cleanup: {removed:?}");
    assert!(removed.iter().any(|r| r.contains(&srv)), "{removed:?}");
    assert!(removed.iter().any(|r| r.contains(&net)), "{removed:?}");
    assert!(labelled("container", None).is_empty());
    assert!(labelled("network", None).is_empty());
}

fn netns_of(c: &docker::ContainerNet) -> Netns {
    Netns {
        name: c.name.clone(),
        path: c.netns_path.clone(),
        inum: c.netns_inum,
    }
}

#[test]
fn unknown_container_is_a_clear_error() {
    let (_g, engine) = setup();
    let e = docker::resolve_container(&engine, "np-no-such-container-xyz").unwrap_err();
    let s = format!("{e:#}");
    assert!(s.contains("unknown container"), "{s}");
}

/// The tracer runs unchanged on a real Docker bridge: every request and response is a
/// complete journey through veth → bridge → veth, as on the netns lab.
#[test]
fn traced_run_on_a_docker_bridge() {
    use netpath::measure::compare;
    let (_g, engine) = setup();
    const N: u64 = 300;
    let dl = DockerLab::build(&engine, Driver::Bridge, &opts()).unwrap();
    let mut o = common::one_traced_run(Driver::Bridge, N, 50);
    o.tracer.sample_every = 1;
    let mut tracer = common::load_tracer(&o.tracer);
    let r = compare::measure(&mut tracer, &dl.path, &o).unwrap();
    dl.teardown().unwrap();
    assert_eq!(r.traced.count, N);
    // Every journey completes, or the kernel counted why not (an skb merged or freed early).
    let l = &r.lost;
    assert_eq!(l["ringbuf_lost"] + l["skb_map_full"], 0, "{l:?}");
    let counted = l["consumed_early"] + l["stale"] + l["reused"] + l["dropped"];
    for dir in ["request", "response"] {
        let done = r.one_way[dir].count;
        assert!(
            done * 100 >= N * 99 && done + counted >= N,
            "{dir} journeys: {r:#?}"
        );
        let c: std::collections::BTreeMap<&str, u64> = r
            .hops
            .iter()
            .filter(|h| h.dir == dir)
            .map(|h| (h.hop, h.crossings))
            .collect();
        let (veth, bridge) = (c["veth"], c["bridge"]);
        assert!((2 * done..=2 * N).contains(&veth), "{dir}: {c:?}");
        assert!((done..=N).contains(&bridge), "{dir}: {c:?}");
    }
}

/// `--proto udp|icmp` on a real Docker bridge: the harness's datagram ends and the ping
/// socket in the containers' namespaces (Docker opens ping sockets there; netpath changes
/// nothing), each journey matched and crossing veth, bridge, veth in order; an echo request
/// ends where the server container's kernel makes the reply (no server thread).
#[test]
fn udp_and_icmp_journeys_on_a_docker_bridge() {
    use netpath::{harness::Proto, measure::compare};
    let (_g, engine) = setup();
    const N: u64 = 1000;
    let dl = DockerLab::build(&engine, Driver::Bridge, &opts()).unwrap();
    let id = dl.path.run_id.clone();
    let ping_range = || {
        dl.path
            .client_ns
            .run(|| netpath::sys::netns::read_sysctl("net.ipv4.ping_group_range"))
            .unwrap()
    };
    let range = ping_range();
    assert!(netpath::harness::icmp::ping_allows_root(&range), "{range}");
    let mut runs = Vec::new();
    for proto in [Proto::Udp, Proto::Icmp] {
        let mut o = common::one_traced_run(Driver::Bridge, N, 50);
        o.protos = vec![proto];
        o.tracer.sample_every = 1;
        o.tracer.detail = true;
        o.keep_timelines = usize::MAX;
        let mut tracer = common::load_tracer(&o.tracer);
        runs.push(compare::measure(&mut tracer, &dl.path, &o));
    }
    // Docker's own setting, used as it is.
    assert_eq!(ping_range(), range);
    dl.teardown().unwrap();
    assert_run_gone(&id);
    let order = "sender-stack veth backlog bridge veth backlog receiver-stack";
    for r in runs {
        let r = r.unwrap();
        let name = format!("docker:bridge {}", r.proto);
        common::dgram::assert_accounted(&r, N);
        common::dgram::assert_order(&r, &name, [order; 2], docker::AGENT_PORT);
        if r.proto == Proto::Icmp {
            let turn = r.turnaround.as_ref().expect("turnaround");
            assert_eq!(turn.count, r.one_way["request"].count);
            assert_eq!(turn.mean_us, 0.0, "{name}");
        }
    }
}

/// Docker's rules and nftables tables as text (counters and comments left out).
fn firewall() -> String {
    let save = |t: &str| {
        let out = Command::new("iptables-save")
            .args(["-t", t])
            .output()
            .unwrap();
        assert!(out.status.success(), "iptables-save -t {t}");
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter(|l| !l.starts_with('#') && !l.starts_with(':'))
            .collect::<Vec<_>>()
            .join("\n")
    };
    let tables = Command::new("nft")
        .args(["list", "tables"])
        .output()
        .unwrap();
    format!(
        "{}\n{}\n{}",
        save("filter"),
        save("nat"),
        String::from_utf8_lossy(&tables.stdout)
    )
}

/// The uplink of a Docker egress lab: `np<id>up` in the Docker host's namespace, its peer in
/// netpath's `np<id>-rmt`, both of kind `Uplink`; the server on the remote's own address.
fn check_docker_uplink(dl: &DockerLab) {
    let (p, id) = (&dl.path, &dl.path.run_id);
    let ends: Vec<(&str, &str)> = p
        .uplinks()
        .iter()
        .map(|d| (d.name.as_str(), d.netns.as_str()))
        .collect();
    let (up, rm, rmt) = (
        format!("np{id}up"),
        format!("np{id}rm"),
        format!("np{id}-rmt"),
    );
    assert_eq!(ends, [(up.as_str(), "host"), (rm.as_str(), rmt.as_str())]);
    assert!(root_links().contains(&up));
    assert_eq!(p.server_ns.name, rmt);
    assert!(Path::new(&format!("/run/netpath/docker-rmt-{id}")).exists());
    let ip = p.server_bind.ip().octets();
    assert_eq!(ip[..2], [10, 217], "{:?}", p.server_bind);
    assert_eq!(ip[3], 2);
    assert_eq!(p.node_ns.as_ref().map(|n| n.name.as_str()), Some("host"));
}

/// A traced run of `dl`'s path: every journey crossed `hops` in that order (tracepoints) and
/// the request's source was rewritten from the container's address to the uplink's.
fn traced_egress(dl: &DockerLab, hops: [&str; 2]) {
    use netpath::measure::compare;
    const N: u64 = 200;
    let mut o = common::one_traced_run(dl.path.driver, N, 50);
    o.tracer.sample_every = 1;
    o.tracer.detail = true;
    o.keep_timelines = usize::MAX;
    let mut tracer = common::load_tracer(&o.tracer);
    let r = compare::measure(&mut tracer, &dl.path, &o).unwrap();
    let l = &r.lost;
    assert_eq!(l["ringbuf_lost"] + l["skb_map_full"], 0, "{l:?}");
    let counted = l["consumed_early"] + l["stale"] + l["reused"] + l["dropped"];
    let uplink = dl.path.server_bind.ip().octets();
    let uplink = format!("10.217.{}.1:", uplink[2]);
    let client_ip = dl
        .client
        .as_ref()
        .and_then(|c| c.ip())
        .map(|ip| format!("{ip}:"));
    for (i, dir) in ["request", "response"].into_iter().enumerate() {
        let done = r.one_way[dir].count;
        assert!(
            done * 100 >= N * 99 && done + counted >= N,
            "{dir} journeys: {l:?}"
        );
        let mut n = 0;
        for t in r.timelines.iter().filter(|t| t.dir == dir) {
            // The data path's order; the receiving thread's wakeup parts (present when it
            // slept) are checked by the lab tests.
            let mut seen: Vec<&str> = t
                .points
                .iter()
                .skip(1)
                .map(|p| p.hop)
                .filter(|h| !["wakeup", "idle-exit", "runqueue", "recv-copy"].contains(h))
                .collect();
            seen.dedup();
            assert_eq!(seen.join(" "), hops[i], "{t:#?}");
            if let Some(c) = &client_ip {
                let x = t.translated.as_deref().unwrap_or_default();
                let (from, to) = x.split_once(" → ").unwrap_or_default();
                match dir {
                    "request" => assert!(from.starts_with(&format!("src {c}")), "{x}"),
                    _ => assert!(to.starts_with(c.as_str()), "{x}"),
                }
                let uplink_side = if dir == "request" { to } else { from };
                assert!(uplink_side.contains(&uplink), "{x}");
            }
            n += 1;
        }
        assert!(n * 100 >= N * 99, "{dir}: {n} timelines");
    }
}

#[test]
fn egress_lab_on_docker0_goes_through_dockers_masquerade() {
    let (_g, engine) = setup();
    let before = firewall();
    let o = DockerLabOptions {
        default_bridge: true,
        ..opts()
    };
    rr_on(&engine, Driver::Egress, &o, |dl, _| {
        check_docker_uplink(dl);
        assert!(has(&dl.path.devices, DevKind::Bridge, "docker0"));
        // netpath added no rule anywhere: Docker's own accept the path and masquerade it.
        assert_eq!(firewall(), before, "netpath changed the host's rules");
        traced_egress(
            dl,
            [
                "sender-stack veth backlog bridge forward uplink backlog receiver-stack recv-return",
                "sender-stack uplink backlog forward bridge veth backlog receiver-stack recv-return",
            ],
        );
    });
    assert_eq!(firewall(), before);
}

#[test]
fn egress_lab_on_a_user_defined_bridge() {
    let (_g, engine) = setup();
    rr_on(&engine, Driver::Egress, &opts(), |dl, id| {
        check_docker_uplink(dl);
        assert!(has(&dl.path.devices, DevKind::Bridge, &format!("np{id}br")));
    });
}

#[test]
fn host_egress_lab_reaches_the_remote_from_the_hosts_stack() {
    let (_g, engine) = setup();
    rr_on(&engine, Driver::HostEgress, &opts(), |dl, _| {
        check_docker_uplink(dl);
        assert_eq!(dl.path.client_ns.name, "host");
        assert!(
            dl.path
                .devices
                .iter()
                .all(|d| matches!(d.kind, DevKind::Loopback | DevKind::Uplink))
        );
        traced_egress(
            dl,
            ["sender-stack uplink backlog receiver-stack recv-return"; 2],
        );
    });
}

#[test]
fn gateway_lab_serves_on_docker0s_address() {
    let (_g, engine) = setup();
    let o = DockerLabOptions {
        default_bridge: true,
        ..opts()
    };
    rr_on(&engine, Driver::Gateway, &o, |dl, _| {
        let docker0 = std::thread::spawn(|| {
            netpath::sys::nl::Nl::new()
                .unwrap()
                .link("docker0")
                .unwrap()
                .expect("docker0")
                .addrs
        })
        .join()
        .unwrap();
        assert_eq!(
            docker0.first().map(|a| a.0),
            Some(*dl.path.server_bind.ip())
        );
        assert_eq!(dl.path.server_ns.name, "host");
        assert!(dl.path.uplinks().is_empty());
        assert!(has(&dl.path.devices, DevKind::Bridge, "docker0"));
    });
}

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

#[test]
fn cleanup_docker_removes_what_a_killed_run_left() {
    let (_g, engine) = setup();
    let (mut child, ids) = common::spawn_test_child(
        "child_docker_labs_process",
        (CHILD_ENV, "1"),
        Stdio::null(),
        "RUNIDS=",
        Duration::from_secs(120),
    );
    assert!(!ids.is_empty(), "child printed no run ids");
    let ids: Vec<String> = ids.split_whitespace().map(String::from).collect();
    assert_eq!(ids.len(), 3);
    // The egress run's uplink is in the host's namespace until cleanup removes it.
    assert!(root_links().contains(&format!("np{}up", ids[2])));
    // While the child lives, cleanup leaves its runs alone.
    let removed = docker::cleanup_docker(&engine).unwrap();
    assert!(
        removed
            .iter()
            .all(|r| ids.iter().all(|id| !r.contains(id.as_str()))),
        "{removed:?}"
    );
    assert!(!labelled("container", Some(&ids[0])).is_empty());
    let _ = child.0.kill();
    let _ = child.0.wait();
    // The second daemon outlives its parent (own process group) until cleanup stops it.
    let sock = format!("/run/netpath/dockerd-{}.sock", ids[1]);
    assert!(Path::new(&sock).exists());
    let removed = docker::cleanup_docker(&engine).unwrap();
    eprintln!("cleanup: {removed:?}");
    for id in &ids {
        assert_run_gone(id);
    }
    assert!(!Path::new(&sock).exists());
    assert!(!Path::new(&format!("/var/lib/netpath-docker-{}", ids[1])).exists());
    assert!(!Path::new(&format!("/run/netpath/dockerd-{}.json", ids[1])).exists());
}

/// Ctrl-C in the middle of `compare --docker`: the run's containers, networks, macvlan parent
/// and namespace are removed before netpath exits with 130.
#[test]
fn interrupted_compare_docker_removes_its_objects() {
    let (_g, _engine) = setup();
    let mut child = Command::new(env!("CARGO_BIN_EXE_netpath"))
        .args(["compare", "--docker", "-d", "macvlan", "-n", "1000000"])
        .args(["--no-untraced", "--bulk-secs", "0", "--burst", "0"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // The run id, once both of its containers run (the harness starts right after).
    let deadline = Instant::now() + Duration::from_secs(120);
    let id = loop {
        let names = docker_cli(&["ps", "--format", "{{.Names}}", "--filter", "label=netpath"]);
        let ids: Vec<&str> = names
            .lines()
            .filter_map(|n| n.strip_prefix("np")?.strip_suffix("-srv"))
            .filter(|id| names.contains(&format!("np{id}-cli")))
            .collect();
        if let [id] = ids.as_slice() {
            break id.to_string();
        }
        if Instant::now() > deadline || child.try_wait().unwrap().is_some() {
            let _ = child.kill();
            let out = child.wait_with_output().unwrap();
            panic!(
                "no macvlan containers came up: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    std::thread::sleep(Duration::from_secs(2));
    assert!(Path::new(&format!("/run/netpath/docker-mvp-{id}")).exists());
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(130), "{err}");
    assert!(err.contains(&format!("container np{id}-srv")), "{err}");
    assert_run_gone(&id);
}

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

/// What a new user tries (issue 12): a container on a user-defined network publishing
/// `-p 127.0.0.1:P:8080`, requests from the host to 127.0.0.1:P, and
/// `netpath trace --container web --port P`: the journeys are followed from the host's
/// loopback through docker-proxy (the proxy hop) to the container, and the output says
/// which port the container side uses.
#[test]
fn published_port_trace_follows_host_loopback_and_docker_proxy() {
    let (_g, engine) = setup();
    let tag = docker::image::ensure_agent_image_from(&engine, &agent_exe(), false).unwrap();
    let un = UserNet::create(212);
    let port = un.port;
    let publish = format!("127.0.0.1:{port}:8080");
    let bind = format!("{}:8080", un.ip(10)).parse().unwrap();
    let web = un.serve("web", bind, &["-p", &publish], &tag);
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let done = std::sync::atomic::AtomicBool::new(false);
    let out = std::thread::scope(|sc| {
        let traffic = sc.spawn(|| exchange_until(addr, &done, Duration::from_millis(2)));
        let out = Command::new(env!("CARGO_BIN_EXE_netpath"))
            .args(["trace", "--container", &web, "--port", &port.to_string()])
            .args(["-c", "20", "--duration", "30"])
            .output()
            .unwrap();
        done.store(true, std::sync::atomic::Ordering::Relaxed);
        let n = traffic.join().unwrap().unwrap();
        assert!(n > 0, "no request answered through the published port");
        out
    });
    drop(un);
    assert!(docker_cli(&["ps", "-aq", "--filter", &format!("name={web}")]).is_empty());
    let text = String::from_utf8_lossy(&out.stdout);
    // The counts and what did not attach first: a failure's excerpt keeps its head.
    let summary: Vec<&str> = text
        .lines()
        .filter(|l| l.contains(" timelines (backend ") || l.starts_with("not "))
        .collect();
    println!(
        "{}\n{}\n{text}",
        summary.join("\n"),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "trace failed: {}", summary.join("; "));
    let first = text.lines().next().unwrap_or_default();
    assert!(
        first.starts_with(&format!("127.0.0.1:{port} is published by {web}"))
            && first.contains("docker-proxy (pid ")
            && first.ends_with("container port 8080/tcp"),
        "{first}"
    );
    // Points: `   at  +since  point  device  kind  cpuN  hop`.
    let hops: Vec<&str> = text
        .lines()
        .filter(|l| l.trim_start().starts_with(|c: char| c.is_ascii_digit()))
        .filter_map(|l| l.split_whitespace().last())
        .collect();
    for want in ["loopback", "proxy", "veth"] {
        assert!(
            hops.contains(&want),
            "no {want} hop; {}",
            summary.join("; ")
        );
    }
    // The leg after the proxy reaches the container: its journeys cross the bridge.
    assert!(
        hops.contains(&"bridge"),
        "no bridge hop; {}",
        summary.join("; ")
    );
}

/// `trace --container web --port P` on a published port follows the journeys that came in
/// through P (host lo → docker-proxy → web), not another container's requests to web's own
/// port on the same network.
#[test]
fn published_port_trace_leaves_other_clients_of_the_container_port_out() {
    let (_g, engine) = setup();
    let tag = docker::image::ensure_agent_image_from(&engine, &agent_exe(), false).unwrap();
    let un = UserNet::create(211);
    let port = un.port;
    let cli_ip = un.ip(20);
    let publish = format!("127.0.0.1:{port}:8080");
    let direct: SocketAddr = format!("{}:8080", un.ip(10)).parse().unwrap();
    let web = un.serve("web", direct, &["-p", &publish], &tag);
    let cli = un.run("cli", Some(&cli_ip), &[], &tag, &["hold"]);
    let pid = docker_cli(&["inspect", "-f", "{{.State.Pid}}", &cli]);
    let cli_ns =
        netpath::sys::netns::Netns::at(&cli, Path::new(&format!("/proc/{}/ns/net", pid.trim())))
            .unwrap();
    let done = std::sync::atomic::AtomicBool::new(false);
    let published: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let (out, n_pub, n_direct) = std::thread::scope(|sc| {
        let via_port = sc.spawn(|| exchange_until(published, &done, Duration::from_millis(4)));
        // The other client, inside its own container, five times as busy.
        let other = sc.spawn(|| {
            cli_ns
                .run(|| Ok(exchange_until(direct, &done, Duration::from_millis(1))?))
                .unwrap()
        });
        let out = Command::new(env!("CARGO_BIN_EXE_netpath"))
            .args(["trace", "--container", &web, "--port", &port.to_string()])
            .args(["-c", "20", "--duration", "30", "--format", "json"])
            .output()
            .unwrap();
        done.store(true, std::sync::atomic::Ordering::Relaxed);
        let a = via_port.join().unwrap().unwrap();
        let b = other.join().unwrap();
        (out, a, b)
    });
    drop(un);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "trace failed: {stderr}");
    assert!(
        n_pub > 0 && n_direct > n_pub,
        "published {n_pub}, direct {n_direct}"
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let timelines = v["timelines"].as_array().unwrap();
    let tuples: Vec<&str> = timelines
        .iter()
        .map(|t| t["tuple"].as_str().unwrap_or(""))
        .collect();
    println!("published {n_pub}, direct {n_direct}; tuples: {tuples:?}");
    assert!(!timelines.is_empty(), "no timeline; {stderr}");
    for t in &tuples {
        assert!(
            !t.contains(&cli_ip),
            "a journey of the other client was followed: {t}"
        );
    }
    // What was followed came through the published port: its loopback leg or the proxy's.
    assert!(
        tuples
            .iter()
            .all(|t| t.contains(&format!(":{port}")) || t.contains(":8080")),
        "{tuples:?}"
    );
    let hops: Vec<&str> = timelines
        .iter()
        .flat_map(|t| t["points"].as_array().unwrap())
        .filter_map(|p| p["hop"].as_str())
        .collect();
    assert!(hops.contains(&"proxy"), "no proxy hop in {hops:?}");
}
