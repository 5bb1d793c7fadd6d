//! The hop model the path tests hold each driver to: the crossings per direction, the order
//! of the hops (with function probes where it differs), the hop table's row order, and the
//! receiving thread's wakeup parts adding up to the one-way time.

use netpath::{
    driver::Driver,
    record::{DriverReport, Timeline},
};

use super::{WAKEUP_PARTS, common};

/// Per-direction crossings expected for N requests on each driver: the hop sequence of the
/// topology, counted.
pub(super) fn expected(driver: Driver) -> Vec<(&'static str, &'static str, u64)> {
    let both = |v: &[(&'static str, u64)]| -> Vec<(&'static str, &'static str, u64)> {
        ["request", "response"]
            .into_iter()
            .flat_map(|d| v.iter().map(move |(h, k)| (d, *h, *k)))
            .collect()
    };
    match driver {
        Driver::None | Driver::Host => both(&[
            ("sender-stack", 1),
            ("loopback", 1),
            ("backlog", 1),
            ("receiver-stack", 1),
            ("recv-return", 1),
        ]),
        Driver::Macvlan => both(&[
            ("sender-stack", 1),
            ("macvlan", 1),
            ("backlog", 1),
            ("receiver-stack", 1),
            ("recv-return", 1),
        ]),
        // Like macvlan, one device hop each way: the transmit ends in the other child's
        // (ipvlan) or the peer's (netkit) backlog.
        Driver::Ipvlan => both(&[
            ("sender-stack", 1),
            ("ipvlan", 1),
            ("backlog", 1),
            ("receiver-stack", 1),
            ("recv-return", 1),
        ]),
        Driver::Netkit => both(&[
            ("sender-stack", 1),
            ("netkit", 1),
            ("backlog", 1),
            ("receiver-stack", 1),
            ("recv-return", 1),
        ]),
        Driver::Overlay => both(&[
            ("sender-stack", 1),
            ("veth", 2),
            ("backlog", 4),
            ("bridge", 2),
            ("vxlan-encap", 1),
            ("underlay", 1),
            ("vxlan-decap", 1),
            ("receiver-stack", 1),
            ("recv-return", 1),
        ]),
        // Between the node and one bridge container, one veth crossing each way: published-nat
        // from the node in (DNAT), gateway from the container to its bridge's address.
        Driver::PublishedNat | Driver::Gateway => both(&[
            ("sender-stack", 1),
            ("veth", 1),
            ("backlog", 1),
            ("bridge", 1),
            ("receiver-stack", 1),
            ("recv-return", 1),
        ]),
        // Two connections: client ⇄ docker-proxy over loopback, docker-proxy ⇄ server over the
        // bridge; the proxy hop joins them.
        Driver::PublishedProxy => both(&[
            ("sender-stack", 2),
            ("loopback", 1),
            ("veth", 1),
            ("backlog", 2),
            ("bridge", 1),
            ("proxy", 1),
            ("receiver-stack", 2),
            ("recv-return", 1),
        ]),
        Driver::Bridge => both(&[
            ("sender-stack", 1),
            ("veth", 2),
            ("backlog", 2),
            ("bridge", 1),
            ("receiver-stack", 1),
            ("recv-return", 1),
        ]),
        // Out of the container, routed (and masqueraded) by the node, over its uplink; the
        // reply the same way back.
        Driver::Egress => both(&[
            ("sender-stack", 1),
            ("veth", 1),
            ("backlog", 2),
            ("bridge", 1),
            ("forward", 1),
            ("uplink", 1),
            ("receiver-stack", 1),
            ("recv-return", 1),
        ]),
        Driver::HostEgress => both(&[
            ("sender-stack", 1),
            ("uplink", 1),
            ("backlog", 1),
            ("receiver-stack", 1),
            ("recv-return", 1),
        ]),
    }
}

/// The hops of the new paths in the order each journey crosses them (consecutive segments
/// of one hop merged), per direction; with function probes where they differ.
fn expected_order(driver: Driver, function_probes: bool) -> Option<[&'static str; 2]> {
    Some(match (driver, function_probes) {
        (Driver::Egress, false) => [
            "sender-stack veth backlog bridge forward uplink backlog receiver-stack recv-return",
            "sender-stack uplink backlog forward bridge veth backlog receiver-stack recv-return",
        ],
        // The rewrite ends a `nat` segment on the node each way: MASQUERADE in POSTROUTING
        // (after the routing), its de-NAT in PREROUTING; the node's IP input before it is
        // receiver-stack.
        (Driver::Egress, true) => [
            "sender-stack veth backlog bridge receiver-stack nat forward uplink backlog \
             receiver-stack recv-return",
            "sender-stack uplink backlog receiver-stack nat forward bridge veth backlog \
             receiver-stack recv-return",
        ],
        (Driver::HostEgress, _) => ["sender-stack uplink backlog receiver-stack recv-return"; 2],
        (Driver::Ipvlan, _) => ["sender-stack ipvlan backlog receiver-stack recv-return"; 2],
        (Driver::Netkit, _) => ["sender-stack netkit backlog receiver-stack recv-return"; 2],
        (Driver::Gateway, _) => [
            "sender-stack veth backlog bridge receiver-stack recv-return",
            "sender-stack bridge veth backlog receiver-stack recv-return",
        ],
        // Named, not `_`: a new driver is placed here or in `first_crossings`. The older
        // paths have their first crossings; the published ones have `expected`'s hops only.
        (
            Driver::Host
            | Driver::Bridge
            | Driver::None
            | Driver::Overlay
            | Driver::Macvlan
            | Driver::PublishedProxy
            | Driver::PublishedNat,
            _,
        ) => return None,
    })
}

/// Every timeline crosses its driver's hops in order; with function probes (before 6.7 a
/// skipped kprobe run goes uncounted) up to 1% may not.
pub(super) fn assert_order(r: &DriverReport) {
    let fp = r.backend != "tracepoint";
    let driver: Driver = clap::ValueEnum::from_str(&r.driver, false).unwrap();
    if let Some(path) = expected_order(driver, fp).or_else(|| first_crossings(driver)) {
        rows_in_path_order(r, &path);
    }
    let Some(want) = expected_order(driver, fp) else {
        return;
    };
    // The data path's order; the receiving thread's wakeup parts (present when it slept, and
    // `wakeup` only where sk_data_ready exists) are checked in `assert_wakeup_parts`.
    let odd = common::dgram::out_of_order(r, &want, &WAKEUP_PARTS);
    let slack = if fp { r.timelines.len() / 100 } else { 0 };
    assert!(
        !r.timelines.is_empty() && odd.len() <= slack,
        "{} ({}): {} of {} timelines out of order, want {want:?}: {:?}",
        r.driver,
        r.backend,
        odd.len(),
        r.timelines.len(),
        &odd[..odd.len().min(3)]
    );
}

/// The older paths' hops in the order each is first crossed (the same both ways).
fn first_crossings(driver: Driver) -> Option<[&'static str; 2]> {
    Some(match driver {
        Driver::None | Driver::Host => {
            ["sender-stack loopback backlog receiver-stack recv-return"; 2]
        }
        Driver::Macvlan => ["sender-stack macvlan backlog receiver-stack recv-return"; 2],
        Driver::Bridge => ["sender-stack veth backlog bridge receiver-stack recv-return"; 2],
        Driver::Overlay => {
            ["sender-stack veth backlog bridge vxlan-encap underlay vxlan-decap receiver-stack \
             recv-return"; 2]
        }
        // The new paths' full order is `expected_order`'s; the published ones have no order.
        Driver::PublishedProxy
        | Driver::PublishedNat
        | Driver::Egress
        | Driver::HostEgress
        | Driver::Gateway
        | Driver::Ipvlan
        | Driver::Netkit => return None,
    })
}

/// The hop table lists each direction's hops in the order the packet crosses them (a hop
/// crossed twice where it is first crossed).
fn rows_in_path_order(r: &DriverReport, want: &[&str; 2]) {
    for (i, dir) in ["request", "response"].into_iter().enumerate() {
        let mut path: Vec<&str> = Vec::new();
        for h in want[i].split(' ') {
            if !path.contains(&h) {
                path.push(h);
            }
        }
        let rows: Vec<&str> = r
            .hops
            .iter()
            .filter(|h| h.at.dir == dir && path.contains(&h.at.hop))
            .map(|h| h.at.hop)
            .collect();
        assert_eq!(rows, path, "{} {dir}: hop rows out of path order", r.driver);
    }
}

/// The harness blocks in its receives, so its threads sleep between messages: the wakeup opens
/// up into its scheduler parts (socket woken → runnable → running → copied → returned), the CPU
/// that was idle before the thread ran gives an idle exit and a busy one a run-queue wait, and
/// every hop, parts included, adds up to the one-way time.
pub(super) fn assert_wakeup_parts(r: &DriverReport) {
    let slept: Vec<&Timeline> = r
        .timelines
        .iter()
        .filter(|t| t.points.iter().any(|p| p.point == "sched_switch"))
        .collect();
    assert!(
        !slept.is_empty(),
        "{} ({}): no journey saw its reader switched in",
        r.driver,
        r.backend
    );
    for t in &slept {
        let hops: Vec<&str> = t.points.iter().map(|p| p.hop).collect();
        let sw = t
            .points
            .iter()
            .position(|p| p.point == "sched_switch")
            .unwrap();
        let want_part = if t.points[sw].kind.starts_with("idle") {
            "idle-exit"
        } else {
            "runqueue"
        };
        assert_eq!(t.points[sw].hop, want_part, "{hops:?}");
        assert_eq!(t.points[sw - 1].point, "sched_waking", "{hops:?}");
        let tail: Vec<&str> = t.points[sw + 1..].iter().map(|p| p.hop).collect();
        assert_eq!(tail, ["recv-copy", "recv-return"], "{hops:?}");
    }
    // Per direction, the hops' time per packet adds up to the mean one-way time. A journey
    // that did not complete (its skb reused or freed unseen, counted) still recorded the hops
    // it crossed, so then the hops may add up to more, never to less (seen under a loaded
    // host: 2 of 300 journeys left with tens of ms in sender-stack).
    for (dir, ow) in &r.one_way {
        let dir_hops = || {
            r.hops
                .iter()
                .filter(|h| h.at.dir == *dir && h.at.hop != "one-way")
        };
        let sum: f64 = dir_hops().map(|h| h.at.per_packet_us).sum();
        let all_completed = dir_hops().all(|h| h.at.crossings <= ow.count);
        let tolerance = 0.02 * ow.mean_us + 1.0;
        assert!(
            if all_completed {
                (sum - ow.mean_us).abs() <= tolerance
            } else {
                sum >= ow.mean_us - tolerance
            },
            "{} {dir}: hops {sum:.2} µs vs one-way {:.2} µs: {:?}",
            r.driver,
            ow.mean_us,
            r.hops
        );
    }
}
