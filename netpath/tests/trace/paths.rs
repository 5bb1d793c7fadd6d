//! Per-driver hop paths: the bridge's points in order on every backend (fentry where it
//! can), the host's loopback, and every other driver's hops counted, in order, with the
//! wakeup's parts (docker-proxy's relay before 6.10 checked by what it joined).

use netpath::{driver::Driver, lab};

use super::expected::{assert_order, assert_wakeup_parts, expected};
use super::{N, assert_counts, assert_crossings, common, crossings, run, run_on_its_path};

#[test]
fn bridge_path_hops_and_counts() {
    let _g = common::need_root();
    let r = run_on_its_path(Driver::Bridge);
    // The fentry backend uses fentry wherever the function is in vmlinux (its BTF is there):
    // ip_rcv and tcp_v4_rcv always are; module functions may fall back to kprobes.
    if r.backend == "fentry" {
        let vmlinux = ["ip_rcv", "tcp_v4_rcv"];
        let fns = r
            .function_probes
            .iter()
            .filter(|f| vmlinux.contains(&f.function));
        assert_eq!(fns.clone().count(), 2, "{:?}", r.function_probes);
        for f in fns {
            assert_eq!(f.mechanism, "fentry", "{}: {}", f.function, f.mechanism);
        }
    }
    // Two receive passes (bridge port, then the server's eth0) per packet.
    assert!(r.passes.iter().all(|p| p.rx_passes == 2), "{:?}", r.passes);
    // Every timeline crosses the same points in the same order on the same kinds of device.
    let want = [
        ("send", ""),
        ("dev_queue", "veth"),
        ("start_xmit", "veth"),
        ("netif_rx", "br-port"),
        ("netif_receive", "br-port"),
        ("dev_queue", "br-port"),
        ("start_xmit", "br-port"),
        ("netif_rx", "veth"),
        ("netif_receive", "veth"),
        ("sk_data_ready", ""),
        ("copy_to_user", ""),
        ("recv_return", ""),
    ];
    // A kernel without sock:sk_data_ready (before 6.7) merges wakeup into receiver-stack. One
    // that has it (6.12 in the VM: with kprobe and fentry too) must use it.
    let no_ready = r
        .missing_tracepoints
        .iter()
        .any(|m| m.ends_with("sk_data_ready"));
    assert_eq!(
        no_ready,
        !std::path::Path::new("/sys/kernel/tracing/events/sock/sk_data_ready").exists(),
        "missing tracepoints {:?} vs the kernel's",
        r.missing_tracepoints
    );
    let want: Vec<(&str, &str)> = want
        .into_iter()
        .filter(|(p, _)| !(no_ready && *p == "sk_data_ready"))
        .collect();
    assert_eq!(
        r.timelines.len() as u64,
        r.lost["completed"],
        "one sample per packet"
    );
    // Function probes add points inside hops (veth_xmit, br_forward, ip_rcv, tcp_v4_rcv); the
    // tracepoint points and their order stay the same with every backend.
    // The scheduler's points appear when the receiving thread slept (checked in
    // `assert_wakeup_parts`).
    let fn_points = [
        "veth_xmit",
        "br_forward",
        "ip_rcv",
        "tcp_v4_rcv",
        "nf_nat_manip",
        "sched_waking",
        "sched_switch",
    ];
    if r.backend != "tracepoint" {
        let all: Vec<&str> = r.timelines[0].points.iter().map(|p| p.point).collect();
        assert!(
            all.contains(&"veth_xmit") && all.contains(&"br_forward") && all.contains(&"ip_rcv"),
            "{} backend shows its function points: {all:?}",
            r.backend
        );
    }
    for t in &r.timelines {
        let seen: Vec<(&str, &str)> = t
            .points
            .iter()
            .filter(|p| !fn_points.contains(&p.point))
            .map(|p| (p.point, p.kind))
            .collect();
        assert_eq!(seen, want, "{} timeline {}", t.dir, t.tuple);
    }
    // The request leaves the client's eth0 and enters the server's eth0.
    let req = r.timelines.iter().find(|t| t.dir == "request").unwrap();
    let first = &req.points[1];
    let last_rx = req
        .points
        .iter()
        .rev()
        .find(|p| p.point == "netif_receive")
        .unwrap();
    assert!(
        first.device.starts_with("eth0@") && first.device.ends_with("-cli"),
        "{first:?}"
    );
    assert!(
        last_rx.device.starts_with("eth0@") && last_rx.device.ends_with("-srv"),
        "{last_rx:?}"
    );
    // TC saw at least every request leave the client and enter the server.
    let cli = r
        .devices
        .iter()
        .find(|d| d.name == "eth0" && d.netns.ends_with("-cli"))
        .unwrap();
    let srv = r
        .devices
        .iter()
        .find(|d| d.name == "eth0" && d.netns.ends_with("-srv"))
        .unwrap();
    assert!(
        cli.tc_egress_pkts >= N && srv.tc_ingress_pkts >= N,
        "{:?}",
        r.devices
    );
}

#[test]
fn host_path_has_no_veth_and_no_bridge() {
    let _g = common::need_root();
    let r = run_on_its_path(Driver::Host);
    assert!(r.passes.iter().all(|p| p.rx_passes == 1), "{:?}", r.passes);
}

#[test]
fn every_driver_crosses_its_hops() {
    let _g = common::need_root();
    let before = lab::list_netpath_netns().unwrap();
    for driver in [
        Driver::None,
        Driver::Macvlan,
        Driver::Overlay,
        Driver::PublishedNat,
        Driver::PublishedProxy,
        Driver::Egress,
        Driver::HostEgress,
        Driver::Gateway,
    ] {
        let r = run(driver);
        let sock_point =
            std::path::Path::new("/sys/kernel/tracing/events/tcp/tcp_sendmsg_locked").exists();
        if driver == Driver::PublishedProxy && !sock_point {
            // Before 6.10 journeys are bounded by syscall tracepoints, and docker-proxy relays
            // with splice(2): its legs are joined from the last receive pass at its socket,
            // which a race can miss (a few in a hundred, each one counted). Checked here: most
            // journeys joined across the relay, and nothing lost silently.
            assert_eq!(r.traced.count, N);
            let l = &r.lost;
            let joined = |d: &str| r.one_way.get(d).map_or(0, |o| o.count);
            eprintln!(
                "published-proxy before 6.10: joined request {} response {} of {N}; events {l:?}",
                joined("request"),
                joined("response"),
            );
            let proxy = |d: &str| crossings(&r, d, "proxy");
            // Every joined journey continued a relay send, and each relay send records one
            // proxy crossing. The direction comes from the hold the send took, which can be the
            // other direction's (holds are per relay process; a loaded 6.1 run had response
            // 295 proxy vs 296 joined, request 293 vs 291): so the totals, and each direction
            // at least three in four (a loaded host joined 87.7% of one direction once).
            assert!(
                proxy("request") + proxy("response") >= joined("request") + joined("response"),
                "{:?}",
                r.hops
            );
            for d in ["request", "response"] {
                assert!(joined(d) * 4 >= N * 3, "{d}: {l:?}");
                assert!(proxy(d) * 4 >= N * 3, "{d}: {:?}", r.hops);
            }
            assert!(l["completed"] + common::counted_losses(l) >= 2 * N, "{l:?}");
            continue;
        }
        let done = assert_counts(&r);
        let mut want = expected(driver);
        if driver == Driver::PublishedNat && r.backend != "tracepoint" {
            // Function probes see the rewrite: OUTPUT DNAT starts the request, which is then
            // routed (forward) to br0; the reply's de-NAT splits its receive into nat and two
            // receiver-stack segments.
            want.push(("request", "forward", 1));
            want.push(("response", "nat", 1));
            for w in want.iter_mut() {
                if *w == ("response", "receiver-stack", 1) {
                    w.2 = 2;
                }
            }
        }
        if driver == Driver::Egress && r.backend != "tracepoint" {
            // Function probes see both rewrites on the node (see `expected_order`).
            for d in ["request", "response"] {
                want.push((d, "nat", 1));
                for w in want.iter_mut() {
                    if *w == (d, "receiver-stack", 1) {
                        w.2 = 2;
                    }
                }
            }
        }
        assert_crossings(&r, &done, &want);
        assert_order(&r);
        assert_wakeup_parts(&r);
        if driver == Driver::Overlay {
            let c = r.context.as_ref().map(|c| c.client_mtu);
            let eth0 = r.devices.iter().find(|d| d.name == "eth0").unwrap();
            assert_eq!(eth0.mtu, 1450, "overlay inner MTU {c:?}");
        }
        assert_eq!(common::leftovers(&before), Vec::<String>::new());
    }
}
