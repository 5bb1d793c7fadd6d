//! `netpath serve` on real Docker: it follows two running containers, exposes per-hop
//! histograms that `promtool check metrics` accepts, a real Prometheus (Debian's, started here
//! on loopback) scrapes it and answers a hop quantile query, and a container's series go when
//! it stops; it keeps serving across a restart of a daemon of the test's own. Needs root,
//! Docker (started if none answers), promtool and prometheus (`cargo xtask setup --tests`).
//! Host only.
mod common;
#[path = "common/scrape.rs"]
mod scrape;

use std::io::Write as _;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use netpath::docker::DockerLab;
use scrape::{Prometheus, Reaped, free_port, gauge, get, wait_for};

/// Whether `s` holds an IPv4 address (a run of digits and dots that parses as one).
fn has_ipv4(s: &str) -> bool {
    s.split(|c: char| !c.is_ascii_digit() && c != '.')
        .any(|w| w.parse::<std::net::Ipv4Addr>().is_ok())
}

#[test]
fn an_address_is_found_in_a_label_set_and_a_value_is_not_one() {
    assert!(has_ipv4("{peer=\"10.0.3.2\"}"));
    assert!(!has_ipv4("{le=\"1.28e-7\",hop=\"veth\"}"));
}

/// Traffic on `dl` until Prometheus answers a hop quantile query of the bridge driver with
/// numbers, for the veth and bridge hops at least.
fn assert_hop_quantile(prom: &Prometheus, dl: &DockerLab) {
    let q = "histogram_quantile(0.5, sum by (le, hop) (rate(netpath_hop_latency_seconds_bucket{driver=\"bridge\"}[20s])))";
    let mut answer = Vec::new();
    wait_for("a hop quantile from Prometheus", 90, || {
        common::traffic(dl, 1);
        answer = prom.query(q);
        answer.iter().any(|s| s["value"][1] != "NaN")
    });
    eprintln!("prometheus: {q} → {answer:?}");
    let hops: Vec<&str> = answer
        .iter()
        .filter_map(|s| s["metric"]["hop"].as_str())
        .collect();
    assert!(
        hops.contains(&"veth") && hops.contains(&"bridge"),
        "{answer:?}"
    );
}

#[test]
fn serve_exports_hop_histograms_that_prometheus_scrapes() {
    let _g = common::need_root();
    let (dl, client, server) = common::named_bridge_lab();
    let (serve, port) = scrape::serve_following(
        &[&client, &server],
        &["--sample-every", "1", "--prog-stats"],
        &[],
    );
    common::traffic(&dl, 3);
    let metrics = || get(port, "/metrics").unwrap().1;
    wait_for("hop histograms of the server container", 20, || {
        metrics().contains(&format!("container=\"{server}\""))
    });
    let m = metrics();
    for hop in ["veth", "bridge", "backlog"] {
        assert!(
            m.lines()
                .any(|l| l.starts_with("netpath_hop_latency_seconds_bucket{")
                    && l.contains(&format!("hop=\"{hop}\""))
                    && l.contains("driver=\"bridge\"")),
            "no {hop} histogram on the bridge driver:\n{m}"
        );
    }
    // Both are followed: each journey is its sender's, out to another container.
    for c in [&client, &server] {
        assert!(
            m.lines()
                .any(|l| l.starts_with("netpath_hop_latency_seconds_count{")
                    && l.contains("direction=\"out\"")
                    && l.contains("peer=\"container\"")
                    && l.contains(&format!("container=\"{c}\""))),
            "no journey out of {c} to a container:\n{m}"
        );
    }
    for lost in ["ringbuf_lost", "skb_map_full", "probe_misses", "dropped"] {
        assert!(
            m.contains(&format!("netpath_lost_events_total{{name=\"{lost}\"}}")),
            "{m}"
        );
    }
    assert!(m.contains("netpath_bpf_program_runs_total{program="), "{m}");
    assert!(m.contains("netpath_watched_containers 2"), "{m}");
    // Bounded labels: no address or port in any label set (values such as `310.0` may be).
    let labels = m
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| Some(&l[l.find('{')?..=l.rfind('}')?]));
    for set in labels {
        assert!(!set.contains("port=") && !has_ipv4(set), "{set}");
    }

    // promtool accepts the live output.
    let mut p = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("promtool (Debian's prometheus package; `cargo xtask setup --tests`)");
    p.stdin.take().unwrap().write_all(m.as_bytes()).unwrap();
    let out = p.wait_with_output().unwrap();
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    eprintln!("promtool check metrics: {}", said.trim());
    assert!(out.status.success(), "promtool check metrics: {said}");

    // A real Prometheus scrapes it, and a hop quantile query answers.
    let prom = Prometheus::start(port);
    assert_hop_quantile(&prom, &dl);
    // The containers stop: their series go at the next rescan.
    dl.teardown().unwrap();
    wait_for("the stopped containers' series to go", 20, || {
        let m = metrics();
        !m.contains(&format!("container=\"{server}\""))
            && !m.contains(&format!("container=\"{client}\""))
            && m.contains("netpath_watched_containers 0")
    });
    drop(serve);
}

fn docker(args: &[&str]) -> (bool, String) {
    docker_at(None, args)
}

/// The docker CLI against the default daemon or the one at `host`: (succeeded, its output).
fn docker_at(host: Option<&str>, args: &[&str]) -> (bool, String) {
    let mut c = Command::new("docker");
    if let Some(h) = host {
        c.args(["--host", h]);
    }
    let out = c.args(args).output().expect("docker CLI");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

/// The stack this test deployed and the single-node swarm it made (if it made one): removed
/// and left on drop, pass or fail.
struct Stack {
    name: String,
    made_swarm: bool,
    gwbridge_existed: bool,
}

impl Drop for Stack {
    fn drop(&mut self) {
        let _ = docker(&["stack", "rm", &self.name]);
        let filter = format!("label=com.docker.swarm.service.name={}_netpath", self.name);
        for _ in 0..60 {
            if docker(&["ps", "-aq", "--filter", &filter])
                .1
                .trim()
                .is_empty()
            {
                break;
            }
            std::thread::sleep(Duration::from_millis(500));
        }
        if self.made_swarm {
            let _ = docker(&["swarm", "leave", "--force"]);
            if !self.gwbridge_existed {
                let _ = docker(&["network", "rm", "docker_gwbridge"]);
            }
        }
    }
}

/// deploy/swarm/netpath-stack.yml as committed (only its port changed) on a single-node swarm
/// on 127.0.0.1: the exporter runs as a global service without the host's PID namespace,
/// follows containers started after it through the host's /proc, and a real Prometheus
/// scrapes it.
#[test]
fn swarm_stack_follows_containers_and_prometheus_scrapes_it() {
    let _g = common::need_root();
    let engine = common::ensure_daemon();
    let (ok, tag) = docker(&[
        "info",
        "--format",
        "{{.Swarm.LocalNodeState}} {{.Swarm.ControlAvailable}}",
    ]);
    assert!(ok, "docker info: {tag}");
    let state = tag.trim().to_string();
    assert!(
        state.starts_with("inactive") || state == "active true",
        "this engine's swarm state is {state:?}: a worker or locked swarm cannot take the stack"
    );
    let made_swarm = state.starts_with("inactive");
    let gwbridge_existed = docker(&["network", "inspect", "docker_gwbridge"]).0;
    if made_swarm {
        let (ok, out) = docker(&[
            "swarm",
            "init",
            "--advertise-addr",
            "127.0.0.1",
            "--listen-addr",
            "127.0.0.1:2377",
        ]);
        assert!(ok, "docker swarm init: {out}");
    }
    let stack = Stack {
        name: format!("npsw{}", std::process::id()),
        made_swarm,
        gwbridge_existed,
    };
    // The image the stack names, built from this binary.
    let img = Command::new(env!("CARGO_BIN_EXE_netpath"))
        .arg("image")
        .output()
        .unwrap();
    assert!(img.status.success(), "netpath image: {img:?}");
    let port = free_port();
    let file = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../deploy/swarm/netpath-stack.yml"
    );
    let yml = std::fs::read_to_string(file).unwrap();
    assert!(
        yml.contains("\"node:9433\"") && !yml.lines().any(|l| l.starts_with("version:")),
        "{file} no longer listens on the node's address at 9433, or has a version key"
    );
    let dir = std::env::temp_dir().join(format!("np-swarm-{port}"));
    std::fs::create_dir_all(&dir).unwrap();
    let deployed = dir.join("stack.yml");
    std::fs::write(
        &deployed,
        yml.replace("node:9433", &format!("127.0.0.1:{port}")),
    )
    .unwrap();
    let (ok, out) = docker(&[
        "stack",
        "deploy",
        "-c",
        deployed.to_str().unwrap(),
        &stack.name,
    ]);
    assert!(ok, "docker stack deploy: {out}");
    wait_for("the swarm service's /ready", 120, || {
        get(port, "/ready").is_some_and(|(st, _)| st.contains(" 200 "))
    });

    let dl = common::bridge_lab(&engine);
    let (_, server) = common::container_names(&dl);
    let metrics = || get(port, "/metrics").map(|r| r.1).unwrap_or_default();
    wait_for(
        "the service to follow the lab's server container",
        30,
        || {
            common::traffic(&dl, 1);
            metrics().contains(&format!("container=\"{server}\""))
        },
    );
    let prom = Prometheus::start(port);
    assert_hop_quantile(&prom, &dl);
    let watched = |m: &str| gauge(m, "netpath_watched_containers").unwrap_or(0);
    let before = watched(&metrics());
    assert!(before >= 2, "{}", metrics());
    dl.teardown().unwrap();
    wait_for("the lab containers' series to go", 30, || {
        let m = metrics();
        !m.contains(&format!("container=\"{server}\"")) && watched(&m) == before - 2
    });
    drop(stack);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A Docker daemon of this test's own (socket, exec root and data root of its own, no default
/// bridge, no iptables, containerd namespaces of its own) in a network namespace of its own
/// (`np<pid>-rsd`), so the test can stop and restart a daemon without touching the one other
/// tests or the user run: dockerd with `--bridge=none` deletes any `docker0` in its namespace
/// (moby's removeDefaultBridgeInterface), which in the host's would be the system daemon's
/// bridge. Stopped, its namespace and state removed on drop.
struct OwnDockerd {
    run_dir: std::path::PathBuf,
    data_root: std::path::PathBuf,
    /// Held open for the daemon's `setns`.
    ns_file: std::fs::File,
    child: Option<Child>,
}

impl OwnDockerd {
    fn new(tag: &str) -> OwnDockerd {
        let ns = format!("{tag}-rsd");
        let out = Command::new("ip")
            .args(["netns", "add", &ns])
            .output()
            .unwrap();
        assert!(out.status.success(), "ip netns add {ns}: {out:?}");
        let run_dir = std::path::PathBuf::from(format!("/run/{tag}"));
        let data_root = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join(tag);
        std::fs::create_dir_all(&run_dir).unwrap();
        std::fs::create_dir_all(&data_root).unwrap();
        let ns_file = std::fs::File::open(format!("/run/netns/{ns}")).unwrap();
        OwnDockerd {
            run_dir,
            data_root,
            ns_file,
            child: None,
        }
    }

    fn netns(&self) -> String {
        format!(
            "{}-rsd",
            self.run_dir.file_name().unwrap().to_string_lossy()
        )
    }

    fn host(&self) -> String {
        format!("unix://{}/docker.sock", self.run_dir.display())
    }

    /// Starts the daemon (again) and waits until it answers.
    fn start(&mut self) {
        let log = std::fs::File::create(self.data_root.with_extension("log")).unwrap();
        let ns = self
            .run_dir
            .file_name()
            .unwrap()
            .to_string_lossy()
            .to_string();
        let mut cmd = Command::new("dockerd");
        // Its network namespace only (`ip netns exec` would also hide the cgroup mounts
        // under a fresh /sys, which dockerd refuses to start without).
        netpath::sys::netns::spawn_in(&mut cmd, std::os::fd::AsRawFd::as_raw_fd(&self.ns_file));
        let child = cmd
            .args(["--host", &self.host()])
            .arg(format!("--exec-root={}/exec", self.run_dir.display()))
            .arg(format!("--pidfile={}/dockerd.pid", self.run_dir.display()))
            .arg(format!("--data-root={}", self.data_root.display()))
            .args(["--bridge=none", "--iptables=false", "--ip-masq=false"])
            .arg(format!("--containerd-namespace={ns}"))
            .arg(format!("--containerd-plugins-namespace={ns}-plugins"))
            .args(["--shutdown-timeout", "1"])
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("dockerd (Debian's docker.io; `cargo xtask setup`)");
        self.child = Some(child);
        wait_for("this test's own dockerd to answer", 60, || {
            self.docker(&["version"]).0
        });
    }

    /// Stops the daemon the way an init system does (SIGTERM) and waits for it to exit.
    fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            // SAFETY: kill(2) on the pid of a child this test started and has not reaped.
            unsafe { libc::kill(c.id() as i32, libc::SIGTERM) };
            let _ = c.wait();
        }
    }

    fn docker(&self, args: &[&str]) -> (bool, String) {
        docker_at(Some(&self.host()), args)
    }
}

impl Drop for OwnDockerd {
    fn drop(&mut self) {
        if self.child.is_some() {
            let _ = self.docker(&["rm", "-f", "nprs-a", "nprs-b"]);
            let _ = self.docker(&["network", "rm", "nprs-net"]);
        }
        self.stop();
        let _ = Command::new("ip")
            .args(["netns", "del", &self.netns()])
            .status();
        let _ = std::fs::remove_dir_all(&self.run_dir);
        let _ = std::fs::remove_dir_all(&self.data_root);
        let _ = std::fs::remove_file(self.data_root.with_extension("log"));
    }
}

/// `netpath serve --all` keeps serving while its Docker daemon stops and comes back, and
/// follows what runs after the restart: a container followed before the stop, nothing while
/// the daemon is down (metrics still answer), a new container after it.
#[test]
fn serve_survives_a_docker_restart() {
    let _g = common::need_root();
    // The machine's own Docker bridge is not this test's to touch.
    let docker0 = || std::path::Path::new("/sys/class/net/docker0").exists();
    let had_docker0 = docker0();
    let mut d = OwnDockerd::new(&format!("np{}", std::process::id()));
    d.start();
    let engine = netpath::docker::Engine::connect_to(&d.host()).unwrap();
    let exe = std::path::Path::new(env!("CARGO_BIN_EXE_netpath"));
    let image = netpath::docker::image::ensure_agent_image_from(&engine, exe, false).unwrap();
    let bridge = format!("com.docker.network.bridge.name=np{}rs", std::process::id());
    let (ok, out) = d.docker(&[
        "network", "create", "--label", "netpath", "-o", &bridge, "nprs-net",
    ]);
    assert!(ok, "docker network create: {out}");
    let run = |d: &OwnDockerd, name: &str| {
        let (ok, out) = d.docker(&[
            "run",
            "-d",
            "--name",
            name,
            "--label",
            "netpath",
            "--network",
            "nprs-net",
            &image,
            "hold",
        ]);
        assert!(ok, "docker run {name}: {out}");
    };
    run(&d, "nprs-a");

    let port = free_port();
    let mut serve = Reaped(
        Command::new(exe)
            .args(["serve", "--all", "--rescan-secs", "0.5"])
            .args(["--listen", &format!("127.0.0.1:{port}")])
            .env("DOCKER_HOST", d.host())
            .stdout(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let metrics = || get(port, "/metrics").map(|r| r.1).unwrap_or_default();
    let watched = || -> Option<u64> {
        metrics()
            .lines()
            .find_map(|l| l.strip_prefix("netpath_watched_containers "))
            .and_then(|v| v.trim().parse().ok())
    };
    wait_for("serve to follow the first container", 60, || {
        watched() == Some(1)
    });

    d.stop();
    // Several rescans with no daemon: the exporter is still up and still answers.
    std::thread::sleep(Duration::from_secs(3));
    assert!(
        serve.0.try_wait().unwrap().is_none(),
        "netpath serve exited while its Docker daemon was down"
    );
    assert!(
        metrics().contains("netpath_watched_containers"),
        "no metrics while the daemon was down"
    );

    d.start();
    // The first container did not survive the daemon (no restart policy): it is no longer
    // followed; one started after the restart is.
    wait_for(
        "serve to let go of the container the restart stopped",
        30,
        || watched() == Some(0),
    );
    run(&d, "nprs-b");
    wait_for(
        "serve to follow the container started after the restart",
        30,
        || watched() == Some(1),
    );
    assert!(
        serve.0.try_wait().unwrap().is_none(),
        "netpath serve exited"
    );
    let m = metrics();
    let devices = m
        .lines()
        .find_map(|l| l.strip_prefix("netpath_watched_devices "))
        .and_then(|v| v.trim().parse::<u64>().ok());
    assert!(devices.is_some_and(|n| n >= 1), "no device followed:\n{m}");
    drop(serve);
    drop(d);
    assert_eq!(docker0(), had_docker0, "the host's docker0 changed");
}
