//! `--proto udp|icmp`: datagram request/response and ICMP echo through the lab, followed hop by
//! hop like TCP.
//! Privileged: builds labs and loads the programs. Run as root, one binary at a time:
//!
//!     cargo test -p netpath --test protocols -- --test-threads=1
use std::process::Command;

use netpath::{
    driver::Driver,
    harness::Proto,
    lab,
    measure::compare,
    probe::tracer::{Tracer, TracerOptions},
    record::DriverReport,
};

mod common;
use common::{leftovers, need_root};

const N: u64 = 300;

/// Whether this kernel has the socket tracepoints a datagram's journey ends at (6.3+; TCP's
/// `tcp_sendmsg_locked` from 6.13 is not needed): without them a datagram's receive cannot be
/// matched, and netpath refuses `--proto udp|icmp` in one line. The 6.12 VM measures them.
fn socket_bounds() -> bool {
    ["sock/sock_send_length", "sock/sock_recv_length"]
        .iter()
        .all(|t| std::path::Path::new(&format!("/sys/kernel/tracing/events/{t}")).exists())
}

/// The run's report; `None` where the kernel cannot measure `proto` (refused in one line,
/// checked here).
fn run(driver: Driver, proto: Proto) -> Option<DriverReport> {
    let backend = common::backend();
    let mut opts = common::one_traced_run(driver, N, 50);
    opts.protos = vec![proto];
    opts.tracer = TracerOptions {
        sample_every: 1,
        detail: true,
        proto,
        ..TracerOptions::default()
    };
    opts.keep_timelines = usize::MAX;
    netpath::sys::ensure_tracefs();
    let mut tracer = match Tracer::load(backend, &opts.tracer) {
        Ok(t) => t,
        Err(e) if !socket_bounds() => {
            let msg = format!("{e:#}");
            assert!(msg.contains("needs the socket tracepoints"), "{msg}");
            eprintln!("refused on this kernel, as it should be: {msg}");
            return None;
        }
        Err(e) => panic!("load programs: {e:#}"),
    };
    Some(compare::run_driver(&mut tracer, driver, &opts).expect("run"))
}

/// The data path's hops of a UDP or ICMP journey in order, per direction (tracepoint points,
/// the wakeup parts left out: see `common::dgram`). An echo request ends in the target's
/// receiver-stack, where the kernel turns it into the reply; the reply's sender-stack is empty.
fn dgram_order(driver: Driver) -> [&'static str; 2] {
    match driver {
        Driver::Bridge => ["sender-stack veth backlog bridge veth backlog receiver-stack"; 2],
        Driver::Overlay => {
            ["sender-stack veth backlog bridge vxlan-encap underlay backlog vxlan-decap bridge \
             veth backlog receiver-stack"; 2]
        }
        Driver::Egress => [
            "sender-stack veth backlog bridge forward uplink backlog receiver-stack",
            "sender-stack uplink backlog forward bridge veth backlog receiver-stack",
        ],
        d => panic!("no datagram order for {d}"),
    }
}

/// Runs `proto` on bridge, overlay and egress; checks in each report what every datagram run
/// shows (the protocol, every journey accounted for, the hops in order), then `more`. Stops
/// where this kernel refuses `proto` (`run` checked the refusal).
fn on_each_driver(proto: Proto, more: impl Fn(&DriverReport, Driver)) {
    for d in [Driver::Bridge, Driver::Overlay, Driver::Egress] {
        let Some(r) = run(d, proto) else {
            return;
        };
        assert_eq!(r.proto, proto);
        common::dgram::assert_accounted(&r, N);
        common::dgram::assert_order(&r, d.name(), dgram_order(d), lab::LAB_PORT);
        more(&r, d);
    }
}

#[test]
fn udp_journeys_are_matched_in_hop_order_on_bridge_overlay_and_egress() {
    let _g = need_root();
    let before = lab::list_netpath_netns().unwrap();
    on_each_driver(Proto::Udp, |r, d| {
        // Receive passes and softirq runs are counted for every completed datagram.
        let counted: u64 = r.passes.iter().map(|p| p.packets).sum();
        assert_eq!(counted, r.lost["completed"], "{d}: {:?}", r.passes);
        assert!(
            r.passes.iter().all(|p| p.rx_passes >= 1),
            "{d}: {:?}",
            r.passes
        );
    });
    assert!(leftovers(&before).is_empty(), "{:?}", leftovers(&before));
}

/// ICMP echo: the request ends where the target's kernel makes the reply, the reply starts
/// there; no server thread, so the turnaround is 0 for every round trip. The ping socket's
/// `ping_group_range` is set in the lab's client namespace only, never in this one.
#[test]
fn icmp_echo_journeys_are_matched_in_hop_order_on_bridge_overlay_and_egress() {
    let _g = need_root();
    let before = lab::list_netpath_netns().unwrap();
    let range = netpath::sys::netns::read_sysctl("net.ipv4.ping_group_range").unwrap();
    on_each_driver(Proto::Icmp, |r, d| {
        let turn = r.turnaround.as_ref().expect("turnaround");
        assert_eq!(turn.count, r.one_way["request"].count, "{d}");
        assert_eq!(turn.mean_us, 0.0, "{d}");
        // The reply starts at its first queue: its sender-stack is empty.
        let sender = r
            .hops
            .iter()
            .find(|h| h.at.hop == "sender-stack" && h.at.dir == "response")
            .expect("response sender-stack");
        assert_eq!(sender.at.mean_us, 0.0, "{d}");
    });
    assert_eq!(
        netpath::sys::netns::read_sysctl("net.ipv4.ping_group_range").unwrap(),
        range
    );
    assert!(leftovers(&before).is_empty(), "{:?}", leftovers(&before));
}

/// `trace --proto udp|icmp`: the harness sends that protocol, the kernel filter keeps it, and the JSON says
/// so and validates against the schema.
#[test]
fn trace_proto_follows_datagrams_and_echo() {
    let _g = need_root();
    let before = lab::list_netpath_netns().unwrap();
    for proto in ["udp", "icmp"] {
        trace_one(proto);
    }
    assert!(leftovers(&before).is_empty(), "{:?}", leftovers(&before));
}

fn trace_one(proto: &str) {
    let out = Command::new(env!("CARGO_BIN_EXE_netpath"))
        .args([
            "trace", "-d", "bridge", "--proto", proto, "-c", "6", "--json",
        ])
        .output()
        .expect("run netpath trace");
    if !out.status.success() && !socket_bounds() {
        // Kernels bounded by syscall tracepoints refuse datagrams in one line.
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("needs the socket tracepoints"), "{err}");
        assert_eq!(err.trim().lines().count(), 1, "{err}");
        return;
    }
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    common::schema::validate("trace", &v);
    assert_eq!(v["proto"], proto);
    let tl = v["timelines"].as_array().unwrap();
    assert_eq!(tl.len(), 6);
    for t in tl {
        let hops = common::json_hops(t, "points");
        assert!(
            hops.contains(&"bridge") && hops.contains(&"veth"),
            "{hops:?}"
        );
        // An echo request ends where the target's kernel queues the reply it made.
        let last = t["points"].as_array().unwrap().last().unwrap()["point"].clone();
        if proto == "icmp" && t["dir"] == "request" {
            assert_eq!(last, "echo_reply", "{t}");
        }
        // ICMP has no ports: the tuple names the echo (type, identifier, sequence number).
        if proto == "icmp" {
            let want = if t["dir"] == "request" {
                " icmp echo id="
            } else {
                " icmp echo-reply id="
            };
            let tuple = t["tuple"].as_str().unwrap();
            assert!(tuple.contains(want) && tuple.contains(" seq="), "{tuple}");
        }
    }
    assert_eq!(v["lost"]["ringbuf_lost"], 0);
}
