//! Maps, all `static`, looked up by the same names in userspace.
use aya_ebpf::{
    bindings::{BPF_RB_AVAIL_DATA, BPF_RB_FORCE_WAKEUP, BPF_RB_NO_WAKEUP},
    macros::map,
    maps::{Array, HashMap, PerCpuArray, PerCpuHashMap, RingBuf},
};
use netpath_common::{
    DEV_SLOTS, DevKey, DevSlot, FLIGHT_SLOTS, FlightSlot, HopHist, ID_WORDS, NF_BOUNDS, NSLOTS,
    OwnCpu, PartHist, QDISC_KINDS, RelayHold, SOCK_SLOTS, SkbState, SockSlot, TASK_WORDS,
    TID_SLOTS, TidSlot, counter, delay, run,
};

/// In-flight packets: the direct-mapped, tagged slot table of `flights.rs`. Entries carry their
/// generation (`first_ts`).
#[map]
pub static FLIGHTS: Array<FlightSlot> = Array::with_max_entries(FLIGHT_SLOTS, 0);
/// Per CPU: the last netfilter boundary stamped, `[skb, ns, boundary]`: a hook's entries run
/// one after another on one CPU, so the next boundary of the same packet closes the part.
#[map]
pub static NF_LAST: PerCpuArray<[u64; 3]> = PerCpuArray::with_max_entries(1, 0);
/// Netfilter parts of followed packets: per boundary `k` and direction, the time to the next
/// boundary (`k * 2 + dir`).
#[map]
pub static NF_PARTS: PerCpuArray<PartHist> = PerCpuArray::with_max_entries(NF_BOUNDS as u32 * 2, 0);
/// `--parts`: each transmit's qdisc, from `dev_queue` to `start_xmit`, of followed packets: per
/// device kind and direction (`kind * 2 + dir`); `at` holds the device's `netns << 32 | ifindex`.
#[map]
pub static QDISC_PARTS: PerCpuArray<PartHist> = PerCpuArray::with_max_entries(QDISC_KINDS * 2, 0);
/// Traced thread ids, one bit each: the cheap first filter in front of `TIDS`.
#[map]
pub static TID_BITS: Array<u64> = Array::with_max_entries(ID_WORDS, 0);
/// Traced tasks a followed journey has woken, one bit per hash of the `task_struct` pointer:
/// `sched_switch`'s first filter, so switching to any other task reads nothing of it.
#[map]
pub static TASK_BITS: Array<u64> = Array::with_max_entries(TASK_WORDS, 0);
/// Relay process ids (tgid), one bit each: the first filter in front of `RELAY_PIDS`.
#[map]
pub static RELAY_BITS: Array<u64> = Array::with_max_entries(ID_WORDS, 0);
/// Full timelines of the sampled packets in flight, keyed by skb address.
#[map]
pub static TIMELINES: HashMap<u64, SkbState> = HashMap::with_max_entries(1024, 0);
/// Traced threads → role and per-thread journey points, filled by the harness: a tagged
/// array, two slots per thread (`netpath_common::tid_slots`), so a lookup is two inlined array
/// reads, not a hash map's helper call.
#[map]
pub static TIDS: Array<TidSlot> = Array::with_max_entries(TID_SLOTS, 0);
/// Devices → `DevKind`, with `DEV_WATCHED` set for those on the watched path. Passive tracing
/// puts every device of the node here (each namespace's), so a journey's every hop is named.
#[map]
pub static DEVS: HashMap<DevKey, u32> = HashMap::with_max_entries(4096, 0);
/// Relay processes (docker-proxy), by tgid: their threads are traced as relays.
#[map]
pub static RELAY_PIDS: HashMap<u32, u32> = HashMap::with_max_entries(64, 0);
/// Relay process (tgid) → the journey it received and has not yet sent on.
#[map]
pub static RELAY: HashMap<u32, RelayHold> = HashMap::with_max_entries(256, 0);
/// The last tracked journey that woke a socket: [skb, generation, direction, time]. A splicing
/// relay's next send continues it. Handed over atomically (`relay.rs`).
#[map]
pub static LAST_READY: Array<[u64; 4]> = Array::with_max_entries(1, 0);
/// `struct net_device *` → its key and kind, direct-mapped and tagged with the pointer, so a
/// tracked packet costs one inlined array lookup per device instead of three kernel reads.
/// Cleared by the loader whenever the device set changes.
#[map]
pub static DEVSLOTS: Array<DevSlot> = Array::with_max_entries(DEV_SLOTS, 0);
/// Passively traced journeys waiting at their socket for the application's read
/// (`sockq.rs`): direct-mapped by socket address, tagged with it.
#[map]
pub static SOCKQ: Array<SockSlot> = Array::with_max_entries(SOCK_SLOTS, 0);
/// Count, sum and histogram per (direction, hop) slot.
#[map]
pub static HOPS: PerCpuArray<HopHist> = PerCpuArray::with_max_entries(NSLOTS as u32, 0);
/// Loss and bookkeeping counters (`netpath_common::counter`).
#[map]
pub static COUNTERS: PerCpuArray<u64> = PerCpuArray::with_max_entries(counter::COUNT, 0);
/// Distribution of (receive passes, NET_RX softirq runs) per packet: dir * 64 + passes * 8 + runs.
#[map]
pub static PASSES: PerCpuArray<u64> = PerCpuArray::with_max_entries(3 * 64, 0);
const SAMPLES_BYTES: u32 = 1 << 20;
/// Sampled complete timelines.
#[map]
pub static SAMPLES: RingBuf = RingBuf::with_byte_size(SAMPLES_BYTES, 0);
/// Drops of tracked packets, with the kernel's reason. Read when the run is read, never
/// waited on: records never wake a reader (`BPF_RB_NO_WAKEUP`).
#[map]
pub static DROPS: RingBuf = RingBuf::with_byte_size(1 << 16, 0);
/// Scratch space to build an `SkbState` without using the 512-byte stack.
#[map]
pub static SCRATCH: PerCpuArray<SkbState> = PerCpuArray::with_max_entries(1, 0);
/// Per CPU: [skb, generation] of the journey whose socket wakeup runs here, for the
/// `sched_waking` of its reader (`sched.rs`).
#[map]
pub static WAKECPU: PerCpuArray<[u64; 2]> = PerCpuArray::with_max_entries(1, 0);
/// Per CPU: [last tracked skb received, its time, NET_RX softirq run sequence].
#[map]
pub static RXCPU: PerCpuArray<[u64; 3]> = PerCpuArray::with_max_entries(1, 0);
/// What the loader set for the current run (`netpath_common::run`): the protocol the harness
/// sends, whether relays are followed.
#[map]
pub static RUN: Array<u32> = Array::with_max_entries(run::COUNT, 0);
/// `netpath validate`'s injected delay (`netpath_common::delay`): ns, minimum packet length,
/// packets held.
#[map]
pub static DELAY: Array<u64> = Array::with_max_entries(delay::COUNT, 0);
/// netpath's own time per CPU (`own.rs`).
#[map]
pub static OWN: PerCpuArray<OwnCpu> = PerCpuArray::with_max_entries(1, 0);

/// Datagram journeys: (destination address << 16 | port) at their last receive pass →
/// [skb, generation], for the receive that returns them (`dgram.rs`).
#[map]
pub static DGRAM_RX: HashMap<u64, [u64; 2]> = HashMap::with_max_entries(1024, 0);
/// TC packet and byte counts per (ifindex << 1 | egress).
#[map]
pub static TC_STATS: PerCpuHashMap<u64, [u64; 2]> = PerCpuHashMap::with_max_entries(1024, 0);

/// Flags for a record in `SAMPLES`. A reader woken for every record costs an irq_work
/// self-interrupt each, a VM exit in a guest (`cargo xtask profile` measured 2.7 µs a record
/// here, inside the sampled journey's last hop): the reader is woken only once a quarter of
/// the ring is used, and wakes every 100 ms anyway (`probe/tracer/samples.rs`).
#[inline(always)]
pub fn samples_flags() -> u64 {
    if SAMPLES.query(BPF_RB_AVAIL_DATA as u64) >= (SAMPLES_BYTES / 4) as u64 {
        BPF_RB_FORCE_WAKEUP as u64
    } else {
        BPF_RB_NO_WAKEUP as u64
    }
}

/// Counts one event. Atomic: a program nested on this CPU may bump the same counter.
#[inline(always)]
pub fn bump(idx: u32) {
    if let Some(c) = COUNTERS.get_ptr_mut(idx) {
        crate::atomic::add(c, 1);
    }
}
