//! The hop model's tests: every path the drivers take, segment by segment.
use super::*;

/// The hop of each segment of a sequence of (point, device kind).
fn segments(path: &[(Point, DevKind)]) -> std::vec::Vec<Hop> {
    path.windows(2)
        .map(|w| h(w[0].0, w[0].1, w[1].0, w[1].1))
        .collect()
}

fn h(a: Point, ak: DevKind, b: Point, bk: DevKind) -> Hop {
    hop_between(a as u16, ak as u16, b as u16, bk as u16)
}

#[test]
fn bridge_path_names_each_segment() {
    // The sequence seen with bpftrace on this machine for one ping across a bridge lab.
    let path = [paths::BRIDGE, paths::END].concat();
    let hops = segments(&path);
    assert_eq!(
        hops,
        [
            Hop::SenderStack,
            Hop::Veth,
            Hop::Veth,
            Hop::Backlog,
            Hop::Bridge,
            Hop::Veth,
            Hop::Veth,
            Hop::Backlog,
            Hop::ReceiverStack,
            Hop::Wakeup,
            Hop::RecvReturn,
        ]
    );
}

/// The receiving thread's wakeup, opened up by the scheduler's points: each part has its
/// name, and an idle CPU's part is told from a busy one's.
#[test]
fn the_wakeup_splits_into_scheduler_parts() {
    const R: u16 = Point::SockReady as u16;
    const W: u16 = Point::SchedWaking as u16;
    const S: u16 = Point::SchedSwitch as u16;
    const C: u16 = Point::Copy as u16;
    const E: u16 = Point::RecvExit as u16;
    const RX: u16 = Point::NetifReceive as u16;
    assert_eq!(hop_between(R, 0, W, 0), Hop::Wakeup);
    assert_eq!(hop_between(W, 0, S, SCHED_IDLE), Hop::IdleExit);
    assert_eq!(hop_between(W, 0, S, SCHED_CROSS), Hop::Runqueue);
    assert_eq!(
        hop_between(W, 0, S, SCHED_IDLE | SCHED_CROSS),
        Hop::IdleExit
    );
    assert_eq!(hop_between(S, SCHED_IDLE, C, 0), Hop::RecvCopy);
    assert_eq!(
        hop_between(RX, DevKind::Veth as u16, E, 0),
        Hop::ReceiverStack
    );
    assert_eq!(
        hop_between(RX, DevKind::Veth as u16, Point::EchoReply as u16, 0),
        Hop::ReceiverStack
    );
    assert_eq!(hop_between(C, 0, E, 0), Hop::RecvReturn);
    // Not asleep: woken → copied is the wakeup hop.
    assert_eq!(hop_between(R, 0, C, 0), Hop::Wakeup);
    // Without sk_data_ready the receive path runs up to the wakeup.
    assert_eq!(hop_between(RX, 2, W, 0), Hop::ReceiverStack);
    // A missed point still leaves named segments.
    assert_eq!(hop_between(R, 0, S, 0), Hop::Wakeup);
    assert_eq!(hop_between(W, 0, C, 0), Hop::Runqueue);
    for p in [W, S] {
        assert_ne!(drop_hop(p, 0), Hop::Other);
    }
}

/// Traffic netpath does not generate (`trace --container`): a journey starts at its first
/// watched device and ends when the application's receive consumed its data. Its time in the
/// socket is `socket-queue`, never `receiver-stack`; with every device's kind known (both
/// containers' and the Docker host's), no segment is `other`.
#[test]
fn a_passive_journey_ends_at_the_applications_read() {
    use DevKind::*;
    use Point::*;
    // A reply: the server's eth0 → its host end on the bridge → the client's host end → the
    // client's eth0 → its socket → the client's read.
    let path = [
        (DevQueue, Veth),
        (DevXmit, Veth),
        (NetifRx, BridgePort),
        (NetifReceive, BridgePort),
        (DevQueue, BridgePort),
        (DevXmit, BridgePort),
        (NetifRx, Veth),
        (NetifReceive, Veth),
        (SockReady, Unknown),
        (SockRead, Unknown),
    ];
    assert_eq!(
        segments(&path),
        [
            Hop::Veth,
            Hop::Veth,
            Hop::Backlog,
            Hop::Bridge,
            Hop::Veth,
            Hop::Veth,
            Hop::Backlog,
            Hop::ReceiverStack,
            Hop::SocketQueue,
        ]
    );
    // What a device of no known kind made of the client's veth crossing.
    assert_eq!(h(DevQueue, Unknown, NetifRx, Unknown), Hop::Other);
    assert_eq!(Hop::SocketQueue.name(), "socket-queue");
    assert_eq!(Point::SockRead.name(), "sock_read");
}

#[test]
fn loopback_path_has_no_veth_or_bridge() {
    let path = [paths::LOOPBACK, paths::END].concat();
    for w in path.windows(2) {
        let hop = h(w[0].0, w[0].1, w[1].0, w[1].1);
        assert!(
            !matches!(hop, Hop::Veth | Hop::Bridge | Hop::Other),
            "{w:?} → {hop:?}"
        );
    }
}

#[test]
fn overlay_path_names_encap_underlay_decap() {
    use DevKind::*;
    use Point::*;
    let path = [
        (SendEnter, Unknown),
        (DevQueue, Veth),
        (NetifRx, BridgePort),
        (NetifReceive, BridgePort),
        (DevQueue, Vxlan),
        (DevQueue, Underlay),
        (NetifRx, Underlay),
        (NetifReceive, Underlay),
        (NetifReceive, Vxlan),
        (DevQueue, BridgePort),
        (NetifRx, Veth),
        (NetifReceive, Veth),
        (SockReady, Unknown),
    ];
    let hops = segments(&path);
    assert_eq!(
        hops,
        [
            Hop::SenderStack,
            Hop::Veth,
            Hop::Backlog,
            Hop::Bridge,
            Hop::VxlanEncap,
            Hop::Underlay,
            Hop::Backlog,
            Hop::VxlanDecap,
            Hop::Bridge,
            Hop::Veth,
            Hop::Backlog,
            Hop::ReceiverStack,
        ]
    );
}

#[test]
fn macvlan_path_names_macvlan() {
    use DevKind::*;
    use Point::*;
    assert_eq!(h(DevQueue, Macvlan, NetifRx, Macvlan), Hop::Macvlan);
    assert_eq!(h(SendEnter, Unknown, DevQueue, Macvlan), Hop::SenderStack);
    // Bridge mode goes through the lower device first; its rx handler hands the frame
    // to the child: with function probes the next point is the child's ip_rcv.
    assert_eq!(h(DevQueue, Macvlan, NetifRx, MacvlanParent), Hop::Macvlan);
    assert_eq!(
        h(NetifRx, MacvlanParent, NetifReceive, MacvlanParent),
        Hop::Backlog
    );
    assert_eq!(
        h(NetifReceive, MacvlanParent, IpRcv, Macvlan),
        Hop::ReceiverStack
    );
    assert_eq!(
        h(NetifReceive, MacvlanParent, SockReady, Unknown),
        Hop::ReceiverStack
    );
}

#[test]
fn drops_land_in_the_hop_being_crossed() {
    use DevKind::*;
    use Point::*;
    assert_eq!(
        drop_hop(NetifReceive as u16, BridgePort as u16),
        Hop::Bridge
    );
    assert_eq!(drop_hop(NetifRx as u16, Veth as u16), Hop::Backlog);
    assert_eq!(drop_hop(DevQueue as u16, Veth as u16), Hop::Veth);
}

#[test]
fn function_probe_points_keep_the_same_hops() {
    use DevKind::*;
    use Point::*;
    // kprobe/fentry bridge path: extra points, same hop names.
    let path = [paths::BRIDGE_FN, &[(SockReady, Unknown)]].concat();
    let hops = segments(&path);
    assert_eq!(
        hops,
        [
            Hop::SenderStack,
            Hop::Veth,
            Hop::Veth,
            Hop::Backlog,
            Hop::Bridge,
            Hop::Bridge,
            Hop::Veth,
            Hop::Veth,
            Hop::Backlog,
            Hop::ReceiverStack,
            Hop::ReceiverStack,
            Hop::ReceiverStack,
        ]
    );
    // A reply crossing de-NAT on local delivery: ip_rcv → rewrite is the nat hop.
    assert_eq!(h(IpRcv, Bridge, NatManip, Bridge), Hop::Nat);
    assert_eq!(h(NatManip, Bridge, TcpRcv, Bridge), Hop::ReceiverStack);
    // Forwarded through DNAT: receive → rewrite (nat) → routed to the egress device.
    assert_eq!(h(NetifReceive, Underlay, NatManip, Underlay), Hop::Nat);
    assert_eq!(h(NatManip, Underlay, DevQueue, Bridge), Hop::Forward);
    // A send rewritten by OUTPUT DNAT starts at the rewrite.
    assert_eq!(h(SendEnter, Unknown, NatManip, Unknown), Hop::SenderStack);
    assert_eq!(h(NatManip, Unknown, DevQueue, Bridge), Hop::Forward);
    assert_eq!(h(DevQueue, Bridge, BridgeForward, Bridge), Hop::Bridge);
    // VXLAN with function probes.
    assert_eq!(h(DevQueue, Vxlan, VxlanXmit, Vxlan), Hop::VxlanEncap);
    assert_eq!(h(VxlanXmit, Vxlan, UdpTunnelXmit, Vxlan), Hop::VxlanEncap);
    assert_eq!(h(UdpTunnelXmit, Vxlan, DevQueue, Underlay), Hop::VxlanEncap);
    assert_eq!(h(NetifReceive, Underlay, IpRcv, Underlay), Hop::VxlanDecap);
    assert_eq!(h(IpRcv, Underlay, VxlanRcv, Underlay), Hop::VxlanDecap);
    assert_eq!(h(VxlanRcv, Underlay, NetifReceive, Vxlan), Hop::VxlanDecap);
}

/// Point sequences of the lab's paths (tracepoint and function-probe backends), from the
/// send up to the receiving socket; `END` completes each.
mod paths {
    use super::super::{DevKind, DevKind::*, Point, Point::*};

    pub const END: &[(Point, DevKind)] =
        &[(SockReady, Unknown), (Copy, Unknown), (RecvExit, Unknown)];
    /// host: over loopback.
    pub const LOOPBACK: &[(Point, DevKind)] = &[
        (SendEnter, Unknown),
        (DevQueue, Loopback),
        (DevXmit, Loopback),
        (NetifRx, Loopback),
        (NetifReceive, Loopback),
    ];

    pub const LOOPBACK_FN: &[(Point, DevKind)] = &[
        (SendEnter, Unknown),
        (DevQueue, Loopback),
        (DevXmit, Loopback),
        (NetifRx, Loopback),
        (NetifReceive, Loopback),
        (IpRcv, Loopback),
        (TcpRcv, Loopback),
    ];

    pub const BRIDGE: &[(Point, DevKind)] = &[
        (SendEnter, Unknown),
        (DevQueue, Veth),
        (DevXmit, Veth),
        (NetifRx, BridgePort),
        (NetifReceive, BridgePort),
        (DevQueue, BridgePort),
        (DevXmit, BridgePort),
        (NetifRx, Veth),
        (NetifReceive, Veth),
    ];

    pub const BRIDGE_FN: &[(Point, DevKind)] = &[
        (SendEnter, Unknown),
        (DevQueue, Veth),
        (VethXmit, Veth),
        (NetifRx, BridgePort),
        (NetifReceive, BridgePort),
        (BridgeForward, BridgePort),
        (DevQueue, BridgePort),
        (VethXmit, BridgePort),
        (NetifRx, Veth),
        (NetifReceive, Veth),
        (IpRcv, Veth),
        (TcpRcv, Veth),
    ];

    pub const OVERLAY: &[(Point, DevKind)] = &[
        (SendEnter, Unknown),
        (DevQueue, Veth),
        (DevXmit, Veth),
        (NetifRx, BridgePort),
        (NetifReceive, BridgePort),
        (DevQueue, Vxlan),
        (DevXmit, Vxlan),
        (DevQueue, Underlay),
        (DevXmit, Underlay),
        (NetifRx, Underlay),
        (NetifReceive, Underlay),
        (NetifReceive, Vxlan),
        (DevQueue, BridgePort),
        (DevXmit, BridgePort),
        (NetifRx, Veth),
        (NetifReceive, Veth),
    ];

    pub const OVERLAY_FN: &[(Point, DevKind)] = &[
        (SendEnter, Unknown),
        (DevQueue, Veth),
        (VethXmit, Veth),
        (NetifRx, BridgePort),
        (NetifReceive, BridgePort),
        (BridgeForward, BridgePort),
        (DevQueue, Vxlan),
        (VxlanXmit, Vxlan),
        (UdpTunnelXmit, Vxlan),
        (DevQueue, Underlay),
        (VethXmit, Underlay),
        (NetifRx, Underlay),
        (NetifReceive, Underlay),
        (IpRcv, Underlay),
        (VxlanRcv, Underlay),
        (NetifReceive, Vxlan),
        (BridgeForward, Vxlan),
        (DevQueue, BridgePort),
        (VethXmit, BridgePort),
        (NetifRx, Veth),
        (NetifReceive, Veth),
        (IpRcv, Veth),
        (TcpRcv, Veth),
    ];

    /// macvlan in bridge mode: through the parent.
    pub const MACVLAN_FN: &[(Point, DevKind)] = &[
        (SendEnter, Unknown),
        (DevQueue, Macvlan),
        (DevXmit, Macvlan),
        (NetifRx, MacvlanParent),
        (NetifReceive, MacvlanParent),
        (IpRcv, Macvlan),
        (TcpRcv, Macvlan),
    ];

    /// ipvlan (L2 mode) between two children: the transmit ends in the other child's
    /// backlog (`dev_forward_skb`), the parent is not crossed.
    pub const IPVLAN_FN: &[(Point, DevKind)] = &[
        (SendEnter, Unknown),
        (DevQueue, Ipvlan),
        (DevXmit, Ipvlan),
        (NetifRx, Ipvlan),
        (NetifReceive, Ipvlan),
        (IpRcv, Ipvlan),
        (TcpRcv, Ipvlan),
    ];

    /// A netkit pair (L3 mode): the transmit ends in the peer's backlog, like veth.
    pub const NETKIT_FN: &[(Point, DevKind)] = &[
        (SendEnter, Unknown),
        (DevQueue, Netkit),
        (DevXmit, Netkit),
        (NetifRx, Netkit),
        (NetifReceive, Netkit),
        (IpRcv, Netkit),
        (TcpRcv, Netkit),
    ];

    /// published without the proxy: OUTPUT DNAT, then routed to the bridge device.
    pub const PUBLISHED_NAT_FN: &[(Point, DevKind)] = &[
        (SendEnter, Unknown),
        (NatManip, Unknown),
        (DevQueue, Bridge),
        (DevXmit, Bridge),
        (BridgeForward, Bridge),
        (DevQueue, BridgePort),
        (VethXmit, BridgePort),
        (NetifRx, Veth),
        (NetifReceive, Veth),
        (IpRcv, Veth),
        (TcpRcv, Veth),
    ];

    /// Its reply, de-NATed on local delivery.
    pub const PUBLISHED_NAT_FN_REPLY: &[(Point, DevKind)] = &[
        (SendEnter, Unknown),
        (DevQueue, Veth),
        (VethXmit, Veth),
        (NetifRx, BridgePort),
        (NetifReceive, BridgePort),
        (NetifReceive, Bridge),
        (IpRcv, Bridge),
        (NatManip, Bridge),
        (TcpRcv, Bridge),
    ];
}

/// Point sequences of the egress drivers with function probes (their tracepoint sequences
/// are these without the function probes, [`tracepoints_of`]): out of a container through
/// the node's bridge, routed and masqueraded on the node, over its uplink to another host.
mod egress {
    use super::super::{DevKind, DevKind::*, Point, Point::*};
    use std::vec::Vec;

    /// A path: its legs in order, one sequence.
    type Path = Vec<(Point, DevKind)>;

    const SEND: &[(Point, DevKind)] = &[(SendEnter, Unknown)];
    /// Out of the container into its node's stack: the veth crossing to the bridge port, the
    /// bridge passing the frame up (a receive pass on the bridge device), IP input.
    const CONTAINER_UP: &[(Point, DevKind)] = &[
        (DevQueue, Veth),
        (DevXmit, Veth),
        (VethXmit, Veth),
        (NetifRx, BridgePort),
        (NetifReceive, BridgePort),
        (NetifReceive, Bridge),
        (IpRcv, Bridge),
    ];
    /// Across the uplink into the other end's stack, up to IP input.
    const UPLINK: &[(Point, DevKind)] = &[
        (DevQueue, Uplink),
        (DevXmit, Uplink),
        (VethXmit, Uplink),
        (NetifRx, Uplink),
        (NetifReceive, Uplink),
        (IpRcv, Uplink),
    ];
    /// From the node's bridge device, forwarded to the container's port, to its socket.
    const BRIDGE_DOWN: &[(Point, DevKind)] = &[
        (DevQueue, Bridge),
        (DevXmit, Bridge),
        (BridgeForward, Bridge),
        (DevQueue, BridgePort),
        (DevXmit, BridgePort),
        (VethXmit, BridgePort),
        (NetifRx, Veth),
        (NetifReceive, Veth),
        (IpRcv, Veth),
        (TcpRcv, Veth),
    ];

    /// egress request: the bridge passes the frame up to the node's stack, which routes it
    /// to the uplink; SNAT in POSTROUTING.
    pub fn egress() -> Path {
        [
            SEND,
            CONTAINER_UP,
            &[(NatManip, Uplink)],
            UPLINK,
            &[(TcpRcv, Uplink)],
        ]
        .concat()
    }

    /// egress reply: de-masqueraded in PREROUTING on the uplink, routed to the bridge
    /// device, which forwards it to the container's port.
    pub fn egress_reply() -> Path {
        [SEND, UPLINK, &[(NatManip, Uplink)], BRIDGE_DOWN].concat()
    }

    /// host-egress, both ways: the node's own stack over the uplink.
    pub fn host_egress() -> Path {
        [SEND, UPLINK, &[(TcpRcv, Uplink)]].concat()
    }

    /// gateway request: container → its bridge's own address, delivered locally.
    pub fn gateway() -> Path {
        [SEND, CONTAINER_UP, &[(TcpRcv, Bridge)]].concat()
    }

    /// gateway reply: sent by the node out of its bridge device.
    pub fn gateway_reply() -> Path {
        [SEND, BRIDGE_DOWN].concat()
    }

    pub fn all() -> [Path; 5] {
        [
            egress(),
            egress_reply(),
            host_egress(),
            gateway(),
            gateway_reply(),
        ]
    }
}

/// The tracepoint points of a function-probe sequence.
fn tracepoints_of(p: &[(Point, DevKind)]) -> std::vec::Vec<(Point, DevKind)> {
    p.iter()
        .copied()
        .filter(|(pt, _)| (*pt as u16) < Point::VethXmit as u16)
        .collect()
}

/// The hops of a completed sequence, consecutive equal ones merged, space-separated.
fn hop_names(p: &[(Point, DevKind)]) -> std::string::String {
    let mut hops = segments(&[p, paths::END].concat());
    hops.dedup();
    let names: std::vec::Vec<&str> = hops.iter().map(|h| h.name()).collect();
    names.join(" ")
}

#[test]
fn egress_host_egress_and_gateway_name_every_hop() {
    use egress::*;
    let tp = |p: &[(Point, DevKind)]| hop_names(&tracepoints_of(p));
    // Tracepoints: the node's routing, with its SNAT inside, is `forward`.
    assert_eq!(
        tp(&egress()),
        "sender-stack veth backlog bridge forward uplink backlog receiver-stack wakeup recv-return"
    );
    assert_eq!(
        tp(&egress_reply()),
        "sender-stack uplink backlog forward bridge veth backlog receiver-stack wakeup recv-return"
    );
    // Function probes: each way the rewrite ends a `nat` segment on the node (the
    // netfilter work up to it; the request's includes the routing), then `forward`.
    assert_eq!(
        hop_names(&egress()),
        "sender-stack veth backlog bridge receiver-stack nat forward uplink backlog \
         receiver-stack wakeup recv-return"
    );
    assert_eq!(
        hop_names(&egress_reply()),
        "sender-stack uplink backlog receiver-stack nat forward bridge veth backlog \
         receiver-stack wakeup recv-return"
    );
    assert_eq!(
        tp(&host_egress()),
        "sender-stack uplink backlog receiver-stack wakeup recv-return"
    );
    // gateway: one veth crossing and local delivery through the bridge device.
    assert_eq!(
        tp(&gateway()),
        "sender-stack veth backlog bridge receiver-stack wakeup recv-return"
    );
    assert_eq!(
        tp(&gateway_reply()),
        "sender-stack bridge veth backlog receiver-stack wakeup recv-return"
    );
    assert_eq!(
        drop_hop(Point::DevQueue as u16, DevKind::Uplink as u16),
        Hop::Uplink
    );
}

#[test]
fn ipvlan_and_netkit_have_their_own_hop() {
    use paths::{IPVLAN_FN, NETKIT_FN};
    for (p, hop) in [(IPVLAN_FN, "ipvlan"), (NETKIT_FN, "netkit")] {
        let want = std::format!("sender-stack {hop} backlog receiver-stack wakeup recv-return");
        assert_eq!(hop_names(&tracepoints_of(p)), want);
        assert_eq!(hop_names(p), want);
    }
    assert_eq!(
        drop_hop(Point::DevXmit as u16, DevKind::Netkit as u16),
        Hop::Netkit
    );
    assert_eq!(DevKind::from_u16(DevKind::Ipvlan as u16), DevKind::Ipvlan);
    assert_eq!(DevKind::from_u16(DevKind::Netkit as u16), DevKind::Netkit);
}

/// Every known path, completed.
fn known_paths() -> std::vec::Vec<std::vec::Vec<(Point, DevKind)>> {
    use paths::*;
    [
        LOOPBACK,
        LOOPBACK_FN,
        BRIDGE,
        BRIDGE_FN,
        OVERLAY,
        OVERLAY_FN,
        MACVLAN_FN,
        IPVLAN_FN,
        NETKIT_FN,
        PUBLISHED_NAT_FN,
        PUBLISHED_NAT_FN_REPLY,
    ]
    .iter()
    .map(|p| [*p, END].concat())
    .chain(egress::all().into_iter().flat_map(|p| {
        [
            [&p[..], END].concat(),
            [&tracepoints_of(&p)[..], END].concat(),
        ]
    }))
    .collect()
}

#[test]
fn known_paths_have_no_unnamed_segment() {
    for p in known_paths() {
        assert!(!segments(&p).contains(&Hop::Other), "{p:?}");
    }
}

/// A kprobe program is skipped when it fires while another kprobe or perf-event tracepoint
/// program runs on the same CPU (before 6.7 uncounted): e.g. a NET_RX softirq run on the
/// way out of an interrupt that hit a syscall tracepoint program loses every function-probe
/// point of that run. Any one point may also go missing. The segment spanning the gap
/// still has a name.
#[test]
fn missed_points_leave_no_unnamed_segment() {
    let is_fn = |p: Point| p as u16 >= Point::VethXmit as u16;
    let mut unnamed = std::collections::BTreeSet::new();
    let mut check = |q: &[(Point, DevKind)]| {
        for w in q.windows(2) {
            if h(w[0].0, w[0].1, w[1].0, w[1].1) == Hop::Other {
                unnamed.insert((w[0], w[1]));
            }
        }
    };
    for p in known_paths() {
        for i in 1..p.len() - 1 {
            let mut q = p.clone();
            q.remove(i);
            check(&q);
        }
        let fns: std::vec::Vec<usize> = (0..p.len()).filter(|&i| is_fn(p[i].0)).collect();
        for mask in 0u32..1 << fns.len() {
            let q: std::vec::Vec<_> = (0..p.len())
                .filter(|i| {
                    fns.iter()
                        .position(|f| f == i)
                        .is_none_or(|b| mask & 1 << b == 0)
                })
                .map(|i| p[i])
                .collect();
            check(&q);
        }
    }
    assert!(unnamed.is_empty(), "{unnamed:?}");
}

#[test]
fn names_round_trip() {
    for (i, hop) in Hop::ALL.iter().enumerate() {
        assert_eq!(Hop::from_u32(i as u32), *hop);
    }
    for (i, p) in Point::ALL.iter().enumerate() {
        assert_eq!(Point::from_u16(i as u16), Some(*p));
    }
}
