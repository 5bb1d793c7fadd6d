//! The hop model: the one place that turns "the packet moved from point A on a device of kind K
//! to point B" into a named hop. Every probe backend reports points; this function names the
//! segment between two consecutive points. Consecutive segments with the same hop merge, so the
//! hops of one journey partition the time from the send syscall to the receive syscall's return:
//! they add up by construction.
//!
//! ```text
//!  client netns          node (bridge)                      server netns
//!  send() ─sender-stack─► eth0 ─veth─► npXbr-port ─backlog─► [rx] ─bridge─► port ─veth─► eth0
//!        ─backlog─► [rx] ─receiver-stack─► sk_data_ready ─wakeup─► recv() returns
//! ```

/// Declares a value enum from one row a variant, `Name = value => "name",`: the enum (values
/// numbered from 0 in row order), `ALL` in that order and `name()`. One list, so a new variant
/// cannot be left out of `ALL` or the names; the `from_*` conversions index `ALL`, which the
/// check below keeps equal to the values.
macro_rules! named_enum {
    ($(#[$meta:meta])* pub enum $ty:ident: $repr:ident {
        $($(#[$doc:meta])* $v:ident = $n:literal => $name:literal,)*
    }) => {
        $(#[$meta])*
        #[repr($repr)]
        #[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
        pub enum $ty {
            $($(#[$doc])* $v = $n,)*
        }

        impl $ty {
            pub const ALL: [$ty; [$($name),*].len()] = [$($ty::$v),*];

            pub fn name(self) -> &'static str {
                match self {
                    $($ty::$v => $name,)*
                }
            }
        }

        const _: () = {
            let mut i = 0;
            while i < $ty::ALL.len() {
                assert!($ty::ALL[i] as usize == i, "values must count up from 0 in row order");
                i += 1;
            }
        };
    };
}

named_enum! {
    /// Where a packet was seen. Values are stable: they travel in maps and records.
    pub enum Point: u16 {
        /// Entry of the sender's send syscall.
        SendEnter = 0 => "send",
        /// `net:net_dev_queue` (dev_queue_xmit).
        DevQueue = 1 => "dev_queue",
        /// `net:net_dev_start_xmit` (driver's ndo_start_xmit).
        DevXmit = 2 => "start_xmit",
        /// `net:netif_rx` (queued to the per-CPU backlog).
        NetifRx = 3 => "netif_rx",
        /// `net:netif_receive_skb` (a receive pass in the NET_RX softirq).
        NetifReceive = 4 => "netif_receive",
        /// `sock:sk_data_ready` (the receiving socket is woken).
        SockReady = 5 => "sk_data_ready",
        /// `skb:skb_copy_datagram_iovec` (data copied to the receiver's buffer).
        Copy = 6 => "copy_to_user",
        /// Exit of the receiver's receive syscall.
        RecvExit = 7 => "recv_return",
        /// `skb:kfree_skb`.
        Drop = 8 => "kfree_skb",
        /// Function probes (kprobe/fentry backends) report these extra points.
        VethXmit = 9 => "veth_xmit",
        BridgeForward = 10 => "br_forward",
        NatManip = 11 => "nf_nat_manip",
        VxlanXmit = 12 => "vxlan_xmit",
        UdpTunnelXmit = 13 => "udp_tunnel_xmit",
        VxlanRcv = 14 => "vxlan_rcv",
        IpRcv = 15 => "ip_rcv",
        TcpRcv = 16 => "tcp_v4_rcv",
        /// `sched:sched_waking` of the receiving thread, inside the socket's wakeup: made
        /// runnable. Its kind carries `SCHED_*` bits.
        SchedWaking = 17 => "sched_waking",
        /// `sched:sched_switch` onto the receiving thread: it runs. Kind: `SCHED_IDLE` when the CPU
        /// left its idle task for it, `SCHED_CROSS` when it runs on another CPU than the waker's.
        SchedSwitch = 18 => "sched_switch",
        /// `--proto icmp`: the target's kernel queued the echo reply it made of the request (the
        /// reply's first `net_dev_queue`): the request's journey ends here, the reply's starts.
        EchoReply = 19 => "echo_reply",
        /// Traffic netpath does not generate (`trace --container`, `serve`): the application's
        /// receive consumed the data `sk_data_ready` announced (`tcp:tcp_rcv_space_adjust` with
        /// the socket's `copied_seq` past the data), whichever thread read it.
        SockRead = 20 => "sock_read",
        /// `--parts`: a netfilter boundary a sampled journey crossed (kind: the boundary's
        /// number). Only in the sampled record: userspace pairs these into the journey's parts.
        NfBoundary = 21 => "nf_boundary",
    }
}

/// Kind bits of the scheduler points: the thread's CPU was idle before it ran.
pub const SCHED_IDLE: u16 = 1;
/// Kind bits of the scheduler points: it runs on another CPU than the one that woke it.
pub const SCHED_CROSS: u16 = 2;

impl Point {
    pub fn from_u16(v: u16) -> Option<Point> {
        Point::ALL.get(v as usize).copied()
    }
}

named_enum! {
    /// What a device is in the path. Filled in by the loader from the lab or from netlink.
    pub enum DevKind: u16 {
        Unknown = 0 => "?",
        Loopback = 1 => "lo",
        /// Container end of a veth pair.
        Veth = 2 => "veth",
        /// Host end of a veth pair, enslaved to a bridge.
        BridgePort = 3 => "br-port",
        Bridge = 4 => "bridge",
        Vxlan = 5 => "vxlan",
        Macvlan = 6 => "macvlan",
        /// The link between two nodes that carries VXLAN.
        Underlay = 7 => "underlay",
        /// The lower device of macvlan children. Bridge-mode frames between children pass through
        /// it ("to lowerdev first for its taps"), then its rx handler hands them to the child.
        MacvlanParent = 8 => "mv-parent",
        /// A node's link to another host (an egress path's uplink): a plain veth between two
        /// hosts' stacks. Not `Underlay`: nothing is decapsulated behind it.
        Uplink = 9 => "uplink",
        /// An ipvlan child (L2 mode). Between children of one parent the transmit hands the
        /// frame straight to the other child's backlog (`dev_forward_skb`); the parent is not
        /// crossed.
        Ipvlan = 10 => "ipvlan",
        /// Either end of a netkit pair (6.7+, L3 mode): like veth, the transmit ends in the
        /// peer's backlog, with no Ethernet header and, without a BPF program, policy pass.
        Netkit = 11 => "netkit",
    }
}

impl DevKind {
    pub fn from_u16(v: u16) -> DevKind {
        DevKind::ALL
            .get(v as usize)
            .copied()
            .unwrap_or(DevKind::Unknown)
    }
}

named_enum! {
    /// Direction of a one-way journey; `Turnaround` holds the server's own time.
    pub enum Dir: u32 {
        Request = 0 => "request",
        Response = 1 => "response",
        Turnaround = 2 => "turnaround",
    }
}

/// The slot of the client's gap: its receive's return point → its next send's point (in
/// `Dir::Turnaround`, whose other hops are unused). Only netpath's own time in it is read: the
/// client's syscall edges, outside every hop but inside the round trip its harness times, are
/// in that gap, and the check of the compensated hops takes that time out of them.
pub const CLIENT_GAP: (Dir, Hop) = (Dir::Turnaround, Hop::RecvReturn);

named_enum! {
    /// Named hops. Slot `OneWay` holds the whole journey; `Turnaround` sits in `Dir::Turnaround`.
    pub enum Hop: u32 {
        /// Send syscall entry → first device queue: socket, TCP and IP output.
        SenderStack = 0 => "sender-stack",
        /// Loopback device transmit.
        Loopback = 1 => "loopback",
        /// A veth pair crossing: queue on one end → netif_rx on its peer.
        Veth = 2 => "veth",
        /// netif_rx → netif_receive_skb: waiting for the NET_RX softirq.
        Backlog = 3 => "backlog",
        /// Receive on a bridge port → queue on the egress port (forwarding, br_netfilter).
        Bridge = 4 => "bridge",
        /// Receive on a routed device → queue on the egress device (IP forwarding, netfilter).
        Forward = 5 => "forward",
        /// Netfilter NAT rewrite (function probes, or a tuple change seen across a forward).
        Nat = 6 => "nat",
        VxlanEncap = 7 => "vxlan-encap",
        Underlay = 8 => "underlay",
        VxlanDecap = 9 => "vxlan-decap",
        Macvlan = 10 => "macvlan",
        /// Userland proxy (docker-proxy): receive on the front connection → send on the back one.
        Proxy = 11 => "proxy",
        /// Last receive pass → socket woken: IP and TCP input.
        ReceiverStack = 12 => "receiver-stack",
        /// Socket woken → the receiving thread made runnable (`sched_waking`); when the thread
        /// was not asleep (it was running or spinning), socket woken → data copied.
        Wakeup = 13 => "wakeup",
        /// A node's uplink crossed to another host: queue on one end → netif_rx on the other.
        Uplink = 14 => "uplink",
        /// A transition the model does not name; counted so nothing is hidden.
        Other = 15 => "other",
        /// The whole journey (send entry → receive return); for `Dir::Turnaround`, the server's
        /// time between its receive returning and its next send.
        OneWay = 16 => "one-way",
        /// Runnable → running, on a CPU that was idle: the idle state's exit latency.
        IdleExit = 17 => "idle-exit",
        /// Runnable → running, on a CPU that was busy: the wait in its run queue.
        Runqueue = 18 => "runqueue",
        /// Running → data copied to the user buffer (the rest of the receive call's way back).
        RecvCopy = 19 => "recv-copy",
        /// Data copied → receive syscall returns.
        RecvReturn = 20 => "recv-return",
        /// An ipvlan child's transmit to another child of its parent: queue → the peer child's
        /// netif_rx.
        Ipvlan = 21 => "ipvlan",
        /// A netkit pair crossing: queue on one end → netif_rx on its peer.
        Netkit = 22 => "netkit",
        /// Traffic netpath does not generate: socket woken → the application's receive consumed
        /// the data. The application's own time before it reads (its wakeup, the other work of its
        /// event loop), never part of `receiver-stack`.
        SocketQueue = 23 => "socket-queue",
    }
}

impl Hop {
    pub fn from_u32(v: u32) -> Hop {
        Hop::ALL.get(v as usize).copied().unwrap_or(Hop::Other)
    }
}

/// Slot of (direction, hop) in the `STATS` map and, times the bucket count, in `HIST`.
#[inline(always)]
pub fn slot(dir: u32, hop: u32) -> u32 {
    dir * crate::NHOPS as u32 + hop
}

/// The hop a packet was in when it died, from the last point it was seen at: the segment it
/// had entered but not finished.
pub fn drop_hop(last_point: u16, last_kind: u16) -> Hop {
    const BRIDGE_PORT: u16 = DevKind::BridgePort as u16;
    const UNDERLAY: u16 = DevKind::Underlay as u16;
    match Point::from_u16(last_point) {
        Some(Point::SendEnter) => Hop::SenderStack,
        Some(Point::DevQueue | Point::DevXmit | Point::VethXmit) => xmit_hop(last_kind),
        Some(Point::NetifRx) => Hop::Backlog,
        Some(Point::NetifReceive) => match last_kind {
            BRIDGE_PORT => Hop::Bridge,
            UNDERLAY => Hop::VxlanDecap,
            _ => Hop::ReceiverStack,
        },
        Some(Point::SockReady) => Hop::Wakeup,
        Some(Point::SchedWaking) => Hop::Runqueue,
        Some(Point::SchedSwitch) => Hop::RecvCopy,
        Some(Point::Copy) => Hop::RecvReturn,
        Some(Point::NatManip) => Hop::Nat,
        Some(Point::VxlanXmit | Point::UdpTunnelXmit) => Hop::VxlanEncap,
        Some(Point::VxlanRcv) => Hop::VxlanDecap,
        Some(Point::BridgeForward) => Hop::Bridge,
        Some(Point::IpRcv | Point::TcpRcv) => Hop::ReceiverStack,
        _ => Hop::Other,
    }
}

/// Hop of a device transmit, by the kind of the transmitting device.
#[inline(always)]
fn xmit_hop(kind: u16) -> Hop {
    match kind {
        1 => Hop::Loopback,
        2 | 3 => Hop::Veth,
        4 => Hop::Bridge,
        5 => Hop::VxlanEncap,
        6 | 8 => Hop::Macvlan,
        7 => Hop::Underlay,
        9 => Hop::Uplink,
        10 => Hop::Ipvlan,
        11 => Hop::Netkit,
        _ => Hop::Other,
    }
}

/// Names the segment from `(from, from_kind)` to `(to, to_kind)`. Kinds are `DevKind` values;
/// points are `Point` values (raw, so the kernel side needs no conversions).
#[inline(always)]
pub fn hop_between(from: u16, from_kind: u16, to: u16, to_kind: u16) -> Hop {
    const SEND: u16 = Point::SendEnter as u16;
    const QUEUE: u16 = Point::DevQueue as u16;
    const XMIT: u16 = Point::DevXmit as u16;
    const RX: u16 = Point::NetifRx as u16;
    const RECV: u16 = Point::NetifReceive as u16;
    const READY: u16 = Point::SockReady as u16;
    const COPY: u16 = Point::Copy as u16;
    const EXIT: u16 = Point::RecvExit as u16;
    const ECHO: u16 = Point::EchoReply as u16;
    const VETH_XMIT: u16 = Point::VethXmit as u16;
    const BR_FWD: u16 = Point::BridgeForward as u16;
    const NAT: u16 = Point::NatManip as u16;
    const VX_XMIT: u16 = Point::VxlanXmit as u16;
    const UDP_TX: u16 = Point::UdpTunnelXmit as u16;
    const VX_RCV: u16 = Point::VxlanRcv as u16;
    const IP_RCV: u16 = Point::IpRcv as u16;
    const TCP_RCV: u16 = Point::TcpRcv as u16;
    const WAKING: u16 = Point::SchedWaking as u16;
    const SWITCH: u16 = Point::SchedSwitch as u16;
    const READ: u16 = Point::SockRead as u16;
    const BRIDGE_PORT: u16 = DevKind::BridgePort as u16;
    const VXLAN: u16 = DevKind::Vxlan as u16;
    const MACVLAN: u16 = DevKind::Macvlan as u16;
    const UNDERLAY: u16 = DevKind::Underlay as u16;

    match (from, to) {
        (SEND, _) => Hop::SenderStack,
        // Device transmit, possibly through a function probe inside the driver.
        (QUEUE | XMIT | VETH_XMIT, XMIT | VETH_XMIT | RX) => xmit_hop(from_kind),
        (XMIT | VETH_XMIT, RECV) => xmit_hop(from_kind),
        // Virtual devices that hand the packet to another device's queue: bridge device,
        // vxlan (encap onto the underlay), macvlan (onto its parent).
        (QUEUE | XMIT, QUEUE) if from_kind == VXLAN => Hop::VxlanEncap,
        (VX_XMIT | UDP_TX, _) => Hop::VxlanEncap,
        (QUEUE | XMIT, VX_XMIT | UDP_TX) => xmit_hop(from_kind),
        (QUEUE | XMIT, QUEUE) => xmit_hop(from_kind),
        // netif_rx → receive pass; anything else after netif_rx means the receive pass was
        // missed (a skipped program): the segment still starts with the backlog wait.
        (RX, _) => Hop::Backlog,
        // After a receive pass: forwarded by a bridge, decapsulated, or routed.
        // A VXLAN device on an overlay is a bridge port too (decapsulated frames are bridged).
        // The next device's transmit points stand in for its queue point when that was missed.
        (RECV | BR_FWD, QUEUE | XMIT | VETH_XMIT | VX_XMIT)
            if from_kind == BRIDGE_PORT || from_kind == VXLAN || from == BR_FWD =>
        {
            Hop::Bridge
        }
        (RECV, BR_FWD) => Hop::Bridge,
        // The bridge device's own transmit (local traffic out through br0) forwards too.
        (QUEUE | XMIT, BR_FWD) => Hop::Bridge,
        // NAT (function probes): the segment that ends at the rewrite is the netfilter hook
        // processing up to it (conntrack, NAT lookup); after it, the packet is routed on or
        // delivered.
        (_, NAT) if from != SEND => Hop::Nat,
        (NAT, QUEUE | XMIT) => Hop::Forward,
        (NAT, IP_RCV | TCP_RCV | READY | COPY) => Hop::ReceiverStack,
        // VXLAN receive: the underlay's IP/UDP input up to vxlan_rcv is decapsulation work.
        (RECV | IP_RCV, VX_RCV) => Hop::VxlanDecap,
        (RECV, IP_RCV) if from_kind == UNDERLAY => Hop::VxlanDecap,
        (VX_RCV, _) => Hop::VxlanDecap,
        (RECV | IP_RCV, RECV | RX) if to_kind == VXLAN => Hop::VxlanDecap,
        (RECV, RECV | RX) if to_kind == MACVLAN || from_kind == MACVLAN => Hop::Macvlan,
        (RECV, RECV | RX) if from_kind == BRIDGE_PORT => Hop::Bridge,
        // Routed on (IP forwarding, netfilter), also when the next device's queue point was
        // missed and its transmit stands in.
        (RECV | IP_RCV, QUEUE | XMIT | VETH_XMIT) => Hop::Forward,
        (RECV | IP_RCV | TCP_RCV, IP_RCV | TCP_RCV) => Hop::ReceiverStack,
        (RECV | IP_RCV | TCP_RCV, READY | COPY) => Hop::ReceiverStack,
        // A spinning receiver took a datagram off the queue before its wakeup was traced (UDP
        // copies linear skbs unseen): the stack up to the receive's return.
        (RECV | IP_RCV | TCP_RCV, EXIT) => Hop::ReceiverStack,
        // IP input, icmp_echo, the reply built and routed up to its first queue.
        (RECV | IP_RCV, ECHO) => Hop::ReceiverStack,
        (READY, COPY | EXIT) => Hop::Wakeup,
        // Passively traced: the data waits in the socket until the application reads it.
        (READY, READ) => Hop::SocketQueue,
        // The receiving thread's wakeup opened up by the scheduler's points. Without
        // sk_data_ready (before 6.7) the receive path up to the wakeup is receiver-stack.
        (READY, WAKING | SWITCH) => Hop::Wakeup,
        (RECV | IP_RCV | TCP_RCV | NAT, WAKING | SWITCH) => Hop::ReceiverStack,
        (WAKING, SWITCH) if to_kind & SCHED_IDLE != 0 => Hop::IdleExit,
        (WAKING, SWITCH | COPY | EXIT) => Hop::Runqueue,
        (SWITCH, COPY | EXIT) => Hop::RecvCopy,
        (COPY, EXIT | COPY) => Hop::RecvReturn,
        _ => Hop::Other,
    }
}

#[cfg(test)]
mod tests;
