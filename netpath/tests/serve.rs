//! `netpath serve` on real Docker: it follows two running containers, exposes per-hop
//! histograms that `promtool check metrics` accepts, a real Prometheus (Debian's, started here
//! on loopback) scrapes it and answers a hop quantile query, and a container's series go when
//! it stops. Needs root, Docker (started if none answers), promtool and prometheus
//! (`cargo xtask setup`). Host only.
mod common;

use std::io::{Read as _, Write as _};
use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use netpath::docker::{DockerLab, DockerLabOptions};
use netpath::driver::Driver;
use netpath::harness::{self, NoPhases};

/// Kills and reaps a child this test started (by its pid) when the test ends, pass or fail.
struct Reaped(Child);

impl Drop for Reaped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// One HTTP GET on loopback: (status line, body).
fn get(port: u16, path: &str) -> Option<(String, String)> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
    write!(s, "GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n").ok()?;
    let mut buf = String::new();
    s.read_to_string(&mut buf).ok()?;
    let (head, body) = buf.split_once("\r\n\r\n")?;
    Some((head.lines().next()?.to_string(), body.to_string()))
}

fn wait_for(what: &str, secs: u64, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(secs);
    while Instant::now() < deadline {
        if f() {
            return;
        }
        std::thread::sleep(Duration::from_millis(300));
    }
    panic!("{what} did not happen within {secs} s");
}

fn urlencode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

fn traffic(dl: &DockerLab, rounds: usize) {
    for _ in 0..rounds {
        harness::run_rr(&dl.path, &common::small_rr(), &NoPhases).unwrap();
    }
}

#[test]
fn serve_exports_hop_histograms_that_prometheus_scrapes() {
    let _g = common::need_root();
    let engine = common::ensure_daemon();
    let o = DockerLabOptions {
        exe: Some(env!("CARGO_BIN_EXE_netpath").into()),
        reuse_image: true,
        ..Default::default()
    };
    let dl = DockerLab::build(&engine, Driver::Bridge, &o).unwrap();
    let client = dl.client.as_ref().unwrap().name.clone();
    let server = dl.server.as_ref().unwrap().name.clone();
    let port = free_port();
    let serve = Reaped(
        Command::new(env!("CARGO_BIN_EXE_netpath"))
            .args(["serve", "--listen", &format!("127.0.0.1:{port}")])
            .args(["--container", &client, "--container", &server])
            .args(["--rescan-secs", "0.5"])
            .stdout(Stdio::null())
            .spawn()
            .unwrap(),
    );
    wait_for("serve /ready", 60, || {
        get(port, "/ready").is_some_and(|(st, _)| st.contains(" 200 "))
    });
    traffic(&dl, 3);
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
    for lost in ["ringbuf_lost", "skb_map_full", "probe_misses", "dropped"] {
        assert!(
            m.contains(&format!("netpath_lost_events_total{{name=\"{lost}\"}}")),
            "{m}"
        );
    }
    assert!(m.contains("netpath_bpf_program_runs_total{program="), "{m}");
    assert!(m.contains("netpath_watched_containers 2"), "{m}");
    // Bounded labels: no address or port anywhere.
    assert!(!m.contains("10.") && !m.contains("port="), "{m}");

    // promtool accepts the live output.
    let mut p = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("promtool (Debian's prometheus package; `cargo xtask setup`)");
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
    let dir = std::env::temp_dir().join(format!("np-serve-prom-{port}"));
    std::fs::create_dir_all(&dir).unwrap();
    let cfg = dir.join("prometheus.yml");
    std::fs::write(
        &cfg,
        format!(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nscrape_configs:\n  - job_name: netpath\n    static_configs:\n      - targets: ['127.0.0.1:{port}']\n"
        ),
    )
    .unwrap();
    let prom_port = free_port();
    let _prom = Reaped(
        Command::new("prometheus")
            .arg(format!("--config.file={}", cfg.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.join("data").display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{prom_port}"))
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(dir.join("prometheus.log")).unwrap())
            .spawn()
            .expect("prometheus (Debian's package; `cargo xtask setup`)"),
    );
    let q = "histogram_quantile(0.5, sum by (le, hop) (rate(netpath_hop_latency_seconds_bucket{driver=\"bridge\"}[20s])))";
    let path = format!("/api/v1/query?query={}", urlencode(q));
    let mut answer = String::new();
    wait_for("a hop quantile from Prometheus", 90, || {
        traffic(&dl, 1);
        answer = get(prom_port, &path).map(|r| r.1).unwrap_or_default();
        let v: serde_json::Value = serde_json::from_str(&answer).unwrap_or_default();
        v["data"]["result"]
            .as_array()
            .is_some_and(|r| r.iter().any(|s| s["value"][1] != "NaN"))
    });
    eprintln!("prometheus: {q} → {answer}");
    let v: serde_json::Value = serde_json::from_str(&answer).unwrap();
    let hops: Vec<&str> = v["data"]["result"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|s| s["metric"]["hop"].as_str())
        .collect();
    assert!(
        hops.contains(&"veth") && hops.contains(&"bridge"),
        "{answer}"
    );

    // The containers stop: their series go at the next rescan.
    dl.teardown().unwrap();
    wait_for("the stopped containers' series to go", 20, || {
        let m = metrics();
        !m.contains(&format!("container=\"{server}\""))
            && !m.contains(&format!("container=\"{client}\""))
            && m.contains("netpath_watched_containers 0")
    });
    drop(serve);
    let _ = std::fs::remove_dir_all(&dir);
}
