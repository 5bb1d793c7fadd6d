//! `netpath validate`: an exactly known delay, held by a TC program on one lab device, comes
//! back at the hop that device's receive leads into. Behaviour, not timing: the injected hop
//! moves most, by at least half the delay; a second D = 0 moves no hop by more than a few µs.
//! Host only: under qemu's emulation a delay of microseconds says nothing (the VM tests load
//! the delay program in `tracking.rs`).
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
}
