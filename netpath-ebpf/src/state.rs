//! The state machine's primitives, below every hook module: per-hop records, moving a tracked
//! packet to its next point, and ending a journey. The hook modules (`path`, `journey`,
//! `relay`, `sched`, `icmp`) build on these and never on each other's internals.
use aya_ebpf::helpers::bpf_get_current_pid_tgid;
use netpath_common::{
    DevKey, FLIGHT_OWN, FLIGHT_SAMPLED, Flight, Hop, NO_HOP, Point, counter, hist, hop,
};

use crate::{
    atomic, flights,
    maps::*,
    own::Stamp,
    timeline::{append_point, emit_timeline},
};

#[inline(always)]
pub fn current_tid() -> u32 {
    bpf_get_current_pid_tgid() as u32
}

/// Adds one crossing of `d` ns to the (direction, hop) slot, with netpath's own time inside it
/// (measured ns, runs) when it was measured; the buckets' sum is the count. Plain adds: the
/// slot is this CPU's, and only a program nesting on this CPU (softirq over process context)
/// between one add's load and store could lose an update, where a locked add would cost every
/// record (two per hop crossing, the hot path's most frequent write).
#[inline(always)]
pub fn record(dir: u32, hop: u32, d: u64, own: Option<(u32, u16)>) {
    if hop >= netpath_common::NHOPS as u32 || dir >= netpath_common::NDIRS as u32 {
        return;
    }
    if let Some(h) = HOPS.get_ptr_mut(hop::slot(dir, hop)) {
        let b = hist::bucket(d) as usize & (hist::HIST_SLOTS - 1);
        unsafe {
            (*h).sum_ns += d;
            (*h).buckets[b] += 1;
            if let Some((ns, runs)) = own {
                (*h).own_ns += ns as u64;
                (*h).own_runs += runs as u64;
                (*h).own_count += 1;
            }
        }
    }
}

/// Records the hop open in `f` as ending at `t`.
#[inline(always)]
pub fn close_hop(f: &Flight, t: u64) {
    if f.cur_hop != NO_HOP {
        record(
            f.dir as u32,
            f.cur_hop as u32,
            t.wrapping_sub(f.hop_start),
            f.own().then_some((f.hop_own_ns, f.hop_own_runs)),
        );
    }
}

/// Moves a tracked packet to `point` at stamp `st`: the segment from its last point is named
/// by the hop model; a segment of another hop than the open one closes that hop (at the last
/// point) and opens the new one. netpath's own time in the segment goes to the segment's hop.
#[inline(always)]
pub fn advance(f: *mut Flight, skb: u64, point: u16, kind: u16, key: DevKey, st: &Stamp) {
    let f = unsafe { &mut *f };
    let h = hop::hop_between(f.last_point, f.last_kind, point, kind) as u16;
    let (own_ns, own_runs) = if f.own() {
        f.snap().until(&st.own)
    } else {
        (0, 0)
    };
    if h != f.cur_hop {
        close_hop(f, f.last_ts);
        f.cur_hop = h;
        f.hop_start = f.last_ts;
        f.hop_own_ns = own_ns;
        f.hop_own_runs = own_runs;
    } else {
        f.hop_own_ns = f.hop_own_ns.wrapping_add(own_ns);
        f.hop_own_runs = f.hop_own_runs.saturating_add(own_runs);
    }
    f.last_ts = st.t;
    f.last_point = point;
    f.last_kind = kind;
    f.set_snap(&st.own);
    if f.sampled() {
        append_point(skb, point, kind, key, h as u32, st.t);
    }
}

#[inline(always)]
pub fn forget(skb: u64, sampled: bool) {
    flights::release(skb);
    if sampled {
        let _ = TIMELINES.remove(skb);
    }
}

/// Last point of a packet that has been received but has not yet reached its socket: its
/// last receive pass, or the IP/TCP receive a function probe saw after it.
#[inline(always)]
pub fn receiving(last_point: u16) -> bool {
    last_point == Point::NetifReceive as u16
        || last_point == Point::IpRcv as u16
        || last_point == Point::TcpRcv as u16
}

/// A journey's end at `t` (its last hop already recorded): one-way time, receive passes and
/// softirq runs, the completed count and the timeline; the skb is no longer followed. The
/// one-way slot carries no own time of its own: userspace sums its hops'.
#[inline(always)]
pub fn complete(skb: u64, f: &Flight, t: u64) {
    record(
        f.dir as u32,
        Hop::OneWay as u32,
        t.wrapping_sub(f.first_ts),
        None,
    );
    let p = (f.rx_passes as u32).min(7) * 8 + (f.softirqs as u32).min(7);
    // Per CPU, like `record`'s slots.
    if let Some(c) = PASSES.get_ptr_mut((f.dir as u32 & 3) * 64 + (p & 63)) {
        unsafe { *c += 1 };
    }
    bump(counter::COMPLETED);
    if f.sampled() {
        emit_timeline(skb, f, t);
    }
    flights::release(skb);
}

/// Counts a journey started and gives its flags: whether it keeps a full timeline and whether
/// its own time is measured. This CPU's count decides (one in `sample_every`, one in
/// `own_every`, per CPU); the add itself is atomic.
#[inline(always)]
pub fn begin_journey() -> Result<u16, i64> {
    let n = count_started()?;
    let every = crate::kernel::sample_every();
    let mut flags = 0;
    if every != 0 && n.is_multiple_of(every as u64) {
        flags |= FLIGHT_SAMPLED;
    }
    if crate::own::measured(n) {
        flags |= FLIGHT_OWN;
    }
    Ok(flags)
}

/// Counts a journey started on this CPU and gives the count before it. Atomic: a program
/// nested on this CPU may count at once.
#[inline(always)]
pub fn count_started() -> Result<u64, i64> {
    let started = COUNTERS.get_ptr_mut(counter::STARTED).ok_or(-1i64)?;
    let n = unsafe { core::ptr::read_volatile(started) };
    atomic::add(started, 1);
    Ok(n)
}

/// A new flight born at `point` on a device of `kind` at stamp `st`; its first hop (opened by
/// the send at `hop_start`, with `own` netpath time since) is the one the model names from a
/// send to that point.
#[inline(always)]
pub fn new_flight(
    first_ts: u64,
    hop_start: u64,
    dir: u16,
    (point, kind): (Point, u16),
    st: &Stamp,
    own: (u32, u16),
    flags: u16,
) -> Flight {
    let h = hop::hop_between(Point::SendEnter as u16, 0, point as u16, kind);
    let mut f = Flight {
        first_ts,
        last_ts: st.t,
        hop_start,
        cur_hop: h as u16,
        dir,
        last_point: point as u16,
        last_kind: kind,
        rx_passes: 0,
        softirqs: 0,
        flags,
        snap_cpu: 0,
        last_softirq: u32::MAX,
        snap_ns: 0,
        hop_own_ns: own.0,
        snap_runs: 0,
        hop_own_runs: own.1,
    };
    f.set_snap(&st.own);
    f
}
