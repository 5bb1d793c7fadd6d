//! Types shared by the kernel programs and the loader, plus the hop model and the one reader
//! of `ldd`'s output that netpath and xtask share (`ldd`).
//!
//! The shared types are `#[repr(C)]` with explicit padding fields so that the kernel and user
//! side agree on layout byte for byte. `no_std`: the kernel side never pulls in std.
#![no_std]

#[cfg(test)]
extern crate std;

pub mod config;
pub mod devrole;
pub mod hist;
pub mod hop;
pub mod ldd;
mod sockq;

pub use config::{FilterConfig, LoadConfig, NftChainKey, NftOffsets};
pub use hop::{CLIENT_GAP, DevKind, Dir, Hop, Point};
pub use sockq::{Parked, SOCK_DEPTH, SOCK_SLOTS, SockSlot, parked_key};

/// Most points one sampled packet timeline keeps: overlay with function probes crosses 30 on
/// 6.1 (31 where `sk_data_ready` exists), 33 with the receiving thread's scheduler points. A
/// power of two: the kernel side bounds the index with a mask.
pub const MAX_POINTS: usize = 64;
const _: () = assert!(MAX_POINTS.is_power_of_two());
/// Hop slots per direction in the stats and histogram maps.
pub const NHOPS: usize = 24;
const _: () = assert!(NHOPS == Hop::ALL.len(), "NHOPS must equal the hop list");
/// Directions: request (client → server), response (server → client), server turnaround.
pub const NDIRS: usize = 3;
/// Slots in the per-hop stats map.
pub const NSLOTS: usize = NHOPS * NDIRS;
/// Netfilter boundaries one run can place (one program each, `probes/netfilter.rs`); the
/// part from boundary `k` to the next one a packet meets has the histograms `k * 2 + dir`.
pub const NF_BOUNDS: usize = 16;
/// Slots of the qdisc parts per direction: one per device kind (`DevKind`), a power of two.
pub const QDISC_KINDS: u32 = 16;
const _: () = assert!(DevKind::ALL.len() <= QDISC_KINDS as usize);

/// What the harness sends in a traced run: `RUN[run::PROTO]`, which the loader sets before
/// each run and the programs read (`harness::Proto` converts to it).
pub mod proto {
    pub const TCP: u32 = 0;
    pub const UDP: u32 = 1;
    pub const ICMP: u32 = 2;
}

/// Indices of the `RUN` array: what the loader sets before each traced run (no reload).
pub mod run {
    /// What the harness sends (`proto::*`).
    pub const PROTO: u32 = 0;
    /// 1 when relay processes (docker-proxy) are followed: only then does a journey that
    /// reaches a socket get published for a splicing relay's next send.
    pub const RELAYS: u32 = 1;
    /// 1 once every program of a run is attached, 0 again before any is detached. Journeys of
    /// traffic netpath does not generate (`trace --container`, `serve`) start and end only
    /// while it is set: a journey that crossed a hook before its program was attached would
    /// miss that point, and its time would land in the neighbouring hop.
    pub const ARMED: u32 = 2;
    /// 1 when no watched device can start a journey at a receive point (`netif_rx`,
    /// `netif_receive_skb`): every watched device has a role, and none is a macvlan's or
    /// ipvlan's own (`devrole`). A packet not followed then costs a receive point one array
    /// lookup, not a read of its device (`serve`'s packets not sampled cross two receive points
    /// a device pair).
    pub const TX_ENTRIES_ONLY: u32 = 3;
    pub const COUNT: u32 = 4;
}

/// Indices of the `DELAY` array of `netpath validate`'s delay program (`tc_delay`).
pub mod delay {
    /// ns each data packet is held on the device (0: none).
    pub const NS: u32 = 0;
    /// Packets shorter than this pass at once (pure ACKs, ARP).
    pub const MIN_LEN: u32 = 1;
    /// Packets held so far, and the ns they were held in all, from the program's first clock
    /// read to its last (what it really waited: at least `NS`, up to a clock read more).
    pub const HELD: u32 = 2;
    pub const HELD_NS: u32 = 3;
    pub const COUNT: u32 = 4;
}

/// Role of a traced thread, value of the `TIDS` map.
pub const ROLE_CLIENT: u32 = 1;
pub const ROLE_SERVER: u32 = 2;
/// A userland proxy (docker-proxy): its receives continue journeys instead of ending them.
pub const ROLE_RELAY: u32 = 3;

/// Indices of the per-CPU `COUNTERS` map. Every lost or unmatched event is counted here.
pub mod counter {
    /// Ring buffer full: a sampled timeline or a drop record could not be reserved.
    pub const RINGBUF_LOST: u32 = 0;
    /// The per-skb state map was full: a packet could not be tracked.
    pub const SKB_MAP_FULL: u32 = 1;
    /// A tracked skb was seen again after `MAX_GAP_NS`: its old state was discarded.
    pub const STALE: u32 = 2;
    /// A new send reused an skb address whose state was never completed.
    pub const REUSED: u32 = 3;
    /// A receive returned data but no tracked skb was copied in it.
    pub const RECV_UNMATCHED: u32 = 4;
    /// A relay (docker-proxy) sent, but no journey was waiting at its socket: the first leg's
    /// wakeup was not seen (e.g. its skb was merged away), so the second leg is lost. Counted
    /// where sends are seen as sends (`tcp_sendmsg_locked`, send syscalls), not at splice(2).
    pub const RELAY_UNMATCHED: u32 = 5;
    /// One-way journeys completed (send syscall entry to receive syscall exit).
    pub const COMPLETED: u32 = 6;
    /// Packets tracked from a send.
    pub const STARTED: u32 = 7;
    /// Tracked skbs freed with `kfree_skb` (dropped) before delivery.
    pub const DROPPED: u32 = 8;
    /// Tracked skbs consumed before they reached the receiving socket.
    pub const CONSUMED_EARLY: u32 = 9;
    /// Timelines longer than `MAX_POINTS`: the extra points were not kept (hops still counted).
    pub const TRUNCATED: u32 = 10;
    /// Samples written to the ring buffer.
    pub const SAMPLES: u32 = 11;
    /// NET_RX softirq runs seen on CPUs while a tracked packet was in flight.
    pub const SOFTIRQ_RUNS: u32 = 12;
    /// Program runs the kernel skipped because another BPF program was running on the same CPU
    /// (the programs' `recursion_misses`, read by the loader): a point a packet crossed unseen.
    /// Kernels count this for raw tracepoint and fentry programs, and for kprobe and syscall
    /// tracepoint programs from 6.7; older kernels skip those silently.
    pub const PROBE_MISSES: u32 = 13;
    /// A packet to start could not be tracked: its slot in the direct-mapped flight table
    /// held another live packet (a collision of two skb addresses).
    pub const SLOT_COLLISION: u32 = 14;
    /// A traced thread's send saw a device queue of an skb of another socket (softirq work at
    /// interrupt exit, another connection's ACK): not started.
    pub const FOREIGN: u32 = 15;
    /// A passively traced journey reached its socket but could not wait there for the
    /// application's read (the socket's ring was full or its slot held by another live
    /// socket), or its data was not read within `max_gap_ns`: it ends at `sk_data_ready`
    /// without its `socket-queue` hop.
    pub const UNREAD: u32 = 16;
    pub const COUNT: u32 = 17;

    /// Human names, index-aligned with the constants above.
    pub const NAMES: [&str; COUNT as usize] = [
        "ringbuf_lost",
        "skb_map_full",
        "stale",
        "reused",
        "recv_unmatched",
        "relay_unmatched",
        "completed",
        "started",
        "dropped",
        "consumed_early",
        "truncated",
        "samples",
        "softirq_runs",
        "probe_misses",
        "slot_collision",
        "foreign",
        "unread",
    ];
}

/// Key of the `DEVS` map: a network device in a network namespace.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct DevKey {
    pub netns: u32,
    pub ifindex: u32,
}

/// One point of a packet's timeline.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct TimelinePoint {
    pub ts: u64,
    pub netns: u32,
    pub ifindex: u32,
    pub point: u16,
    pub kind: u16,
    /// Hop that ends at this point (the segment from the previous point).
    pub hop: u16,
    pub cpu: u16,
}

/// Per-skb state kept while a packet is in flight; also the sampled record sent to userspace.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct SkbState {
    /// Send syscall entry (generation of this journey: an skb address is reused later).
    pub first_ts: u64,
    pub last_ts: u64,
    /// Start of the hop currently open.
    pub hop_start: u64,
    pub skb: u64,
    pub cur_hop: u32,
    pub dir: u32,
    pub last_point: u16,
    pub last_kind: u16,
    pub npoints: u16,
    pub sampled: u16,
    pub saddr: u32,
    pub daddr: u32,
    pub sport: u16,
    pub dport: u16,
    pub tid: u32,
    /// NET_RX softirq runs and receive passes (netif_receive_skb) seen by this packet.
    pub softirqs: u16,
    pub rx_passes: u16,
    pub last_softirq: u32,
    /// Tuple when the packet reached the receiving socket (a NAT rewrite shows as a change).
    pub end_saddr: u32,
    pub end_daddr: u32,
    pub end_sport: u16,
    pub end_dport: u16,
    /// Destination the sending socket was connected to (before any OUTPUT DNAT); 0: unknown.
    pub sock_daddr: u32,
    pub sock_dport: u16,
    /// IP protocol of the packet (6, 17, 1). For ICMP the ports above hold the echo
    /// identifier (what conntrack and the ping socket treat as the port, so MASQUERADE's
    /// rewrite of it shows) and these its type, code and sequence number.
    pub proto: u8,
    pub icmp_type: u8,
    pub icmp_seq: u16,
    pub icmp_code: u8,
    pub _pad4: u8,
    pub points: [TimelinePoint; MAX_POINTS],
}

/// Exact count and sum of one hop in one direction, and netpath's own time inside it.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct HopStat {
    pub count: u64,
    pub sum_ns: u64,
    /// netpath's own time inside the hop that the programs measured (`OwnCpu::ns` deltas).
    pub own_ns: u64,
    /// netpath program runs inside the hop, each charged the calibrated cost of a run.
    pub own_runs: u64,
    /// Crossings whose own time was measured (a sample: see `LoadConfig::own_every`).
    pub own_count: u64,
}

/// Value of the per-CPU `HOPS` map, one per (direction, hop) slot: exact sums (means are
/// exact) and the log-linear histogram (percentiles within ±5%), whose buckets add up to the
/// exact count (no count of its own: one atomic add less per record). One lookup per record.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct HopHist {
    pub sum_ns: u64,
    pub own_ns: u64,
    pub own_runs: u64,
    pub own_count: u64,
    pub buckets: [u64; hist::HIST_SLOTS],
}

/// Value of the per-CPU `NF_PARTS` map: one netfilter part of followed packets, one direction.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct PartHist {
    pub sum_ns: u64,
    /// Where the last packet that crossed the part was (`part_at`; 0: no packet yet): the
    /// part lies in the segment after that point, which the timelines name.
    pub at: u64,
    pub buckets: [u64; hist::HIST_SLOTS],
}

/// `PartHist::at` of a packet whose last point was `point` on a device of `kind`.
#[inline(always)]
pub fn part_at(point: u16, kind: u16) -> u64 {
    ((point as u64) << 16 | kind as u64) + 1
}

/// `PartHist::at` of a packet still in its sender's stack (no device point yet): the part is
/// in `sender-stack`.
pub const PART_AT_SEND: u64 = u64::MAX;

/// Value of the per-CPU `OWN` map: netpath's own time on this CPU so far. Every program adds
/// one run as it starts; a program that stamps a point adds the time from its clock read to
/// its end. The difference between two stamps on one CPU is netpath's time between them: the
/// measured tails, plus the runs, which userspace charges the calibrated cost of one run
/// (dispatch and the work before a clock read).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct OwnCpu {
    pub ns: u64,
    pub runs: u64,
}

/// `OwnCpu` as a stamp saw it: low bits (differences between two stamps are small) and the CPU.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OwnSnap {
    pub ns: u32,
    pub runs: u16,
    pub cpu: u16,
}

impl OwnSnap {
    /// netpath's own time from `self` to `later`: (measured ns, program runs). On another CPU
    /// nothing between the two is known but the later program's own run.
    #[inline(always)]
    pub fn until(&self, later: &OwnSnap) -> (u32, u16) {
        if self.cpu == later.cpu {
            (
                later.ns.wrapping_sub(self.ns),
                later.runs.wrapping_sub(self.runs),
            )
        } else {
            (0, 1)
        }
    }
}

/// Compact per-skb state kept in the flight table while a packet is in flight (56 bytes: a
/// `FlightSlot` is one cache line). The full timeline (`SkbState`) is kept only for sampled
/// packets, in `TIMELINES`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct Flight {
    /// Start of the journey (generation: an skb address is reused later).
    pub first_ts: u64,
    pub last_ts: u64,
    pub hop_start: u64,
    /// The hop open since `hop_start` (`NO_HOP`: none yet).
    pub cur_hop: u16,
    pub dir: u16,
    pub last_point: u16,
    pub last_kind: u16,
    pub rx_passes: u16,
    pub softirqs: u16,
    /// `FLIGHT_*` bits.
    pub flags: u16,
    /// netpath's own accounting at the last point (`OwnSnap`, split to pack the struct).
    pub snap_cpu: u16,
    pub last_softirq: u32,
    pub snap_ns: u32,
    /// netpath's own time inside the open hop so far: measured ns and program runs.
    pub hop_own_ns: u32,
    pub snap_runs: u16,
    pub hop_own_runs: u16,
}

/// `Flight::cur_hop` before the first hop is open.
pub const NO_HOP: u16 = u16::MAX;

impl Flight {
    #[inline(always)]
    pub fn sampled(&self) -> bool {
        self.flags & FLIGHT_SAMPLED != 0
    }

    #[inline(always)]
    pub fn own(&self) -> bool {
        self.flags & FLIGHT_OWN != 0
    }

    #[inline(always)]
    pub fn snap(&self) -> OwnSnap {
        OwnSnap {
            ns: self.snap_ns,
            runs: self.snap_runs,
            cpu: self.snap_cpu,
        }
    }

    #[inline(always)]
    pub fn set_snap(&mut self, s: &OwnSnap) {
        self.snap_ns = s.ns;
        self.snap_runs = s.runs;
        self.snap_cpu = s.cpu;
    }
}

/// Value of the `TIDS` map: a traced thread's role and the per-thread points of its current
/// journey, updated in place (no map inserts or deletes on the hot path).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct TidState {
    pub role: u32,
    /// Destination port (network order) of the socket sending, when known (trace mode).
    pub dst_port: u32,
    /// Start of the send in progress (0: none).
    pub send_ts: u64,
    /// Server: when its last receive returned (0: none), closed by its next send.
    pub turn_ts: u64,
    /// skb copied by the receive in progress, and its generation.
    pub pending_skb: u64,
    pub pending_gen: u64,
    /// Relay: start and direction of the journey its send in progress continues.
    pub origin_ts: u64,
    pub origin_dir: u32,
    /// Destination address (network order) of the socket sending, when known (trace mode).
    pub dst_addr: u32,
    /// The socket (`struct sock *`) the thread sends on: from `tcp_sendmsg_locked`, else the
    /// socket of the last skb it received (syscall-bounded kernels). 0: not known yet.
    pub sock: u64,
    /// The journey whose socket wakeup woke this thread (`sched_waking`), its generation and
    /// the waker's CPU, until the thread runs (`sched_switch`). 0: none.
    pub wake_skb: u64,
    pub wake_gen: u64,
    pub wake_cpu: u32,
    /// `OWN_*` bits: whose tail this thread measures, and its send count above them.
    pub own_bits: u32,
    /// netpath's own accounting when the send in progress started, and when the server's
    /// last receive returned (the turnaround's start).
    pub send_snap: OwnSnap,
    pub turn_snap: OwnSnap,
}

/// `TidState::own_bits`: the journey the send in progress starts has its own time measured.
pub const OWN_SEND: u32 = 1;
/// `TidState::own_bits`: the server's turnaround open since its last receive is measured.
pub const OWN_TURN: u32 = 2;
/// `TidState::own_bits`: the thread's send count starts at this bit.
pub const OWN_COUNT_SHIFT: u32 = 8;

/// One entry of the direct-mapped flight table (`FLIGHTS`): the packet's state, tagged with its
/// skb address (0: free). Claimed and released with compare-and-swap on `skb`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct FlightSlot {
    pub skb: u64,
    pub flight: Flight,
}

/// One entry of the traced-thread table (`TIDS`): a thread id (0: free) and its state. A
/// thread lives in one of its two slots (`tid_slots`); the kernel claims a slot for a relay
/// thread it adopts with compare-and-swap on `tid`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct TidSlot {
    pub tid: u64,
    pub state: TidState,
}

/// Entries of the traced-thread table (a power of two).
pub const TID_SLOTS: u32 = 4096;

/// The two slots thread `tid` may live in: its low bits, and a hash of it.
#[inline(always)]
pub fn tid_slots(tid: u32) -> [u32; 2] {
    [
        tid & (TID_SLOTS - 1),
        ptr_slot(tid as u64 | 1 << 40, TID_SLOTS - 1),
    ]
}

/// One entry of the direct-mapped device cache (`DEVSLOTS`): a `struct net_device *` (0: free)
/// resolved to its key and kind.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct DevSlot {
    pub dev: u64,
    pub info: DevInfo,
}

/// Entries of the flight table (a power of two); `FLIGHT_MASK` (a load-time global) may use
/// fewer, so a test can force a tiny table.
pub const FLIGHT_SLOTS: u32 = 16384;
/// Entries of the device cache (a power of two).
pub const DEV_SLOTS: u32 = 256;
/// Words of the traced-thread and relay-process bitmaps (64 ids each; ids alias above 4M).
pub const ID_WORDS: u32 = 1 << 16;
/// Words of the woken-task bitmap (`TASK_BITS`, 64 task pointers' hashes each).
pub const TASK_WORDS: u32 = 512;

/// Slot of a pointer (skb, net_device) in a direct-mapped table of `mask + 1` entries:
/// Fibonacci hashing, so slab-aligned addresses spread over the whole table.
#[inline(always)]
pub fn ptr_slot(p: u64, mask: u32) -> u32 {
    (p.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 40) as u32 & mask
}

/// Value of the `RELAY` map (per relay process): a journey that reached the relay and waits for
/// the relay to send it on.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct RelayHold {
    pub origin_ts: u64,
    pub recv_ts: u64,
    /// netpath's own accounting when the relay had the message (the proxy hop's start).
    pub snap: OwnSnap,
    pub dir: u32,
    pub _pad: u32,
}

/// A flight started by a watched device rather than a traced send (`netpath trace` on traffic
/// netpath does not generate): it ends when a socket is woken.
pub const FLIGHT_ANY: u16 = 1;
/// A relay's second leg: it has crossed its relay already, so no relay may take it up again
/// when it reaches the far end (the relay's next send belongs to another journey).
pub const FLIGHT_RELAYED: u16 = 2;
/// The journey keeps a full timeline (`TIMELINES`) and emits it when it ends.
pub const FLIGHT_SAMPLED: u16 = 4;
/// netpath's own time is measured along this journey (one in `LoadConfig::own_every`).
pub const FLIGHT_OWN: u16 = 8;

/// A `struct net_device *` resolved to its key, kind, role and whether it is watched (the
/// `DEVS` value split up).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct DevInfo {
    pub key: DevKey,
    pub kind: u32,
    /// `devrole::*`.
    pub role: u32,
    /// 1 when the device is on the watched path (`DEV_WATCHED` in its `DEVS` value): only
    /// there does a passively traced packet start a journey. Every other device of the node
    /// is in `DEVS` for its kind alone, so the hops it bounds are named.
    pub watched: u32,
    pub _pad: u32,
}

/// Bit of a `DEVS` value (above the kind's 16 bits and the role's 8): the device is watched.
pub const DEV_WATCHED: u32 = 1 << 24;
const _: () = assert!(DEV_WATCHED > devrole::MASK << devrole::SHIFT);

/// Directions of a journey whose devices have roles (`devrole`): into the container, or out.
pub const DIR_IN: u16 = 0;
pub const DIR_OUT: u16 = 1;

/// Record of a tracked packet freed by `kfree_skb` before delivery.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct DropRecord {
    pub ts: u64,
    pub skb: u64,
    pub location: u64,
    pub reason: u32,
    pub dir: u32,
    pub netns: u32,
    pub ifindex: u32,
    pub last_point: u16,
    pub last_kind: u16,
    /// Hop in which the packet died (the hop it was in when last seen).
    pub hop: u32,
}

/// Offsets of kernel struct fields, read from BTF by the loader and handed to the programs in
/// the load-time `LoadConfig` global.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct KernelOffsets {
    pub sk_daddr: u32,
    pub sk_dport: u32,
    pub skb_dev: u32,
    pub skb_head: u32,
    pub skb_network_header: u32,
    pub skb_transport_header: u32,
    pub dev_ifindex: u32,
    pub dev_nd_net: u32,
    pub net_ns_inum: u32,
    /// `sock.sk_receive_queue.prev`: the skb TCP queued last, the one `sk_data_ready` is about.
    pub sk_rcvq_tail: u32,
    /// `sk_buff.sk`: the socket an skb belongs to.
    pub skb_sk: u32,
    /// `task_struct.pid` (the thread id).
    pub task_pid: u32,
    /// `sock_common.skc_rcv_saddr` and `.skc_num`: the address and port (host order) a socket
    /// receives on, which a datagram's receive finds its journey by.
    pub sk_rcv_saddr: u32,
    pub sk_num: u32,
    /// `tcp_sock.rcv_nxt` and `.copied_seq`: what TCP queued on a socket and what its reader
    /// consumed, so a passively traced journey ends when the application has read it.
    pub tcp_rcv_nxt: u32,
    pub tcp_copied_seq: u32,
}

#[cfg(feature = "user")]
mod pod {
    // SAFETY: all of these are repr(C), Copy, and have no implicit padding.
    unsafe impl aya::Pod for super::DevKey {}
    unsafe impl aya::Pod for super::HopStat {}
    unsafe impl aya::Pod for super::HopHist {}
    unsafe impl aya::Pod for super::PartHist {}
    unsafe impl aya::Pod for super::NftChainKey {}
    unsafe impl aya::Pod for super::Flight {}
    unsafe impl aya::Pod for super::DevInfo {}
    unsafe impl aya::Pod for super::FlightSlot {}
    unsafe impl aya::Pod for super::DevSlot {}
    unsafe impl aya::Pod for super::TidState {}
    unsafe impl aya::Pod for super::TidSlot {}
    unsafe impl aya::Pod for super::RelayHold {}
    unsafe impl aya::Pod for super::SkbState {}
    unsafe impl aya::Pod for super::DropRecord {}
    unsafe impl aya::Pod for super::TimelinePoint {}
    unsafe impl aya::Pod for super::LoadConfig {}
    unsafe impl aya::Pod for super::OwnCpu {}
    unsafe impl aya::Pod for super::OwnSnap {}
    unsafe impl aya::Pod for super::Parked {}
    unsafe impl aya::Pod for super::SockSlot {}
}

#[cfg(test)]
mod tests {
    use super::*;
    use core::mem::size_of;

    #[test]
    fn pointer_slots_stay_in_the_table_and_spread() {
        let mut seen = std::collections::BTreeSet::new();
        for i in 0..1024u64 {
            let s = ptr_slot(0xffff_8880_0400_0000 + i * 256, FLIGHT_SLOTS - 1);
            assert!(s < FLIGHT_SLOTS);
            seen.insert(s);
        }
        assert!(seen.len() > 900, "{}", seen.len());
        assert!(ptr_slot(0xffff_8880_0400_0100, 3) < 4);
    }

    #[test]
    fn a_thread_has_two_slots_in_the_table() {
        for tid in [1u32, 4095, 4096, 123_456, 4_194_303] {
            let [a, b] = tid_slots(tid);
            assert!(a < TID_SLOTS && b < TID_SLOTS);
        }
        // Ids a table size apart share their first slot, not their second.
        assert_eq!(tid_slots(7)[0], tid_slots(7 + TID_SLOTS)[0]);
        assert_ne!(tid_slots(7)[1], tid_slots(7 + TID_SLOTS)[1]);
    }

    #[test]
    fn shared_types_have_no_implicit_padding() {
        assert_eq!(size_of::<TimelinePoint>(), 8 + 4 + 4 + 2 * 4);
        assert_eq!(size_of::<DevKey>(), 8);
        assert_eq!(size_of::<HopStat>(), 40);
        assert_eq!(size_of::<OwnSnap>(), 8);
        assert_eq!(size_of::<OwnCpu>(), 16);
        assert_eq!(size_of::<DropRecord>(), 8 * 3 + 4 * 4 + 2 * 2 + 4);
        let head = 8 * 4 + 4 * 2 + 2 * 4 + 4 * 2 + 2 * 2 + 4 + 2 * 2 + 4 + 24;
        assert_eq!(
            size_of::<SkbState>(),
            head + MAX_POINTS * size_of::<TimelinePoint>()
        );
        assert_eq!(size_of::<Flight>(), 8 * 3 + 2 * 8 + 4 * 3 + 2 * 2);
        assert_eq!(size_of::<FlightSlot>(), 64, "one cache line per flight");
        assert_eq!(size_of::<DevInfo>(), 24);
        assert_eq!(size_of::<TidState>(), 8 * 9 + 4 * 4 + 2 * 8);
        assert_eq!(size_of::<FlightSlot>(), 8 + size_of::<Flight>());
        assert_eq!(size_of::<TidSlot>(), 8 + size_of::<TidState>());
        assert_eq!(size_of::<DevSlot>(), 8 + size_of::<DevInfo>());
        assert_eq!(size_of::<RelayHold>(), 32);
        assert_eq!(size_of::<HopHist>(), 32 + 8 * hist::HIST_SLOTS);
        assert_eq!(size_of::<PartHist>(), 16 + 8 * hist::HIST_SLOTS);
        assert_eq!(size_of::<Parked>(), size_of::<Flight>() + 8);
        assert_eq!(
            size_of::<SockSlot>(),
            8 * 2 + 4 * 2 + SOCK_DEPTH as usize * size_of::<Parked>()
        );
        assert!(parked_key(SOCK_SLOTS - 1, u32::MAX) < 0xffff_8000_0000_0000);
    }
}
