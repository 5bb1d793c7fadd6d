//! `netpath diff`: on saved compare JSON (small fixtures under tests/data, written for known
//! arithmetic: the ranking, the noise calls and the context lines are computed from the files),
//! bad input, and live `diff -d overlay --vs bridge` (root), whose JSON is validated against
//! schemas/diff.json.
mod common;

use std::process::{Command, Output};

use serde_json::Value;

use common::NETPATH;

fn data(name: &str) -> String {
    format!("{}/tests/data/{name}", env!("CARGO_MANIFEST_DIR"))
}

/// A program run is charged nothing (`NETPATH_RUN_COST=0`): these tests check diff's pairing
/// and ranking; compensation is checked by validate and trace. With the calibrated cost, one
/// run beside CI's load ranked overlay's receiver-stack (response) 0.55 µs below bridge's
/// first, above the VXLAN hops. Not a compensation fault: netpath's own time in that hop is
/// the same on both (0.20–0.22 µs against 0.19–0.21, two runs), but a VXLAN hop compensated
/// (+0.5 µs) is the size of receiver-stack's own move between runs (±0.3 µs), while raw
/// (+0.7–1.0 µs) it ranks clear of it.
fn run(args: &[&str]) -> Output {
    Command::new(NETPATH)
        .args(args)
        .env("NETPATH_RUN_COST", "0")
        .output()
        .unwrap()
}

fn json(args: &[&str]) -> Value {
    let out = run(args);
    assert!(
        out.status.success(),
        "netpath {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    common::schema::validate("diff", &v);
    v
}

fn close(v: &Value, x: f64) -> bool {
    (v.as_f64().unwrap() - x).abs() < 1e-6
}

fn names(v: &Value) -> Vec<&str> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|d| d["name"].as_str().unwrap())
        .collect()
}

/// Two drivers of one interleaved run: paired, per-round deltas, hops ranked by their share.
#[test]
fn one_file_two_drivers_paired_ranking_and_noise() {
    let f = data("compare-overlay-bridge.json");
    let v = json(&["diff", &f, "-d", "overlay", "--vs", "bridge", "--json"]);
    assert_eq!(v["paired"], true);
    assert_eq!(
        v["header"]["backend"],
        Value::Null,
        "a file diff loads no programs"
    );
    // Untraced p50 per round: overlay 30, 32, 31 and bridge 25, 26.8, 26.1: per-round deltas
    // 5.0, 5.2, 4.9, median 5.0, range 0.3.
    let h = &v["headline"];
    assert_eq!(h["name"], "RTT p50");
    assert!(close(&h["delta"], 5.0) && close(&h["noise"], 0.3), "{h}");
    assert_eq!(h["within_noise"], false);
    // p99 per-round deltas 5, -5, 4 change sign: noise.
    assert_eq!(v["rtt"][1]["name"], "RTT p99");
    assert_eq!(v["rtt"][1]["within_noise"], true);
    let hops = &v["hops_p50"];
    assert_eq!(
        names(hops),
        [
            "vxlan-decap (request)",
            "vxlan-encap (request)",
            "backlog (request)",
            "underlay (request)",
            "sender-stack (request)",
            "receiver-stack (request)"
        ]
    );
    // A hop only overlay has counts fully as overlay's: bridge 0 in every round.
    assert_eq!(hops[0]["b_rounds"], 0);
    assert!(close(&hops[0]["delta"], 1.3) && close(&hops[0]["noise"], 0.1));
    // Backlog crossed twice per packet on overlay: per packet 1.4 against 0.7.
    assert_eq!(hops[2]["note"], "×2 more");
    assert!(close(&hops[2]["delta"], 0.7), "{}", hops[2]);
    for i in 0..4 {
        assert_eq!(hops[i]["within_noise"], false, "{}", hops[i]);
    }
    for i in 4..6 {
        assert_eq!(hops[i]["within_noise"], true, "{}", hops[i]);
    }
    // Shares of the summed difference (1.3 + 1.1 + 0.7 + 0.3 - 0.1 - 0.05 = 3.25).
    assert!(
        close(&hops[0]["share_pct"], 1.3 / 3.25 * 100.0),
        "{}",
        hops[0]
    );
    assert_eq!(
        v["verdict"],
        "overlay is 5.0 µs slower than bridge at p50 (spread 0.3): vxlan-decap (request) +1.3, \
         vxlan-encap (request) +1.1, backlog (request) ×2 more +0.7, underlay (request) +0.3; \
         the rest within noise"
    );
    assert!(close(&v["bulk"]["delta"], -3.1), "{}", v["bulk"]);
    assert_eq!(v["bulk"]["unit"], "gbit-per-s");
    assert_eq!(
        v["warnings"].as_array().unwrap().len(),
        0,
        "one run, one context"
    );
    // Each side echoes its record's conditions as the file has them.
    let file: Value = serde_json::from_str(&std::fs::read_to_string(&f).unwrap()).unwrap();
    for (side, record) in [("a", 0), ("b", 1)] {
        let (s, r) = (&v[side], &file["drivers"][record]);
        assert_eq!(s["driver"], r["driver"]);
        for k in ["wait", "cpus", "placement"] {
            assert_eq!(s[k], r[k], "{side}.{k}");
        }
        for k in ["cpus_online", "steal_pct", "pin", "loadavg"] {
            assert_eq!(s["machine"][k], r["machine"][k], "{side}.machine.{k}");
        }
    }
    // The text: the sentence first, the table with the within-noise marks, the conditions.
    let out = run(&["diff", &f, "-d", "overlay", "--vs", "bridge"]);
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.starts_with("overlay is 5.0 µs slower than bridge at p50"),
        "{text}"
    );
    assert!(text.contains("wait spin, cpus split; ran on client cpu0, server cpu1"));
    let line = |hop: &str| {
        text.lines()
            .find(|l| l.trim_start().starts_with(hop))
            .unwrap()
    };
    assert!(
        line("sender-stack (request)").ends_with("~ within noise"),
        "{text}"
    );
    assert!(!line("vxlan-decap (request)").contains("within noise"));
}

/// The same driver from two machines: unpaired, and every difference of their conditions said.
#[test]
fn two_files_unpaired_with_context_warnings() {
    let (a, b) = (data("compare-vm61.json"), data("compare-host.json"));
    // bridge is the only driver both have: picked without --driver.
    let v = json(&["diff", &a, &b, "--json"]);
    assert_eq!(v["paired"], false);
    assert_eq!(v["a"]["label"], "bridge (compare-vm61.json)");
    // Medians 20.5 and 24.4; half-ranges 0.5 and 0.5.
    let h = &v["headline"];
    assert!(close(&h["delta"], -3.9) && close(&h["noise"], 1.0), "{h}");
    assert_eq!(h["within_noise"], false);
    // B was saved without per-round hop tables: one value, noise unknown, and said so.
    assert!(
        v["hops_p50"]
            .as_array()
            .unwrap()
            .iter()
            .all(|d| d["noise_known"] == false && d["b_rounds"] == 1)
    );
    let notes = v["notes"].to_string();
    assert!(notes.contains("no per-round hop tables"), "{notes}");
    let w: Vec<&str> = v["warnings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_str().unwrap())
        .collect();
    let has = |s: &str| w.iter().any(|x| x.contains(s));
    assert!(
        has("used backend kprobe, bridge (compare-host.json) tracepoint"),
        "{w:?}"
    );
    assert!(has("used kernel 6.1.0-37-cloud-amd64"), "{w:?}");
    assert!(
        has("used wait mode spin, bridge (compare-host.json) block"),
        "{w:?}"
    );
    assert!(has("used --cpus split"), "{w:?}");
    assert!(has("placement differed"), "{w:?}");
    assert!(has("machine state differed") && has("busy 70%"), "{w:?}");
    assert!(has("ran on host vm61"), "{w:?}");
    assert!(!has("netpath"), "same netpath version on both: {w:?}");
    // --driver X --vs Y across the files.
    let v = json(&[
        "diff", &a, &b, "--driver", "overlay", "--vs", "host", "--json",
    ]);
    assert!(
        v["verdict"].as_str().unwrap().starts_with(
            "overlay (compare-vm61.json) is 16.3 µs slower than host (compare-host.json) at p50"
        ),
        "{}",
        v["verdict"]
    );
}

/// Bad input: one line saying what and how to fix, non-zero exit, nothing written.
#[test]
fn bad_input_is_one_line() {
    let (one, a, b) = (
        data("compare-overlay-bridge.json"),
        data("compare-vm61.json"),
        data("compare-host.json"),
    );
    let diff_json = std::env::temp_dir().join(format!("np-diff-{}.json", std::process::id()));
    let out = run(&["diff", &one, "-d", "overlay", "--vs", "bridge", "--json"]);
    std::fs::write(&diff_json, &out.stdout).unwrap();
    let diff_json = diff_json.to_string_lossy().into_owned();
    let iperf = data("iperf3-3.12-client.json");
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (
            vec!["diff", "/nonexistent/a.json", &b],
            "reading /nonexistent/a.json",
        ),
        (vec!["diff", "/etc/hostname", &b], "is not JSON"),
        (
            vec!["diff", &iperf, &b],
            "not the JSON of `netpath compare --json`",
        ),
        (
            vec!["diff", &diff_json, &b],
            "is the output of `netpath diff`",
        ),
        (
            vec!["diff", &a, &b, "--driver", "overlay"],
            "has no driver overlay (it has bridge, host)",
        ),
        (
            vec!["diff", &a, &b, "--vs", "host"],
            "give A's with --driver too",
        ),
        (
            vec!["diff", &one],
            "--driver X --vs Y (it has overlay, bridge)",
        ),
        (
            vec!["diff", &one, "-d", "overlay", "--vs", "macvlan"],
            "has no driver macvlan",
        ),
        (vec!["diff", &one, &one, &one], "got 3"),
        (
            vec!["diff", &a, &b, "--rounds", "4"],
            "saved files were measured already",
        ),
        (
            vec!["diff", &a, &b, "--wait", "block"],
            "saved files were measured already",
        ),
    ];
    for (args, says) in cases {
        let out = run(&args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?} succeeded");
        assert_eq!(err.trim().lines().count(), 1, "{args:?}: {err}");
        assert!(err.contains(says), "{args:?}: {err}");
        assert!(out.stdout.is_empty(), "{args:?} printed {:?}", out.stdout);
    }
    // Two files sharing several drivers: asked which.
    let out = run(&["diff", &one, &one]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success()
            && err.contains("share drivers overlay, bridge: pick one with --driver"),
        "{err}"
    );
    std::fs::remove_file(&diff_json).unwrap();
}

/// The live form's bad input, as root: said before anything is built.
#[test]
fn live_bad_input_is_one_line() {
    let _g = common::need_root();
    for (args, says) in [
        (vec!["diff"], "-d A --vs B to measure two drivers now"),
        (vec!["diff", "-d", "overlay"], "-d A --vs B"),
        (
            vec!["diff", "-d", "overlay", "--vs", "overlay"],
            "both name overlay",
        ),
        (
            vec!["diff", "-d", "nosuch", "--vs", "bridge"],
            "-d nosuch: no such driver",
        ),
        (
            vec!["diff", "-d", "overlay", "--vs", "bridge", "--cpus", "77"],
            "CPU 77",
        ),
    ] {
        let out = run(&args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?} succeeded");
        assert_eq!(err.trim().lines().count(), 1, "{args:?}: {err}");
        assert!(err.contains(says), "{args:?}: {err}");
    }
    // Files need no privilege (like `report`): as nobody, with no capabilities.
    let out = common::output_ok(
        Command::new("setpriv")
            .args([
                "--reuid=65534",
                "--regid=65534",
                "--clear-groups",
                "--inh-caps=-all",
                NETPATH,
                "diff",
            ])
            .args([data("compare-vm61.json"), data("compare-host.json")]),
    );
    assert!(
        String::from_utf8_lossy(&out.stdout)
            .starts_with("bridge (compare-vm61.json) is 3.9 µs faster")
    );
}

/// Live, as root: overlay and bridge in one interleaved run. The hops only overlay has are
/// exactly VXLAN's and the underlay's, VXLAN's a result, and the top of the ranking is made of
/// them and of the hops overlay crosses twice per packet (`×2 more`: the second node's bridge,
/// the second backlog pass of the decapsulated packet).
#[test]
fn live_overlay_vs_bridge() {
    let _g = common::need_root();
    let v = json(&common::latency_only(&[
        "diff", "-d", "overlay", "--vs", "bridge", "-n", "1000", "--warmup", "100", "--rounds",
        "3", "--json",
    ]));
    assert_eq!(v["paired"], true);
    assert_eq!(v["header"]["kind"], "diff");
    assert!(v["header"]["backend"].is_string());
    for s in ["a", "b"] {
        assert_eq!(v[s]["rounds"], 3);
        assert_eq!(v[s]["wait"], "spin");
        assert!(v[s]["machine"]["busy_pct"].is_number(), "{}", v[s]);
    }
    let hops = v["hops_p50"].as_array().unwrap();
    let hop = |d: &Value| {
        let n = d["name"].as_str().unwrap();
        n.split(' ').next().unwrap().to_string()
    };
    let mut only_a: Vec<String> = hops
        .iter()
        .filter(|d| d["b_rounds"] == 0)
        .map(hop)
        .collect();
    only_a.sort();
    only_a.dedup();
    assert_eq!(
        only_a,
        ["underlay", "vxlan-decap", "vxlan-encap"],
        "{hops:?}"
    );
    // Each hop only overlay crosses counts fully as overlay's. With netpath's own time taken
    // out, the underlay crossing (a veth between the nodes, about one program run) can come
    // to ~0 in a round and sit within the noise; VXLAN's work cannot.
    for d in hops.iter().filter(|d| d["b_rounds"] == 0) {
        assert_eq!(d["a_rounds"], 3);
        assert!(d["noise_known"] == true, "{d}");
        assert!(d["delta"].as_f64().unwrap() >= 0.0, "{d}");
    }
    assert!(
        hops.iter().any(|d| d["b_rounds"] == 0
            && hop(d).starts_with("vxlan-")
            && d["within_noise"] == false
            && d["delta"].as_f64().unwrap() > 0.0),
        "no VXLAN hop is a result: {hops:?}"
    );
    let results: Vec<&Value> = hops.iter().filter(|d| d["within_noise"] == false).collect();
    for d in results.iter().take(4) {
        let h = hop(d);
        assert!(
            ["vxlan-encap", "vxlan-decap", "underlay"].contains(&h.as_str())
                || d["note"] == "×2 more",
            "top-ranked {d} is not a VXLAN or underlay hop (ranking: {:?})",
            names(&v["hops_p50"])
        );
    }
    // The RTT headline may be within noise on a busy machine; the sentence still names the
    // VXLAN hops, which are results.
    let verdict = v["verdict"].as_str().unwrap();
    assert!(
        verdict.starts_with("overlay ") && verdict.contains("vxlan-decap"),
        "{verdict}"
    );
}

/// `netpath diff … | head -1`: the reader closing the pipe ends the output quietly, exit 0
/// and nothing on stderr (docs/cli.md: nobody is left to tell). The read end is closed before
/// netpath writes anything, so its first print meets the closed pipe.
#[test]
fn closed_pipe_is_no_panic() {
    let (a, b) = (data("compare-vm61.json"), data("compare-host.json"));
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    let out = Command::new(NETPATH)
        .args(["diff", &a, &b])
        .stdout(writer)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{:?}: {err}", out.status);
    assert!(err.is_empty(), "{err}");
}
