//! netpath on a containerd node: pods made as a kubelet's runtime makes them (a network
//! namespace, the CNI bridge plugin, a sandbox and an application container started with
//! `ctr` from an image imported from a tarball), no Docker involved. `serve` follows them and a
//! real Prometheus scrapes per-hop histograms with their pod labels, and a deleted pod's
//! series go; `trace --container` and `inspect` name the pod; `compare --between` measures
//! between two pods; `serve` keeps answering across a containerd restart and follows the pods
//! started after it. Needs root, containerd and ctr (Debian's, with docker.io),
//! containernetworking-plugins and prometheus (`cargo xtask setup`). Host only.
mod common;
#[path = "common/containerd.rs"]
mod ctrd;
#[path = "common/scrape.rs"]
mod scrape;

use std::net::SocketAddrV4;
use std::process::Command;
use std::time::{Duration, Instant};

use ctrd::{Containerd, POD_NAMESPACE, Pod};
use netpath::driver::Driver;
use netpath::harness::{self, NoPhases};
use netpath::path::NetPath;
use netpath::sys::netns::Netns;
use scrape::{Prometheus, gauge, metrics, wait_for};

/// Request/response traffic from pod `a` to pod `b` (netpath's harness in their namespaces:
/// what an application in one pod calling the other sends).
fn traffic(a: &Pod, b: &Pod, rounds: usize) {
    let path = NetPath::new(
        Driver::Bridge,
        "trafic",
        Netns::open_existing(&a.netns).unwrap(),
        Netns::open_existing(&b.netns).unwrap(),
        SocketAddrV4::new(b.ip, 18080),
    );
    for _ in 0..rounds {
        harness::run_rr(&path, &common::small_rr(), &NoPhases).unwrap();
    }
}

/// A containerd node with two pods, `a` and `b`, on its CNI bridge: where the tests of two
/// pods start.
fn node_with_two_pods() -> (Containerd, Pod, Pod) {
    let mut node = Containerd::start();
    let (a, b) = (node.add_pod("a"), node.add_pod("b"));
    (node, a, b)
}

/// Lines of a scrape for one metric whose labels name `pod`.
fn series_of<'a>(m: &'a str, metric: &str, pod: &Pod) -> Vec<&'a str> {
    let want = format!("pod=\"{}\"", pod.name);
    m.lines()
        .filter(|l| l.starts_with(metric) && l.contains(&want))
        .collect()
}

#[test]
fn serve_follows_pods_and_prometheus_scrapes_their_labels() {
    let _g = common::need_root();
    let (mut node, a, b) = node_with_two_pods();
    let env = node.env();
    let (a_path, b_path) = (a.path(), b.path());
    let (serve, port) = scrape::serve_following(
        &[&a_path, &b_path],
        &["--sample-every", "1"],
        &[(env.0, &env.1)],
    );
    traffic(&a, &b, 3);
    wait_for("hop histograms of pod b", 30, || {
        !series_of(&metrics(port), "netpath_hop_latency_seconds_bucket", &b).is_empty()
    });
    let m = metrics(port);
    for pod in [&a, &b] {
        let lines = series_of(&m, "netpath_hop_latency_seconds_bucket", pod);
        for hop in ["veth", "bridge"] {
            assert!(
                lines.iter().any(|l| l.contains(&format!("hop=\"{hop}\""))
                    && l.contains("driver=\"bridge\"")
                    && l.contains(&format!("namespace=\"{POD_NAMESPACE}\""))
                    && l.contains("container=\"agent\"")),
                "no {hop} histogram labelled with pod {}:\n{m}",
                pod.name
            );
        }
    }

    // A real Prometheus scrapes it: per-hop histograms by pod, and journeys counted.
    let prom = Prometheus::start(port);
    let q = format!(
        "sum by (namespace, pod, container, hop) (netpath_hop_latency_seconds_count{{namespace=\"{POD_NAMESPACE}\"}})"
    );
    let mut result = Vec::new();
    wait_for("Prometheus to answer per-pod hop counts", 90, || {
        traffic(&a, &b, 1);
        result = prom.query(&q);
        [&a, &b].iter().all(|p| {
            result
                .iter()
                .any(|s| s["metric"]["pod"] == p.name.as_str() && s["metric"]["hop"] == "bridge")
        })
    });
    eprintln!(
        "prometheus: {q} → {}",
        serde_json::Value::Array(result.clone())
    );
    let completed = prom.query("netpath_journeys_total{name=\"completed\"}");
    let n = completed
        .first()
        .and_then(|s| s["value"][1].as_str()?.parse::<f64>().ok())
        .unwrap_or(0.0);
    assert!(n > 0.0, "no completed journey: {completed:?}");

    // The pod is deleted: its series go, the other pod's stay.
    node.delete_pod(&b);
    wait_for("the deleted pod's series to go", 30, || {
        let m = metrics(port);
        m.lines()
            .all(|l| !l.contains(&format!("pod=\"{}\"", b.name)))
            && gauge(&m, "netpath_watched_containers") == Some(1)
    });
    let m = metrics(port);
    assert!(
        !series_of(&m, "netpath_hop_latency_seconds_bucket", &a).is_empty(),
        "pod a's series went too:\n{m}"
    );
    drop(prom);
    drop(serve);
}

#[test]
fn trace_container_prints_a_pods_timelines_with_its_labels() {
    let _g = common::need_root();
    let (node, a, b) = node_with_two_pods();
    let env = node.env();
    let mut child = Command::new(env!("CARGO_BIN_EXE_netpath"))
        .args([
            "trace",
            "--container",
            &b.path(),
            "-c",
            "4",
            "--timeout",
            "60",
        ])
        .args(["--format", "json"])
        .env(env.0, &env.1)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let read = |mut r: Box<dyn std::io::Read + Send>| {
        std::thread::spawn(move || {
            let mut s = Vec::new();
            let _ = r.read_to_end(&mut s);
            s
        })
    };
    let stdout = read(Box::new(child.stdout.take().unwrap()));
    let stderr = read(Box::new(child.stderr.take().unwrap()));
    let mut child = scrape::Reaped(child);
    // Traffic until the trace has its timelines (it attaches first, then waits).
    let deadline = Instant::now() + Duration::from_secs(90);
    let status = loop {
        if let Some(st) = child.0.try_wait().unwrap() {
            break st;
        }
        assert!(Instant::now() < deadline, "netpath trace did not end");
        traffic(&a, &b, 1);
    };
    let (stdout, stderr) = (stdout.join().unwrap(), stderr.join().unwrap());
    assert!(
        status.success(),
        "netpath trace: {}",
        String::from_utf8_lossy(&stderr)
    );
    let out = std::process::Output {
        status,
        stdout,
        stderr,
    };
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    common::schema::validate("trace", &v);
    let c = &v["containers"][0];
    assert_eq!(c["runtime"], "containerd", "{c}");
    assert_eq!(c["pod"]["namespace"], POD_NAMESPACE, "{c}");
    assert_eq!(c["pod"]["name"], b.name.as_str(), "{c}");
    assert_eq!(c["pod"]["container"], "agent", "{c}");
    let timelines = v["timelines"].as_array().unwrap();
    assert!(!timelines.is_empty(), "{v}");
    // Each timeline names the pod's namespace on its devices: eth0@netpath/np…-b.
    let inside = format!("eth0@{}", b.path());
    for t in timelines {
        let devices: Vec<&str> = t["points"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|p| p["device"].as_str())
            .collect();
        assert!(
            devices.iter().any(|d| *d == inside),
            "{inside} not in {devices:?}"
        );
    }
}

#[test]
fn compare_between_two_pods_and_inspect_one() {
    let _g = common::need_root();
    let (node, a, b) = node_with_two_pods();
    let env = node.env();
    let n = 300u64;
    let out =
        common::output_ok(common::compare_between(&a.path(), &b.path(), n).env(env.0, &env.1));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let r = &v["drivers"][0];
    assert_eq!(
        r["driver"],
        format!("{}→{} (bridge via {})", a.path(), b.path(), node.bridge()),
        "{r}"
    );
    assert_eq!(r["traced"]["count"], n, "{r}");
    assert!(
        r["lost"]["completed"].as_u64().unwrap() > 0,
        "{}",
        r["lost"]
    );
    let hops = common::json_hops(r, "hops");
    assert!(
        hops.contains(&"veth") && hops.contains(&"bridge"),
        "{hops:?}"
    );

    // inspect by namespace/pod/container: who runs it, its pod, the bridge at its other end.
    let v = inspect(&format!("{}/agent", a.path()), &[(env.0, &env.1)]);
    assert_eq!(v["record"]["runtime"], "containerd", "{v}");
    assert_eq!(v["record"]["pod"]["name"], a.name.as_str(), "{v}");
    assert_eq!(v["network_mode"], format!("netns:{}", a.netns), "{v}");
    let eth0 = eth0_of(&v);
    assert_eq!(eth0["bridge"], node.bridge().as_str(), "{eth0}");
    assert_eq!(eth0["addrs"][0], format!("{}/24", a.ip), "{eth0}");
}

#[test]
fn serve_survives_a_containerd_restart_and_follows_new_pods() {
    let _g = common::need_root();
    let mut node = Containerd::start();
    let a = node.add_pod("a");
    let env = node.env();
    let label = format!("netpath.run={}", node.run_id);
    let (mut serve, port) = scrape::serve(&["--label", &label], &[(env.0, &env.1)]);
    wait_for("serve to follow pod a", 30, || {
        gauge(&metrics(port), "netpath_watched_containers") == Some(1)
    });

    node.stop();
    // Several rescans without containerd: serve stays up, ready, and keeps pod a.
    std::thread::sleep(Duration::from_secs(3));
    assert!(serve.0.try_wait().unwrap().is_none(), "serve exited");
    let ready = scrape::get(port, "/ready").map(|r| r.0).unwrap_or_default();
    assert!(ready.contains(" 200 "), "/ready: {ready}");
    assert_eq!(gauge(&metrics(port), "netpath_watched_containers"), Some(1));

    node.run_daemon();
    let b = node.add_pod("b");
    wait_for(
        "serve to follow the pod started after the restart",
        30,
        || gauge(&metrics(port), "netpath_watched_containers") == Some(2),
    );
    traffic(&a, &b, 2);
    wait_for("series of the new pod", 30, || {
        !series_of(&metrics(port), "netpath_hop_latency_seconds_bucket", &b).is_empty()
    });
    assert!(serve.0.try_wait().unwrap().is_none(), "serve exited");
}

/// `netpath inspect NAME --json` with `env`.
fn inspect(name: &str, env: &[(&str, &str)]) -> serde_json::Value {
    let out = Command::new(env!("CARGO_BIN_EXE_netpath"))
        .args(["inspect", name, "--json"])
        .envs(env.iter().copied())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "inspect {name}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    common::schema::validate("inspect", &v);
    v
}

/// The `eth0` of `inspect`'s interfaces.
fn eth0_of(v: &serde_json::Value) -> &serde_json::Value {
    v["interfaces"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["name"] == "eth0")
        .unwrap_or_else(|| panic!("no eth0: {v}"))
}

/// A container no runtime answers for is found by its cgroup and network namespace alone,
/// and said so: a pod's container where a kubelet's cgroupfs driver puts a Burstable pod's,
/// inspected by its pod UID without the address of the containerd that runs it; with it,
/// the same container is containerd's, its QoS class still read from the cgroup.
#[test]
fn cgroup_alone_finds_a_pod_no_runtime_names() {
    let _g = common::need_root();
    let mut node = Containerd::start();
    let c = node.add_kube_pod("c");
    let v = inspect(&c.uid, &[]);
    let r = &v["record"];
    assert_eq!(r["runtime"], "cgroup", "{r}");
    assert_eq!(r["id"], c.ids[1].as_str(), "{r}");
    assert_eq!(r["name"], &c.ids[1][..12], "{r}");
    assert_eq!(r["pod"]["uid"], c.uid.as_str(), "{r}");
    assert_eq!(r["pod"]["qos"], "Burstable", "{r}");
    let eth0 = eth0_of(&v);
    assert_eq!(eth0["bridge"], node.bridge().as_str(), "{eth0}");

    let env = node.env();
    let v = inspect(&format!("{}/agent", c.path()), &[(env.0, &env.1)]);
    let r = &v["record"];
    assert_eq!(r["runtime"], "containerd", "{r}");
    assert_eq!(r["id"], c.ids[1].as_str(), "{r}");
    assert_eq!(r["pod"]["qos"], "Burstable", "{r}");
}
