//! `netpath serve` left on: one journey in `--sample` followed (the kernel's started count
//! against the timelines it emitted), series by direction relative to the container and by
//! the kind of the other end, the programs only traced threads need left detached (the
//! kernel's list of what the process attached, through bpftool), and hop quantiles a real
//! Prometheus computes from the exported buckets beside the crossings `netpath trace` timed of
//! the same traffic. Needs root and Docker (started if none answers), prometheus and bpftool
//! (`cargo xtask setup --tests`).
mod common;
#[path = "common/scrape.rs"]
mod scrape;

use std::collections::BTreeMap;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use scrape::{Prometheus, gauge, metrics, wait_for};

/// A counter's value in a scrape (`netpath_journeys_total{name="…"}`).
fn journeys(m: &str, name: &str) -> u64 {
    let want = format!("netpath_journeys_total{{name=\"{name}\"}} ");
    m.lines()
        .find_map(|l| l.strip_prefix(&want))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0)
}

/// The tracepoints process `pid` has BPF programs attached to (`bpftool perf show`: the
/// kernel's answer for each of its perf-event and raw-tracepoint fds).
fn raw_tracepoints_of(pid: u32) -> Vec<String> {
    let out = Command::new("bpftool")
        .args(["-j", "perf", "show"])
        .output()
        .expect("bpftool (`cargo xtask setup --tests`)");
    let attached: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
    attached
        .as_array()
        .into_iter()
        .flatten()
        .filter(|a| a["pid"] == pid)
        .filter_map(|a| a["tracepoint"].as_str().map(str::to_string))
        .collect()
}

#[test]
fn serve_samples_journeys_by_direction_and_peer_light_by_default() {
    let _g = common::need_root();
    let (dl, _, server) = common::named_bridge_lab();
    let (serve, port) = scrape::serve_following(&[&server], &["--sample-every", "8"], &[]);
    // What the kernel has attached for this exporter: the path, not the thread probes.
    let tps = raw_tracepoints_of(serve.0.id());
    eprintln!("serve's raw tracepoints: {tps:?}");
    for needed in ["net_dev_queue", "netif_receive_skb", "sk_data_ready"] {
        assert!(
            tps.iter().any(|t| t == needed),
            "{needed} not attached: {tps:?}"
        );
    }
    // The thread probes, and in the light profile (the default) the two path programs that
    // name no hop.
    for detached in [
        "sched_switch",
        "sched_waking",
        "tcp_sendmsg_locked",
        "sock_recv_length",
        "softirq_entry",
        "consume_skb",
    ] {
        assert!(
            !tps.iter().any(|t| t == detached),
            "{detached} attached: {tps:?}"
        );
    }
    let series = |m: &str, dir: &str| {
        m.lines().any(|l| {
            l.starts_with("netpath_hop_latency_seconds_count{")
                && l.contains(&format!("direction=\"{dir}\""))
                && l.contains("peer=\"container\"")
                && l.contains(&format!("container=\"{server}\""))
        })
    };
    wait_for("requests in and responses out of the server", 90, || {
        common::traffic(&dl, 2);
        let m = metrics(port);
        series(&m, "in") && series(&m, "out")
    });
    let m = metrics(port);
    let (started, samples) = (journeys(&m, "started"), journeys(&m, "samples"));
    eprintln!("started {started}, timelines {samples}");
    // One entry in 8 is followed (pure ACKs among the entries are counted, not followed).
    assert!(
        samples > 0 && samples * 4 < started,
        "{samples} of {started}"
    );
    assert!(!m.contains("direction=\"request\""), "{m}");
    // Light: receive passes per packet are exported, softirq runs (not counted) are not.
    let has_series =
        |m: &str, name: &str| m.lines().any(|l| l.starts_with(&format!("{name}_count{{")));
    assert!(has_series(&m, "netpath_receive_passes"), "{m}");
    assert!(!has_series(&m, "netpath_softirq_runs"), "{m}");
    drop(serve);
    // --full: both programs attached, and the softirq runs exported.
    let (serve, port) =
        scrape::serve_following(&[&server], &["--sample-every", "8", "--full"], &[]);
    let tps = raw_tracepoints_of(serve.0.id());
    for needed in ["softirq_entry", "consume_skb"] {
        assert!(
            tps.iter().any(|t| t == needed),
            "{needed} not attached: {tps:?}"
        );
    }
    wait_for("softirq runs with --full", 90, || {
        common::traffic(&dl, 2);
        has_series(&metrics(port), "netpath_softirq_runs")
    });
    drop(serve);
    dl.teardown().unwrap();
}

/// Per hop, the crossings of `netpath trace --json` timelines (consecutive segments of one hop
/// are one crossing, as serve counts them), µs.
fn crossings(trace: &serde_json::Value) -> BTreeMap<String, Vec<f64>> {
    let mut by_hop: BTreeMap<String, Vec<f64>> = BTreeMap::new();
    for t in trace["timelines"].as_array().unwrap() {
        let mut cur: Option<(String, f64)> = None;
        for p in t["points"].as_array().unwrap().iter().skip(1) {
            let hop = p["hop"].as_str().unwrap().to_string();
            let us = p["since_prev_us"].as_f64().unwrap();
            match &mut cur {
                Some((h, d)) if *h == hop => *d += us,
                _ => {
                    if let Some((h, d)) = cur.take() {
                        by_hop.entry(h).or_default().push(d);
                    }
                    cur = Some((hop, us));
                }
            }
        }
        if let Some((h, d)) = cur {
            by_hop.entry(h).or_default().push(d);
        }
    }
    by_hop
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Every journey between two containers followed by `serve --sample 1` and by `netpath trace`
/// at once: per hop between the journeys' ends, `histogram_quantile(0.5, …)` of what
/// Prometheus scraped is the trace's p50 within a factor of two (the same packets timed at the
/// same points, only once both are attached: each tool's times also carry the other's program
/// time at a hop's ends), and the bucket holding the trace's p50 spans at most 17% (the
/// resolution the exported bounds give).
#[test]
fn prometheus_hop_quantiles_match_the_cli() {
    let _g = common::need_root();
    let (dl, client, server) = common::named_bridge_lab();
    let (serve, port) = scrape::serve_following(&[&client, &server], &["--sample-every", "1"], &[]);
    let prom = Prometheus::start(port);
    // Ends by itself after its duration. Traffic only once its programs are attached (the
    // kernel's list of what its process has attached), for a fixed time, so both tools see
    // the same packets with both sets of programs in place.
    let mut trace = Command::new(env!("CARGO_BIN_EXE_netpath"))
        .args(["trace", "--json", "-c", "100000", "--timeout", "25s"])
        .args(["--container", &client, "--container", &server])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = trace.stdout.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut v = Vec::new();
        std::io::Read::read_to_end(&mut stdout, &mut v).unwrap();
        v
    });
    wait_for("netpath trace to attach", 20, || {
        raw_tracepoints_of(trace.id())
            .iter()
            .any(|t| t == "sk_data_ready")
    });
    std::thread::sleep(Duration::from_secs(1));
    let t0 = Instant::now();
    while t0.elapsed() < Duration::from_secs(6) {
        common::traffic(&dl, 1);
    }
    assert!(trace.wait().unwrap().success(), "netpath trace failed");
    let cli: serde_json::Value = serde_json::from_slice(&reader.join().unwrap()).unwrap();
    let mut by_hop = crossings(&cli);
    // Prometheus has scraped the exporter's final counts.
    std::thread::sleep(Duration::from_secs(3));
    let q = "histogram_quantile(0.5, sum by (le, hop) (netpath_hop_latency_seconds_bucket{driver=\"bridge\"}))";
    let mut prom_p50: BTreeMap<String, f64> = BTreeMap::new();
    wait_for("Prometheus to answer hop quantiles", 30, || {
        prom_p50 = prom
            .query(q)
            .iter()
            .filter_map(|r| {
                let v = r["value"][1].as_str()?.parse::<f64>().ok()?;
                Some((r["metric"]["hop"].as_str()?.to_string(), v * 1e6))
            })
            .filter(|(_, v)| v.is_finite())
            .collect();
        prom_p50.contains_key("veth") && prom_p50.contains_key("bridge")
    });
    let prom_count: BTreeMap<String, f64> = prom
        .query("sum by (hop) (netpath_hop_latency_seconds_count{driver=\"bridge\"})")
        .iter()
        .filter_map(|r| {
            let v = r["value"][1].as_str()?.parse::<f64>().ok()?;
            Some((r["metric"]["hop"].as_str()?.to_string(), v))
        })
        .collect();
    // The bucket bounds Prometheus holds for the bridge driver's hops.
    let mut les: Vec<f64> = prom
        .query("count by (le) (netpath_hop_latency_seconds_bucket{driver=\"bridge\"})")
        .iter()
        .filter_map(|r| r["metric"]["le"].as_str()?.parse::<f64>().ok())
        .filter(|v| v.is_finite())
        .map(|v| v * 1e6)
        .collect();
    les.sort_by(f64::total_cmp);
    let mut compared = 0;
    for (hop, v) in by_hop.iter_mut() {
        let Some(&p) = prom_p50.get(hop) else {
            continue;
        };
        let c = median(v);
        let (p10, p90) = (v[v.len() / 10], v[v.len() * 9 / 10]);
        eprintln!(
            "{hop}: trace p50 {c:.3} µs over {} crossings (p10 {p10:.3}, p90 {p90:.3}), Prometheus p50 {p:.3} µs over {} ({:+.1}%)",
            v.len(),
            prom_count.get(hop).copied().unwrap_or(0.0),
            (p / c - 1.0) * 100.0
        );
        // Compared away from the points where a program does more than stamp: serve's,
        // attached first, runs before the trace's clock read at every point, so a hop
        // bounded by its heavier work differs between the tools. Those are the first hop
        // (veth: the journey's entry) and the hops on either side of sk_data_ready (the
        // receiver's stack, socket-queue: the journey parked at its socket).
        if v.len() < 300 || ["receiver-stack", "socket-queue", "veth"].contains(&hop.as_str()) {
            continue;
        }
        // The same hop, timed by two tools whose programs each run inside the other's hops: the
        // exported p50 is the CLI's within a factor of two (a unit or bucket-label error is
        // not). How close they come (within 10% on a quiet machine: -1.1%, -0.5%, +0.2% for
        // backlog; -15.8% once in a CI run) is a figure for the closing note, not a test
        // threshold: these machines are shared and noisy.
        assert!(
            p >= c / 2.0 && p <= c * 2.0,
            "{hop}: Prometheus p50 {p} vs the CLI's {c}"
        );
        // The buckets resolve the CLI's p50: the bucket holding it spans at most 17%.
        let i = les.partition_point(|&le| le < c);
        assert!(
            i > 0 && i < les.len(),
            "{hop}: {c} µs outside the bounds {les:?}"
        );
        assert!(
            les[i] / les[i - 1] <= 1.17,
            "{hop}: bucket {}..{}",
            les[i - 1],
            les[i]
        );
        compared += 1;
    }
    assert!(compared >= 2, "{prom_p50:?} vs {:?}", by_hop.keys());
    drop(prom);
    drop(serve);
    dl.teardown().unwrap();
}

/// What each of `pid`'s open fds is (socket:[…], anon_inode:bpf-map, a path).
fn open_fds(pid: u32) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|d| {
            d.filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
                .map(|t| t.display().to_string())
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

/// A followed container killed while Prometheus-style scrapes are in flight (its network
/// namespace and veth go under the exporter, which follows it until its next listing): every
/// scrape answers, its series go, and the exporter holds no more fds than before. The short
/// version of `cargo xtask churn`.
#[test]
fn a_container_killed_mid_scrape_leaves_no_series_and_no_fds() {
    let _g = common::need_root();
    let (dl, _, server) = common::named_bridge_lab();
    let (serve, port) = scrape::serve_following(&[&server], &["--sample-every", "1"], &[]);
    let pid = serve.0.id();
    let has_series = |m: &str| m.contains(&format!("container=\"{server}\""));
    wait_for("the server's series", 60, || {
        common::traffic(&dl, 1);
        has_series(&metrics(port))
    });
    let before = open_fds(pid);
    let scrapes = std::thread::spawn(move || {
        (0..20)
            .map(|_| {
                let ok = scrape::get(port, "/metrics").is_some_and(|(st, _)| st.contains(" 200 "));
                std::thread::sleep(Duration::from_millis(50));
                ok
            })
            .filter(|ok| !ok)
            .count()
    });
    let killed = Command::new("docker")
        .args(["kill", &server])
        .output()
        .unwrap();
    assert!(killed.status.success(), "docker kill: {killed:?}");
    assert_eq!(
        scrapes.join().unwrap(),
        0,
        "scrapes failed while the container went"
    );
    wait_for("the killed container's series to go", 20, || {
        let m = metrics(port);
        !has_series(&m) && gauge(&m, "netpath_watched_containers") == Some(0)
    });
    // A connection the HTTP side or a runtime client still holds open closes by itself.
    let mut after = open_fds(pid);
    let deadline = Instant::now() + Duration::from_secs(10);
    while after.len() > before.len() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(500));
        after = open_fds(pid);
    }
    let new: Vec<&String> = after.iter().filter(|f| !before.contains(f)).collect();
    eprintln!(
        "serve's open fds: {} while following, {} after (new: {new:?})",
        before.len(),
        after.len()
    );
    assert!(after.len() <= before.len(), "fds grew: {new:?}");
    drop(serve);
    dl.teardown().unwrap();
}
