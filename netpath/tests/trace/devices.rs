//! The device drivers beside veth: ipvlan and netkit cross their own hop (or, on a kernel
//! without them, are refused in one line or skipped with one), and one `compare` weighs
//! veth against macvlan, ipvlan and netkit, its tables printed past the capture.

use std::process::Command;

use netpath::{driver::Driver, lab};

use super::expected::assert_wakeup_parts;
use super::{common, run_on_its_path};

/// ipvlan and netkit (the 6.12 VM has both): their own device hop each way, counted like
/// the other drivers, nothing left behind. On a kernel without them (this host), what a
/// user sees: asked alone, one line and a failure; asked with others, one skip line.
#[test]
fn ipvlan_and_netkit_cross_their_hops_or_are_skipped() {
    let _g = common::need_root();
    let before = lab::list_netpath_netns().unwrap();
    for driver in [Driver::Ipvlan, Driver::Netkit] {
        let name = driver.name();
        if let Some(why) = common::unavailable_here(driver) {
            eprintln!("{name} not on this kernel, checking its skip line: {why}");
            let kind = format!("cannot create {name} devices");
            assert!(why.contains(&kind), "{why}");
            let err = common::one_line_error(&["compare", "-d", name, "-n", "10", "--bulk", "0"]);
            assert!(err.contains(&kind), "{err}");
            let out = Command::new(env!("CARGO_BIN_EXE_netpath"))
                .args(["compare", "-d", &format!("host,{name}"), "-n", "20"])
                .args(["--warmup", "5", "--rounds", "1", "--bulk", "0", "--json"])
                .output()
                .unwrap();
            let err = String::from_utf8_lossy(&out.stderr);
            assert!(out.status.success(), "{err}");
            let skip: Vec<&str> = err.lines().filter(|l| l.contains(&kind)).collect();
            assert_eq!(skip, [format!("skipped {name}: {why}")], "{err}");
            let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
            assert_eq!(v["drivers"].as_array().unwrap().len(), 1, "host only");
        } else {
            let r = run_on_its_path(driver);
            assert_wakeup_parts(&r);
            let kind = |k: &str| r.devices.iter().filter(|d| d.kind == k).count();
            assert_eq!(kind(name), 2, "{:?}", r.devices);
        }
        assert_eq!(common::leftovers(&before), Vec::<String>::new());
    }
}

/// veth (bridge) vs macvlan vs ipvlan vs netkit in one `compare` run: each row shows its own
/// device hop; the tables go to the console past the test harness's capture (in the VM, the
/// serial console) so the figures can be read from the run. Rows this kernel cannot build
/// are skipped with their line.
#[test]
fn compare_weighs_veth_against_macvlan_ipvlan_and_netkit() {
    let _g = common::need_root();
    let before = lab::list_netpath_netns().unwrap();
    let n = std::env::var("NETPATH_DEVICES_N").unwrap_or_else(|_| "2000".into());
    let out = Command::new(env!("CARGO_BIN_EXE_netpath"))
        .args([
            "compare",
            "-v",
            "-d",
            "bridge,macvlan,ipvlan,netkit",
            "-n",
            &n,
        ])
        .args(["--warmup", "200", "--rounds", "3"])
        .args(common::LATENCY_ONLY)
        .output()
        .unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    {
        use std::io::Write;
        let mut o = std::io::stdout().lock();
        let _ = writeln!(o, "{stdout}{stderr}");
    }
    assert!(out.status.success(), "{stderr}");
    for (driver, hop) in [
        (Driver::Bridge, "veth"),
        (Driver::Macvlan, "macvlan"),
        (Driver::Ipvlan, "ipvlan"),
        (Driver::Netkit, "netkit"),
    ] {
        let name = driver.name();
        // With -v each driver's block opens with `== driver <driver>  (backend …)`.
        let header = format!("== driver {name}  (");
        if stderr.contains(&format!("skipped {name}: ")) {
            assert!(!stdout.contains(&header), "{stdout}");
            continue;
        }
        let table = stdout
            .split("\n== ")
            .find(|t| t.starts_with(&format!("driver {name}  (")))
            .unwrap_or_else(|| panic!("no {name} block: {stdout}"));
        assert!(
            table.lines().any(|l| l.trim_start().starts_with(hop)),
            "{name}: no {hop} hop: {table}"
        );
    }
    assert_eq!(common::leftovers(&before), Vec::<String>::new());
}
