//! `netpath validate`: an exactly known delay, held by a TC program on one lab device, comes
//! back at the hop that device's receive leads into. Behaviour, not timing: the injected hop
//! moves most, by at least half the delay; a second D = 0 moves no hop by more than a few µs.
//! Host only: under qemu's emulation a delay of microseconds says nothing (the VM tests load
//! the delay program in `tracking.rs`).
//!
//! The netfilter case (`--rules`/`--chain`): the part is where the chain is, reads the rules
//! in and out, and the case's own verdict passes; nothing is left.
mod common;

use serde_json::Value;

fn f(v: &Value) -> f64 {
    v.as_f64().unwrap()
}

#[test]
fn injected_delays_come_back_at_their_hop() {
    let _g = common::need_root();
    let before = netpath::lab::list_netpath_netns().unwrap();
    let v = common::run_json(&[
        "validate",
        "-d",
        "bridge,overlay",
        "--delays",
        "0,0,20",
        "--rounds",
        "2",
        "-n",
        "2000",
        "--format",
        "json",
    ]);
    common::schema::validate("validate", &v);
    let cases = v["cases"].as_array().unwrap();
    assert_eq!(cases.len(), 6, "two drivers × three delays");
    for driver in ["bridge", "overlay"] {
        let of: Vec<&Value> = cases.iter().filter(|c| c["driver"] == driver).collect();
        let (zero, d20) = (of[1], of[2]);
        println!("{driver}: D=0 {zero}\n{driver}: D=20 {d20}");
        assert_eq!(d20["hop"], "receiver-stack");
        assert_eq!(d20["dir"], "request");
        // The program held each request at least the delay asked for, and held some.
        assert!(d20["held"].as_u64().unwrap() > 0, "{d20}");
        assert!(f(&d20["held_us"]) >= 20.0, "{d20}");
        let recovered = f(&d20["recovered_us"]);
        assert!(
            recovered >= 10.0,
            "{driver}: recovered {recovered} of 20 µs"
        );
        assert!(
            f(&d20["largest_other_us"]).abs() < recovered,
            "{driver}: {} moved more than the injected hop",
            d20["largest_other_hop"]
        );
        // Nothing held, nothing moves (beyond the noise of two runs).
        assert_eq!(zero["held"], 0, "{zero}");
        for k in ["recovered_us", "largest_other_us"] {
            assert!(
                f(&zero[k]).abs() < 3.0,
                "{driver}: D=0 moved {k} {}",
                zero[k]
            );
        }
    }
    assert!(common::leftovers(&before).is_empty());
}

/// Rules each case adds: about 3 µs a packet here, so the tolerance (10% + 0.2 µs) stands
/// above how far the untraced change itself wanders between rounds (200 rules, about 1 µs,
/// once recovered +0.51 of an untraced +1.01 whose rounds ranged +0.55 to +1.11).
const RULES: u32 = 600;

/// One `validate --rules RULES --chain <chain> -d bridge` run, checked: its one case.
fn rules_case(chain: &str, part: &str, hook: &str, seen: &[&str]) {
    let rounds = 3;
    let v = common::run_json(&[
        "validate",
        "-d",
        "bridge",
        "--rules",
        &RULES.to_string(),
        "--chain",
        chain,
        "--rounds",
        &rounds.to_string(),
        "-n",
        "3000",
        "--warmup",
        "300",
        "--format",
        "json",
    ]);
    common::schema::validate("validate", &v);
    assert_eq!(v["chain"], chain);
    assert!(v.get("at").is_none(), "no delay was held: {v}");
    assert!(v["cases"].as_array().unwrap().is_empty(), "no delay cases");
    let cases = v["rule_cases"].as_array().unwrap();
    assert_eq!(cases.len(), 1, "one driver, one count besides 0: {v}");
    let c = &cases[0];
    println!("{chain}: {c}");
    let name = c["part"].as_str().unwrap();
    assert!(
        name.starts_with("np_val_") && name.ends_with(part),
        "{name}"
    );
    assert_eq!(c["hook"], hook);
    assert_eq!(c["rules"], RULES);
    // The placement read the rules in every traced run with them, and none in the
    // reference's (the same empty chain: the part is there on both sides).
    assert_eq!(
        c["part_rules"],
        serde_json::json!(vec![RULES; rounds]),
        "{c}"
    );
    assert_eq!(
        c["reference_rules"],
        serde_json::json!(vec![0; rounds]),
        "{c}"
    );
    assert_eq!(c["seen"], serde_json::json!(seen), "{c}");
    assert!(f(&c["recovered_us"]) > 0.0, "{c}");
    assert!(
        c["verdict"]["pass"].as_bool().unwrap(),
        "{chain}: {}",
        c["verdict"]["failed"]
    );
}

#[test]
fn injected_rules_come_back_at_their_part() {
    let _g = common::need_root();
    let before = netpath::lab::list_netpath_netns().unwrap();
    rules_case(
        "client-output",
        "/output",
        "OUTPUT",
        &["request:sender-stack"],
    );
    rules_case(
        "server-input",
        "/input",
        "INPUT",
        &["request:receiver-stack"],
    );
    // The node's FORWARD sees bridged packets only through br_netfilter (a new namespace
    // starts with bridge-nf-call-iptables on while the module is loaded).
    if std::path::Path::new("/proc/sys/net/bridge/bridge-nf-call-iptables").exists() {
        rules_case(
            "node-forward",
            "/forward",
            "FORWARD",
            &["request:bridge", "response:bridge"],
        );
    }
    assert!(common::leftovers(&before).is_empty());
    // No table of validate's is left in netpath's own namespace either.
    let tables = std::process::Command::new("nft")
        .args(["list", "tables"])
        .output()
        .unwrap();
    let tables = String::from_utf8_lossy(&tables.stdout);
    assert!(!tables.contains("np_val_"), "{tables}");
}

#[test]
fn validate_refuses_what_it_cannot_do() {
    let _g = common::need_root();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_netpath"))
        .args([
            "validate",
            "-d",
            "macvlan",
            "--at",
            "bridge-port",
            "-n",
            "10",
        ])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains("has no") && err.contains("--at server"),
        "{err}"
    );
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_netpath"))
        .args(["validate", "-d", "bridge", "--delays", "0,80", "-n", "10"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("--delays") && err.contains("0 to 50"),
        "{err}"
    );
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    // No node, no node FORWARD: one line, and the lab gone.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_netpath"))
        .args([
            "validate",
            "-d",
            "none",
            "--chain",
            "node-forward",
            "-n",
            "10",
        ])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success()
            && err.contains("--chain node-forward is not available")
            && err.contains("no node namespace"),
        "{err}"
    );
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    // One case at a time: rules or delays.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_netpath"))
        .args(["validate", "--rules", "200", "--delays", "0,5", "-n", "10"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("--delays") && err.contains("cannot be used"),
        "{err}"
    );
}
