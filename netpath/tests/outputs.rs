//! What people and other programs read: every command's JSON against the committed schemas
//! (`inspect`'s is checked in the docker tests, which have containers), and the HTML report.
//! Runs the real binary as root; host only (bench needs sockperf and iperf3). The files
//! written for other viewers (pcap-ng, Perfetto) are tested in `outputs/files.rs`.
mod common;

// A crate root's `mod x;` looks for tests/x.rs: hence the path.
#[path = "outputs/files.rs"]
mod files;

use std::process::Command;

use serde_json::Value;

fn netpath(args: &[&str]) -> Value {
    let out = Command::new(env!("CARGO_BIN_EXE_netpath"))
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "netpath {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
    // (bench logs its phases as plain lines; the bars' own words must not appear.)
    assert!(
        !String::from_utf8_lossy(&out.stderr).contains("interleaved round"),
        "a progress bar was drawn in JSON mode"
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn doctor_json_matches_its_schema() {
    let _g = common::need_root();
    let v = netpath(&["doctor", "--json"]);
    common::schema::validate("doctor", &v);
    // The header's clock offset turns a kernel (monotonic) timestamp into UTC.
    let c = &v["header"]["clock"];
    let utc =
        c["monotonic_ns"].as_i64().unwrap() + c["monotonic_to_utc_offset_ns"].as_i64().unwrap();
    assert!(
        (utc - c["realtime_ns"].as_i64().unwrap()).abs() < 1_000_000,
        "{c}"
    );
}

/// `--format json` is `--json`: the same JSON (kind, backend, body); `--format text` is what
/// no flag prints.
#[test]
fn format_json_is_the_json_alias_and_text_the_default() {
    let _g = common::need_root();
    let long = netpath(&["doctor", "--format", "json"]);
    let short = netpath(&["doctor", "--json"]);
    common::schema::validate("doctor", &long);
    assert_eq!(long["header"]["kind"], "doctor");
    assert_eq!(long["header"]["kind"], short["header"]["kind"]);
    assert_eq!(long["header"]["backend"], short["header"]["backend"]);
    assert_eq!(
        long["header"]["schema_version"],
        short["header"]["schema_version"]
    );
    assert_eq!(long["capabilities"], short["capabilities"]);
    assert_eq!(long["backend"], short["backend"]);
    let text = |args: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_netpath"))
            .args(args)
            .output()
            .unwrap();
        assert!(out.status.success(), "netpath {}", args.join(" "));
        String::from_utf8(out.stdout).unwrap()
    };
    let default = text(&["doctor"]);
    assert_eq!(default, text(&["doctor", "--format", "text"]));
    assert!(default.starts_with("kernel "), "{default}");
    assert!(serde_json::from_str::<Value>(&default).is_err());
}

#[test]
fn compare_json_matches_its_schema() {
    let _g = common::need_root();
    let v = netpath(common::SMALL_COMPARE);
    common::schema::validate("compare", &v);
    assert_eq!(v["header"]["command_line"][1], "compare");
    for d in v["drivers"].as_array().unwrap() {
        let cdf = d["rtt_cdf"].as_array().unwrap();
        assert!(cdf.len() > 100, "{}", d["driver"]);
        assert_eq!(cdf.last().unwrap()[1], 1.0);
        own_time_taken_out(d);
    }
    // The saved JSON renders as one self-contained page and one SVG.
    let dir = std::env::temp_dir().join(format!("np-outputs-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let json = dir.join("run.json");
    std::fs::write(&json, v.to_string()).unwrap();
    let (html, svg) = (dir.join("run.html"), dir.join("run.svg"));
    common::output_ok(
        Command::new(env!("CARGO_BIN_EXE_netpath"))
            .arg("report")
            .arg(&json)
            .arg("-o")
            .arg(&html)
            .arg("-o")
            .arg(&svg),
    );
    // Two drivers of the saved run, diffed (paired: one interleaved run), per-hop deltas with
    // a spread from every round's traced run.
    let out = common::output_ok(
        Command::new(env!("CARGO_BIN_EXE_netpath"))
            .arg("diff")
            .arg(&json)
            .args(["--driver", "bridge", "--vs", "host", "--json"]),
    );
    let d: Value = serde_json::from_slice(&out.stdout).unwrap();
    common::schema::validate("diff", &d);
    assert_eq!(d["paired"], true);
    assert!(
        d["hops_p50"]
            .as_array()
            .unwrap()
            .iter()
            .any(|h| h["a_rounds"] == 2 && h["noise_known"] == true),
        "{}",
        d["hops_p50"]
    );
    let page = std::fs::read_to_string(&html).unwrap();
    assert_eq!(
        page.matches("<svg").count(),
        6,
        "the answer's ratio chart, two bar charts, the CDF and a journey per driver"
    );
    for d in ["host", "bridge"] {
        assert!(page.contains(&format!("\n{d} mean\n")), "no {d} bar");
    }
    for forbidden in ["<script", "src=", "href=", "@import", "url("] {
        assert!(
            !page.contains(forbidden),
            "the page fetches or runs something: {forbidden}"
        );
    }
    let svg = std::fs::read_to_string(&svg).unwrap();
    assert!(svg.starts_with("<svg") && svg.contains("bridge p99"));
    // A file that is not compare's output: one line, non-zero.
    let bad = Command::new(env!("CARGO_BIN_EXE_netpath"))
        .args(["report", "/etc/hostname", "-o"])
        .arg(dir.join("x.html"))
        .output()
        .unwrap();
    assert!(!bad.status.success());
    assert_eq!(
        String::from_utf8_lossy(&bad.stderr).trim().lines().count(),
        1
    );
    assert!(!dir.join("x.html").exists());
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Every hop row carries netpath's own time and the compensated figure, compensated ≤ raw, the
/// two add up, some own time was measured, and the consistency check is there with the
/// calibrated run cost it charged.
fn own_time_taken_out(d: &Value) {
    let f = |v: &Value| v.as_f64().unwrap();
    let hops = d["hops"].as_array().unwrap();
    for h in hops {
        let (raw, own, comp) = (
            f(&h["per_packet_us"]),
            f(&h["own_us"]),
            f(&h["compensated_us"]),
        );
        assert!(own >= 0.0 && comp >= 0.0 && comp <= raw, "{h}");
        assert!((raw - own - comp).abs() < 1e-6, "{h}");
        assert!(f(&h["compensated_p50_us"]) <= f(&h["p50_us"]), "{h}");
    }
    assert!(
        hops.iter().any(|h| f(&h["own_us"]) > 0.0),
        "no own time measured in {}",
        d["driver"]
    );
    assert!(f(&d["run_cost"]["ns"]) > 0.0, "{}", d["run_cost"]);
    let c = &d["consistency"];
    // The client's syscall edges lie outside every hop: the traced round trip less the hops,
    // with netpath's own time in them measured (the client's receive tail and its next send's
    // run), and the check adds what is left of them to the compensated hops.
    let (edges, edges_own) = (f(&c["edges_us"]), f(&c["edges_own_us"]));
    assert!(edges_own > 0.0 && edges_own <= edges, "{c}");
    let hops_comp = f(&c["raw_sum_us"]) - f(&c["own_us"]);
    assert!(
        hops_comp < f(&c["raw_sum_us"]) && f(&c["own_us"]) > 0.0,
        "{c}"
    );
    assert!(
        (f(&c["compensated_sum_us"]) - (hops_comp + edges - edges_own)).abs() < 1e-6,
        "{c}"
    );
    for dir in ["request", "response"] {
        let ow = &d["one_way"][dir];
        assert!(f(&ow["compensated_mean_us"]) < f(&ow["mean_us"]), "{ow}");
    }
    rounds_check(d, c);
}

/// The check taken in every round, stalls out of both sides: one error per round, the picked
/// round's among them, their median reported; the stall-free untraced means' range over the
/// rounds as the rounds say it; the stalls counted, never adding to a mean they left.
fn rounds_check(d: &Value, c: &Value) {
    let f = |v: &Value| v.as_f64().unwrap();
    let mut errs: Vec<f64> = (d["round_detail"].as_array().unwrap().iter())
        .map(|r| f(&r["consistency_error_pct"]))
        .collect();
    assert_eq!(errs.len(), 2, "{}", d["round_detail"]);
    assert!(
        errs.iter()
            .any(|e| (e - f(&c["error_stall_free_pct"])).abs() < 1e-6),
        "the picked round's error {} is not among the rounds' {errs:?}",
        c["error_stall_free_pct"]
    );
    let st = &d["stalls"];
    assert!(
        st["untraced"]["count"].is_u64() && st["traced"]["count"].is_u64(),
        "{st}"
    );
    assert!(
        (f(&c["untraced_mean_us"])
            - f(&st["untraced"]["mean_added_us"])
            - f(&c["stall_free_untraced_mean_us"]))
        .abs()
            < 1e-6,
        "{c} {st}"
    );
    // Two rounds: the check is the picked round's.
    assert_eq!(c["judged_on"], "picked round");
    errs.sort_by(f64::total_cmp);
    let median = (errs[0] + errs[1]) / 2.0;
    assert!(
        (f(&c["error_rounds_median_pct"]) - median).abs() < 1e-6,
        "{c} vs {errs:?}"
    );
    let mut means: Vec<f64> = (d["round_detail"].as_array().unwrap().iter())
        .map(|r| f(&r["untraced_mean_us"]))
        .collect();
    means.sort_by(f64::total_cmp);
    let range = (means[1] - means[0]) / ((means[0] + means[1]) / 2.0) * 100.0;
    assert!(
        (f(&c["untraced_range_pct"]) - range).abs() < 1e-6,
        "{c} vs {means:?}"
    );
}

#[test]
fn trace_json_matches_its_schema() {
    let _g = common::need_root();
    let v = netpath(&["trace", "-d", "bridge", "-c", "3", "--json"]);
    common::schema::validate("trace", &v);
    assert!(!v["timelines"].as_array().unwrap().is_empty());
}

#[test]
fn bench_json_matches_its_schema() {
    let _g = common::need_root();
    let v = netpath(&[
        "bench",
        "-d",
        "host",
        "--rounds",
        "1",
        "--duration",
        "1",
        "-n",
        "500",
        "--json",
    ]);
    common::schema::validate("bench", &v);
    // Each wait mode ran its four runs, the empty programs' among them (an attach failure on
    // any hook would have ended the bench).
    let l = &v["drivers"][0]["latency"];
    for mode in ["block", "spin"] {
        for run in ["untraced", "traced", "attached", "empty"] {
            let runs = l[mode][run]["rounds"].as_array().unwrap();
            assert_eq!(runs.len(), 1, "{mode} {run}: {runs:?}");
            assert!(runs[0]["p50_us"].as_f64().unwrap() > 0.0, "{mode} {run}");
            // One round: its median is that round.
            assert_eq!(l[mode][run]["median"], runs[0], "{mode} {run}");
        }
        assert!(
            l[mode]["empty_vs_untraced"]["median"]["p50"]
                .as_f64()
                .unwrap()
                > 0.0
        );
    }
}

/// `--proto udp`: sockperf's UDP ping-pong beside netpath's UDP request/response, the TCP-only
/// throughput part absent and said so.
#[test]
fn bench_udp_json_matches_its_schema() {
    let _g = common::need_root();
    let n = 300;
    let v = netpath(&[
        "bench",
        "-d",
        "bridge",
        "--proto",
        "udp",
        "--rounds",
        "1",
        "--duration",
        "1",
        "-n",
        "300",
        "--journeys",
        "1000",
        "--json",
    ]);
    common::schema::validate("bench", &v);
    assert_eq!(v["proto"], "udp");
    let skipped: Vec<&str> = v["skipped"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s.as_str().unwrap())
        .collect();
    assert!(
        skipped.iter().any(|s| s.starts_with("throughput")),
        "{skipped:?}"
    );
    assert!(
        skipped.iter().any(|s| s.starts_with("journey-count")),
        "{skipped:?}"
    );
    assert!(v["journeys"].is_null(), "{}", v["journeys"]);
    let d = &v["drivers"][0];
    assert_eq!(d["proto"], "udp");
    assert!(d.get("throughput").is_none(), "{}", d["throughput"]);
    // sockperf's UDP ping-pong ran and measured round trips.
    let l = &d["latency"];
    for r in l["sockperf"]["rounds"].as_array().unwrap() {
        assert!(r["p50_us"].as_f64().unwrap() > 0.0, "{r}");
    }
    assert!(l["netpath_vs_sockperf"]["median"]["p50"].as_f64().unwrap() > 0.0);
    // netpath's UDP runs answered every request, traced and untraced.
    let b = &l["block"];
    for r in b["untraced"]["rounds"]
        .as_array()
        .unwrap()
        .iter()
        .chain(b["traced"]["rounds"].as_array().unwrap())
    {
        assert!(r["p50_us"].as_f64().unwrap() > 0.0, "{r}");
    }
    assert!(
        b["hop_events_per_rtt"]["median"].as_f64().unwrap() > 0.0,
        "{l}"
    );
    // The costed traced run: every request answered, every journey completed or counted lost.
    let k = &d["kernel_cost"];
    assert_eq!(k["requests"].as_u64().unwrap(), n);
    assert_eq!(k["round_trips"].as_u64().unwrap(), n);
    let lost: u64 = k["losses"]
        .as_object()
        .unwrap()
        .values()
        .map(|c| c.as_u64().unwrap())
        .sum();
    let sent = k["journeys_sent"].as_u64().unwrap();
    assert_eq!(sent, 2 * n);
    assert!(
        k["journeys_completed"].as_u64().unwrap() + lost >= sent,
        "journeys neither completed nor counted lost: {k}"
    );
    assert!(k["ns_per_rtt"].as_f64().unwrap() > 0.0, "{k}");
}

/// A bar per driver and phase on a terminal (a pty from `script`), nothing on a pipe.
#[test]
fn progress_bars_on_a_terminal_only() {
    let _g = common::need_root();
    let args = "compare -d host -n 300 --warmup 20 --rounds 2 --bulk 200ms --burst 0";
    let tty = Command::new("script")
        .args([
            "-qec",
            &format!("{} {args}", env!("CARGO_BIN_EXE_netpath")),
            "/dev/null",
        ])
        .output()
        .expect("script (util-linux)");
    assert!(tty.status.success());
    let tty = String::from_utf8_lossy(&tty.stdout);
    for phase in ["interleaved round 1/2", "interleaved round 2/2"] {
        assert!(
            tty.contains(phase),
            "no `{phase}` bar on a terminal:\n{tty}"
        );
    }
    let piped = Command::new(env!("CARGO_BIN_EXE_netpath"))
        .args(args.split(' '))
        .output()
        .unwrap();
    assert!(piped.status.success());
    let err = String::from_utf8_lossy(&piped.stderr);
    assert!(!err.contains("interleaved round"), "a bar on a pipe: {err}");
    assert!(String::from_utf8_lossy(&piped.stdout).contains("host"));
}

/// compare ends with the answer (and its JSON begins with it): a row per driver, every
/// driver against its reference (host for bridge, bridge for the others) with a ratio and its
/// 95% interval from the rounds, the hops that make the difference adding up to the hops'
/// difference, the claims judged, the check over every driver.
#[test]
fn compare_summary_pairs_each_driver_with_its_reference_and_an_interval() {
    let _g = common::need_root();
    let v = netpath(&common::latency_compare(
        "host,bridge,overlay",
        &["-n", "200", "--warmup", "20", "--rounds", "3", "--json"],
    ));
    common::schema::validate("compare", &v);
    let s = &v["summary"];
    let rows: Vec<&str> = s["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["driver"].as_str().unwrap())
        .collect();
    assert_eq!(rows, ["host", "bridge", "overlay"]);
    for r in s["rows"].as_array().unwrap() {
        // The default mode: spin rounds and blocking rounds beside them.
        assert!(r["spin_p50_us"]["median"].as_f64().unwrap() > 0.0, "{r}");
        assert!(r["block_p50_us"]["median"].as_f64().unwrap() > 0.0, "{r}");
        assert!(r["check"]["within_tolerance"].is_boolean(), "{r}");
    }
    assert_eq!(s["check"]["checked"], 3, "{}", s["check"]);
    let claims: Vec<&str> = (s["claims"].as_array().unwrap().iter())
        .map(|c| c["verdict"].as_str().unwrap())
        .collect();
    assert_eq!(claims.len(), 6);
    // veth, bridge over host, the two overlay claims: judged; the proxy's two: not measured.
    assert!(
        claims[..4].iter().all(|v| *v != "cannot-be-measured"),
        "{claims:?}"
    );
    assert!(
        claims[4..].iter().all(|v| *v == "cannot-be-measured"),
        "{claims:?}"
    );
    let pairs: Vec<(&str, &str)> = s["pairs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            (
                p["driver"].as_str().unwrap(),
                p["reference"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(pairs, [("bridge", "host"), ("overlay", "bridge")], "{s}");
    for p in s["pairs"].as_array().unwrap() {
        let f = |k: &str| p[k].as_f64().unwrap_or_else(|| panic!("no {k}: {p}"));
        let (r, lo, hi) = (f("ratio"), f("ci_low"), f("ci_high"));
        assert!(lo <= r && r <= hi && lo > 0.0, "{p}");
        // Every round opens with a sweep of the untraced runs: each gives a ratio.
        assert_eq!(p["rounds"].as_u64(), Some(3), "{p}");
        assert_eq!(p["not_a_result"], lo <= 1.0 && 1.0 <= hi, "{p}");
        // The named hops and the rest are the hops' difference.
        let named: f64 = (p["hops"].as_array().unwrap().iter())
            .map(|h| h["delta_us"].as_f64().unwrap())
            .sum();
        assert!(!p["hops"].as_array().unwrap().is_empty(), "{p}");
        assert!(
            (named + f("rest_us") - f("hops_delta_us")).abs() < 1e-6,
            "{p}"
        );
        assert!(
            p["sentence"]
                .as_str()
                .unwrap()
                .contains(p["driver"].as_str().unwrap())
        );
    }
}
