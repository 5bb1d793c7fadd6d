//! `netpath tune`: every lab knob applied inside a real lab, read back from the kernel,
//! restored and gone with the lab; the JSON of real runs (both settings' results, what the
//! labs read back, the deltas) against schemas/tune.json; Nagle seen in segment counts;
//! the placements the cpus knob asked for seen in where the threads ran; bad knobs refused in
//! one line with nothing left behind, and an interrupted run leaving nothing either.
//!
//!     sudo -E cargo test -p netpath --test tune -- --test-threads=1

use std::collections::BTreeSet;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use netpath::driver::Driver;
use netpath::harness::{self, RrConfig, WaitMode};
use netpath::tune::{devices, knobs};
use serde_json::Value;

mod common;
use common::leftovers::{assert_nothing_left, snapshot};
use common::{need_root, root_links};

const NETPATH: &str = env!("CARGO_BIN_EXE_netpath");

/// Links of netpath's in the host's namespace (Docker's come and go with other users' work).
fn our_root_links() -> BTreeSet<String> {
    root_links()
        .into_iter()
        .filter(|l| l.starts_with("np"))
        .collect()
}

/// Applies `knob`'s setting A to a fresh bridge lab (after `pre`'s A settings): every device
/// it acts on reads back A; after restore each reads back what it read before. `check` sees
/// the lab with the knob applied (true) and restored (false).
fn apply_and_restore(pre: &[&str], knob: &str, check: impl Fn(&netpath::path::NetPath, bool)) {
    let before_links = our_root_links();
    let spec = knobs::parse(knob).unwrap();
    let mut lab = netpath::lab::build(Driver::Bridge).unwrap();
    let mut pre_applied = Vec::new();
    for p in pre {
        let ps = knobs::parse(p).unwrap();
        let ap = devices::apply(&mut lab, &ps, &ps.a).unwrap();
        pre_applied.push((ps, ap));
    }
    let mut ap = devices::apply(&mut lab, &spec, &spec.a).unwrap();
    assert!(!ap.after.is_empty(), "{knob}: nothing read back");
    assert_eq!(ap.before.len(), ap.after.len(), "{knob}: {ap:?}");
    // A fresh read, device by device, shows the setting (not the values apply kept).
    for d in devices::targets(&lab, &spec, &spec.a).unwrap() {
        for r in devices::read(&lab, spec.knob, &d).unwrap() {
            assert!(
                ap.after.contains(&r),
                "{knob}: {} is not what apply read back",
                r.line()
            );
        }
    }
    check(&lab, true);
    let restored = devices::restore(&mut lab, spec.knob, &mut ap).unwrap();
    let mut was = ap.before.clone();
    let mut now = restored;
    was.sort_by(|x, y| (&x.netns, &x.device, &x.what).cmp(&(&y.netns, &y.device, &y.what)));
    now.sort_by(|x, y| (&x.netns, &x.device, &x.what).cmp(&(&y.netns, &y.device, &y.what)));
    assert_eq!(
        was, now,
        "{knob}: restore did not bring back what was there"
    );
    check(&lab, false);
    for (ps, mut ap) in pre_applied.into_iter().rev() {
        devices::restore(&mut lab, ps.knob, &mut ap).unwrap();
    }
    let id = lab.run_id.clone();
    lab.teardown().unwrap();
    assert!(
        common::netns_files(&id).is_empty(),
        "{:?}",
        common::netns_files(&id)
    );
    assert_eq!(
        our_root_links(),
        before_links,
        "a lab must not touch the host's namespace"
    );
}

#[test]
fn gro_on_veth_gives_it_napi_and_is_restored() {
    let _g = need_root();
    // GRO on a veth enables its NAPI: a busy-polling socket then learns the NAPI id of the
    // device that delivered its data; without GRO it has none (SO_INCOMING_NAPI_ID 0). Only
    // for what the veth finds eligible: TCP from a sender with TSO goes to the backlog all
    // the same (veth_skb_is_eligible_for_gro), so TSO is off here.
    apply_and_restore(&["tso=off,on"], "gro=on,off", |lab, applied| {
        let rr = RrConfig {
            wait: WaitMode::BusyPoll,
            ..common::small_rr()
        };
        let r = harness::run_rr(lab, &rr, &harness::NoPhases).unwrap();
        let (c, s) = r.napi_ids.unwrap();
        if applied {
            assert!(c != 0 && s != 0, "GRO on, yet no NAPI id: {c} {s}");
        } else {
            assert_eq!((c, s), (0, 0), "GRO restored off, yet a NAPI id");
        }
    });
}

#[test]
fn tso_gso_and_qdisc_are_applied_and_restored() {
    let _g = need_root();
    apply_and_restore(&[], "tso=off,on", |_, _| {});
    apply_and_restore(&[], "gso=off,on", |_, _| {});
    apply_and_restore(&[], "qdisc=pfifo_fast,noqueue", |lab, applied| {
        // Netlink's own listing of the qdiscs, per device of the path.
        for d in lab.devices.iter().filter(|d| d.name != "lo") {
            let ns = lab
                .namespaces()
                .into_iter()
                .find(|n| n.name == d.netns)
                .unwrap();
            let q = ns
                .run(|| netpath::sys::nl::Nl::new()?.root_qdisc(d.ifindex))
                .unwrap();
            let want = if applied { "pfifo_fast" } else { "noqueue" };
            assert_eq!(q.as_deref(), Some(want), "{}@{}", d.name, d.netns);
        }
    });
}

#[test]
fn mtu_and_rps_are_applied_and_restored() {
    let _g = need_root();
    // sysfs of each namespace (the run context's own reader) sees the MTU and the masks.
    apply_and_restore(&[], "mtu=9000,1500", |lab, applied| {
        let want = if applied { 9000 } else { 1500 };
        for d in harness::device_context(lab).unwrap() {
            if d.name != "lo" {
                assert_eq!(d.mtu, want, "{}@{}", d.name, d.netns);
            }
        }
    });
    apply_and_restore(&[], "rps=all,off", |lab, applied| {
        let ctx = harness::device_context(lab).unwrap();
        let ends: Vec<_> = ctx
            .iter()
            .filter(|d| d.netns == lab.client_ns.name || d.netns == lab.server_ns.name)
            .filter(|d| d.name != "lo")
            .collect();
        assert_eq!(ends.len(), 2, "{ctx:?}");
        for d in ends {
            let m = u64::from_str_radix(&d.rps_cpus[0].replace(',', ""), 16).unwrap();
            assert_eq!(m != 0, applied, "{}@{}: {:?}", d.name, d.netns, d.rps_cpus);
        }
    });
}

fn tune_json(args: &str) -> Value {
    let out = Command::new(NETPATH)
        .arg("tune")
        .args(args.split_whitespace())
        .arg("--json")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "tune {args}: {err}");
    let v: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {err}"));
    common::schema::validate("tune", &v);
    v
}

fn delta<'a>(v: &'a Value, name: &str) -> &'a Value {
    if name == "bulk" {
        return &v["bulk"];
    }
    v["rtt"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["name"] == name)
        .unwrap_or_else(|| panic!("no delta {name}: {}", v["rtt"]))
}

#[test]
fn tune_json_carries_both_settings_and_the_deltas() {
    let _g = need_root();
    let before = snapshot();
    let v =
        tune_json("-d bridge --knob mtu=9000,1500 --rounds 2 -n 300 --warmup 20 --bulk-secs 0.3");
    for (side, mtu) in [("a", 9000), ("b", 1500)] {
        let s = &v[side];
        let mtu_s = mtu.to_string();
        assert_eq!(s["label"], format!("mtu={mtu}"));
        let after = s["applied"]["after"].as_array().unwrap();
        assert!(after.len() >= 5, "every link of the bridge path: {after:?}");
        assert!(
            after
                .iter()
                .all(|r| r["value"].as_str() == Some(mtu_s.as_str())),
            "{after:?}"
        );
        assert!(
            s["restored"]
                .as_array()
                .unwrap()
                .iter()
                .all(|r| r["value"] == "1500")
        );
        assert_eq!(s["report"]["context"]["client_mtu"], mtu);
        assert_eq!(s["report"]["round_detail"].as_array().unwrap().len(), 2);
        assert_eq!(
            s["report"]["bulk"]["per_round"].as_array().unwrap().len(),
            2
        );
    }
    // Paired: two rounds a side, the delta the median of the per-round deltas.
    for name in ["RTT p50", "RTT p99", "bulk", "RTT p50 traced"] {
        let d = delta(&v, name);
        assert_eq!(
            (d["a_rounds"].as_u64(), d["b_rounds"].as_u64()),
            (Some(2), Some(2))
        );
        assert!(d["per_round"].is_object(), "{d}");
    }
    let a = &v["a"]["report"]["rounds"];
    let b = &v["b"]["report"]["rounds"];
    let per: Vec<f64> = (0..2)
        .map(|i| a[i]["p50_us"].as_f64().unwrap() - b[i]["p50_us"].as_f64().unwrap())
        .collect();
    let d = delta(&v, "RTT p50")["delta"].as_f64().unwrap();
    assert!((d - (per[0] + per[1]) / 2.0).abs() < 1e-6, "{d} vs {per:?}");
    // Every hop figure has a value per round on each side (each round's traced table).
    let hops = v["hops_p50"].as_array().unwrap();
    assert!(hops.len() >= 10, "{hops:?}");
    assert!(
        hops.iter()
            .all(|h| h["a_rounds"] == 2 && h["b_rounds"] == 2),
        "{hops:?}"
    );
    // The brief line (bulk, untraced RTT p50), then one line per other figure that is a result.
    let results = ["rtt", "hops_p50", "one_way", "passes"]
        .iter()
        .flat_map(|k| v[*k].as_array().unwrap())
        .filter(|d| d["name"] != "RTT p50")
        .filter(|d| d["within_noise"] == false && d["delta"].as_f64() != Some(0.0))
        .count();
    assert_eq!(v["verdicts"].as_array().unwrap().len(), 1 + results);
    assert!(
        v["verdicts"][0]
            .as_str()
            .unwrap()
            .starts_with("mtu=9000 vs mtu=1500: ")
    );
    assert_nothing_left(&before);
}

/// `--proto udp`: both sides measure datagram request/response (journeys matched per side),
/// no bulk (TCP only) and no TCP segment counts.
#[test]
fn tune_proto_udp_measures_datagrams_on_both_sides() {
    let _g = need_root();
    let before = snapshot();
    let v = tune_json("-d bridge --knob gro=on,off --proto udp --rounds 1 -n 200 --warmup 20");
    for side in ["a", "b"] {
        let r = &v[side]["report"];
        assert_eq!(r["proto"], "udp", "{side}");
        assert_eq!(r["traced"]["count"], 200, "{side}");
        assert!(r["lost"]["completed"].as_u64().unwrap() > 0, "{side}");
        assert!(r["bulk"].is_null(), "{side}: {}", r["bulk"]);
        assert!(v[side]["segments_per_request"].is_null(), "{side}");
        let port = netpath::lab::LAB_PORT.to_string();
        let tl = r["timelines"].as_array().unwrap();
        assert!(
            tl.iter()
                .all(|t| t["tuple"].as_str().unwrap().contains(&port)),
            "{side}: {tl:?}"
        );
    }
    assert_nothing_left(&before);
}

#[test]
fn nodelay_off_waits_for_the_ack_nagle_holds_the_second_write_for() {
    let _g = need_root();
    // Each request goes out in two writes. With Nagle (nodelay off) the second waits until
    // the first is acknowledged, and the server, with nothing to send yet, acknowledges it
    // in a segment of its own: one more segment from the server per request. Counts, not time.
    let v = tune_json("-d bridge --knob nodelay=off,on --rounds 2 -n 40 --warmup 4");
    let server = |s: &str| v[s]["segments_per_request"][1].as_f64().unwrap();
    let (nagle, nodelay) = (server("a"), server("b"));
    assert!(
        nagle - nodelay > 0.5,
        "server segments per request: nodelay off {nagle:.2}, on {nodelay:.2}"
    );
    // The client wrote two segments per request either way.
    for s in ["a", "b"] {
        let c = v[s]["segments_per_request"][0].as_f64().unwrap();
        assert!(c >= 2.0, "{s}: client {c:.2} segments per request");
    }
}

#[test]
fn cpus_and_wait_are_per_side_harness_settings() {
    let _g = need_root();
    let v =
        tune_json("-d bridge --knob cpus=same,split --rounds 2 -n 300 --warmup 20 --bulk-secs 0");
    let cpus = |s: &str, who: &str| -> Vec<String> {
        let m = v[s]["report"]["placement"][who].as_object().unwrap();
        m.keys().cloned().collect()
    };
    // Where the threads ran (the CPU of each sampled point), as each side asked.
    assert_eq!(cpus("a", "client").len(), 1);
    assert_eq!(cpus("a", "client"), cpus("a", "server"));
    assert_eq!(cpus("b", "client").len(), 1);
    assert_ne!(cpus("b", "client"), cpus("b", "server"));
    assert_eq!(
        (
            v["a"]["report"]["cpus"].as_str(),
            v["b"]["report"]["cpus"].as_str()
        ),
        (Some("same"), Some("split"))
    );
    let v =
        tune_json("-d bridge --knob wait=block,spin --rounds 2 -n 300 --warmup 20 --bulk-secs 0");
    assert_eq!(
        (
            v["a"]["report"]["wait"].as_str(),
            v["b"]["report"]["wait"].as_str()
        ),
        (Some("block"), Some("spin"))
    );
    // Blocking receives sleep: their journeys end at a wakeup.
    let hops = v["a"]["report"]["hops"].as_array().unwrap();
    assert!(hops.iter().any(|h| h["hop"] == "wakeup"), "{hops:?}");
}

#[test]
fn conntrack_notrack_keeps_the_path_out_of_the_node_conntrack_table() {
    let _g = need_root();
    let before = snapshot();
    let v = tune_json(
        "-d host-egress --knob conntrack=notrack,track --rounds 2 -n 200 --warmup 10 --bulk-secs 0",
    );
    let count = |s: &str, when: &str| -> u64 {
        let rows = if when == "restored" {
            v[s]["restored"].as_array().unwrap()
        } else {
            v[s]["applied"][when].as_array().unwrap()
        };
        let r = rows
            .iter()
            .find(|r| r["what"] == "nf_conntrack_count")
            .unwrap();
        r["value"].as_str().unwrap().parse().unwrap()
    };
    let rules = |s: &str| {
        v[s]["applied"]["after"][0]["value"]
            .as_str()
            .unwrap()
            .to_string()
    };
    assert_eq!((rules("a"), rules("b")), ("4".to_string(), "0".to_string()));
    // The rounds' connections (and the bulk-less run's own) are tracked only without notrack.
    assert_eq!(
        count("a", "restored"),
        count("a", "after"),
        "{}",
        v["a"]["restored"]
    );
    assert!(
        count("b", "restored") > count("b", "after"),
        "{}",
        v["b"]["restored"]
    );
    // Restored: the notrack chains are gone.
    let left = v["a"]["restored"].as_array().unwrap();
    assert!(
        left.iter()
            .any(|r| r["what"] == "notrack rules" && r["value"] == "0"),
        "{left:?}"
    );
    assert_nothing_left(&before);
}

#[test]
fn proxy_is_published_proxy_against_published_nat() {
    let _g = need_root();
    let before = snapshot();
    let v =
        tune_json("-d published-proxy --knob proxy --rounds 2 -n 300 --warmup 20 --bulk-secs 0");
    assert_eq!(
        (v["a"]["driver"].as_str(), v["b"]["driver"].as_str()),
        (Some("published-proxy"), Some("published-nat"))
    );
    let has_proxy = |s: &str| {
        v[s]["report"]["hops"]
            .as_array()
            .unwrap()
            .iter()
            .any(|h| h["hop"] == "proxy")
    };
    assert!(has_proxy("a") && !has_proxy("b"));
    // The proxy hop is all A's: B has no value for it in any round.
    let p = v["hops_p50"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["name"] == "proxy (request)")
        .unwrap();
    assert_eq!(
        (p["a_rounds"].as_u64(), p["b_rounds"].as_u64()),
        (Some(2), Some(0))
    );
    assert_nothing_left(&before);
}

#[test]
fn bad_knobs_are_refused_in_one_line_with_nothing_left() {
    let _g = need_root();
    let before = snapshot();
    for (args, says) in [
        ("--knob turbo", "unknown knob \"turbo\""),
        ("--knob mtu=12,1500", "68 to 65535"),
        ("--knob gro=on,on", "both settings are the same"),
        ("-d host --knob rps", "does not apply to -d host"),
        ("-d overlay --knob mtu", "VXLAN"),
        ("-d bridge --knob proxy", "published-proxy"),
        ("-d bridge --knob conntrack", "gateway and host-egress"),
        ("--knob rfs", "whole host"),
        ("--knob busy_poll", "whole host"),
        ("--knob cpus=100000,same", "CPU 100000"),
        ("--knob nodelay --proto udp", "TCP_NODELAY"),
        (
            "-d published-nat --knob proxy --proto udp",
            "docker-proxy relays UDP",
        ),
    ] {
        let tune: Vec<&str> = ["tune"]
            .into_iter()
            .chain(args.split_whitespace())
            .collect();
        let err = common::refused(&tune);
        assert!(err.contains(says), "{args}: {err}");
    }
    assert_nothing_left(&before);
}

#[test]
fn an_interrupted_tune_leaves_nothing() {
    let _g = need_root();
    let before = snapshot();
    let ns_before: Vec<String> = netns_now();
    let mut child = Command::new(NETPATH)
        .args([
            "tune",
            "-d",
            "bridge",
            "--knob",
            "rps=all,off",
            "--rounds",
            "50",
            "-n",
            "2000",
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Once both labs exist (the knob applied), Ctrl-C.
    let deadline = Instant::now() + Duration::from_secs(60);
    while netns_now()
        .iter()
        .filter(|n| !ns_before.contains(n))
        .count()
        < 6
    {
        assert!(Instant::now() < deadline, "the two labs never appeared");
        std::thread::sleep(Duration::from_millis(50));
    }
    std::thread::sleep(Duration::from_millis(500));
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGINT,
    )
    .unwrap();
    let st = child.wait().unwrap();
    assert!(!st.success());
    assert_nothing_left(&before);
}

fn netns_now() -> Vec<String> {
    std::fs::read_dir("/run/netns")
        .map(|rd| {
            rd.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default()
}
