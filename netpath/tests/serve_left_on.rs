//! The bench's "serve left on" section, short: redis-server and redis-benchmark (redis-tools)
//! in two containers of a network of the run's own, with serve off, following the other
//! container, following the server, with empty programs on serve's hooks, and the last two
//! again with their CPU per request counted. Every mode answers, the CPU figures are there, and
//! the image, containers and network are gone after. Needs root, Docker (started if none
//! answers) and redis-tools (`cargo xtask setup --tests`). Host only. Figures are not judged here: that is the bench's.
mod common;

use std::process::Command;

const NETPATH: &str = env!("CARGO_BIN_EXE_netpath");

/// The names of the images netpath built (the label every Docker object of netpath carries).
fn netpath_images() -> Vec<String> {
    let out = Command::new("docker")
        .args([
            "images",
            "--filter",
            "label=netpath",
            "--format",
            "{{.Repository}}",
        ])
        .output()
        .expect("docker images");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_string)
        .collect()
}

#[test]
fn serve_left_on_measures_its_modes_and_leaves_nothing() {
    let _g = common::need_root();
    let _daemon = common::ensure_daemon();
    let (before, images) = (common::leftovers::snapshot(), netpath_images());
    let out = Command::new(NETPATH)
        .args([
            "bench",
            "--only-serve-left-on",
            "--rounds",
            "1",
            "-n",
            "2000",
        ])
        .args(["--format", "json"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "bench --only-serve-left-on: {stderr}");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let rows = v["rows"].as_array().expect("rows");
    let modes: Vec<&str> = rows.iter().filter_map(|r| r["mode"].as_str()).collect();
    assert_eq!(
        modes,
        [
            "serve off",
            "serve following another container",
            "serve following the server",
            "empty programs on serve's hooks",
            "serve following the server, CPU counted",
            "empty programs on serve's hooks, CPU counted"
        ],
        "{v}"
    );
    for r in rows {
        // redis-benchmark answered: its GET line parsed, requests went through.
        for figure in ["rps", "p50_ms"] {
            let rounds = r[figure]["rounds"].as_array().expect("rounds");
            assert_eq!(rounds.len(), 1, "{r}");
            assert!(rounds[0].as_f64().unwrap() > 0.0, "{r}");
            // One round: its median is that round.
            assert_eq!(r[figure]["median"], rounds[0], "{r}");
        }
        // serve's CPU is read only while it runs.
        let serving = r["mode"] != "serve off";
        assert_eq!(r["serve_cpu_pct_per_core"].is_f64(), serving, "{r}");
    }
    // CPU per request of the counted mode: the programs ran (their statistics were on), serve
    // and the server's container took CPU, and the machine was busy; one round: its median.
    let cpu = &v["cpu_per_request"];
    for figure in [
        "programs_ns",
        "serve_ns",
        "app_ns",
        "busy_ns",
        "netpath_pct_of_busy",
    ] {
        assert!(cpu[figure].as_f64().unwrap_or(0.0) > 0.0, "{figure}: {cpu}");
    }
    assert_eq!(v["cpu_rounds"].as_array().map(Vec::len), Some(1), "{v}");
    assert_eq!(&v["cpu_rounds"][0], cpu, "{v}");
    let left = common::leftovers::changes(&before, &common::leftovers::snapshot());
    assert!(left.is_empty(), "{left:?}\n{stderr}");
    assert_eq!(netpath_images(), images, "the bench's image is removed");
}
