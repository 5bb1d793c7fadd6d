//! The per-packet state machine every probe family feeds. A probe reports "skb S reached point P
//! (on device D)"; this module keeps the packet's compact state, names the segment with
//! `netpath_common::hop::hop_between`, and accumulates per-hop counts, sums and histograms in
//! per-CPU maps. Only sampled packets keep a full timeline and produce a ring-buffer record.
use aya_ebpf::helpers::{bpf_get_current_pid_tgid, bpf_get_smp_processor_id, bpf_ktime_get_ns};
use netpath_common::{
    DEV_SLOTS, DevInfo, DevKey, DevKind, DropRecord, FLIGHT_ANY, FLIGHT_RELAYED, Flight, Hop,
    Point, ROLE_RELAY, ROLE_SERVER, TidState, TimelinePoint, counter, hist, hop, ptr_slot,
};

use crate::{
    atomic, flights, kernel,
    maps::*,
    relay, sched,
    tids::traced,
    timeline::{append_point, emit_timeline, new_record, note_end_tuple, start_timeline},
};

const NO_HOP: u32 = u32::MAX;

#[inline(always)]
pub fn now() -> u64 {
    unsafe { bpf_ktime_get_ns() }
}

#[inline(always)]
pub fn current_tid() -> u32 {
    bpf_get_current_pid_tgid() as u32
}

/// Adds one event of `d` ns to the (direction, hop) slot. Atomic adds: a program nested on
/// this CPU (softirq over a process-context program) may record into the same slot.
#[inline(always)]
pub fn record(dir: u32, hop: u32, d: u64) {
    if hop >= netpath_common::NHOPS as u32 || dir >= netpath_common::NDIRS as u32 {
        return;
    }
    if let Some(h) = HOPS.get_ptr_mut(hop::slot(dir, hop)) {
        let b = hist::bucket(d) as usize & (hist::HIST_SLOTS - 1);
        unsafe {
            atomic::add(&raw mut (*h).count, 1);
            atomic::add(&raw mut (*h).sum_ns, d);
            atomic::add(&raw mut (*h).buckets[b], 1);
        }
    }
}

/// Moves a tracked packet to `point`: closes the open hop if the segment names another one.
#[inline(always)]
pub fn advance(f: *mut Flight, skb: u64, point: u16, kind: u16, key: DevKey, t: u64) {
    let f = unsafe { &mut *f };
    let h = hop::hop_between(f.last_point, f.last_kind, point, kind) as u32;
    if h != f.cur_hop {
        if f.cur_hop != NO_HOP {
            record(f.dir, f.cur_hop, f.last_ts - f.hop_start);
        }
        f.cur_hop = h;
        f.hop_start = f.last_ts;
    }
    f.last_ts = t;
    f.last_point = point;
    f.last_kind = kind;
    if f.sampled != 0 {
        append_point(skb, point, kind, key, h, t);
    }
}

/// The device a point happened on: the probe's, else `skb->dev`; none yet (a NAT rewrite in
/// netfilter OUTPUT, before routing set it) is a point without a device, not an error.
#[inline(always)]
fn point_dev(skb: u64, dev: u64) -> Result<DevInfo, i64> {
    let dev = if dev != 0 { dev } else { kernel::skb_dev(skb)? };
    if dev == 0 {
        return Ok(DevInfo::default());
    }
    dev_info(dev)
}

/// Key and kind of a device, through the direct-mapped per-pointer cache. The tag is read
/// before and after the entry and the writer clears it while it writes, so an entry another
/// CPU is rewriting is never taken for this device's.
#[inline(always)]
fn dev_info(dev: u64) -> Result<DevInfo, i64> {
    let s = DEVSLOTS
        .get_ptr_mut(ptr_slot(dev, DEV_SLOTS - 1))
        .ok_or(-1i64)?;
    let tag = unsafe { &raw mut (*s).dev };
    if unsafe { core::ptr::read_volatile(tag) } == dev {
        let info = unsafe { (*s).info };
        if unsafe { core::ptr::read_volatile(tag) } == dev {
            return Ok(info);
        }
    }
    let key = kernel::dev_key(dev)?;
    let kind = unsafe { DEVS.get(key).copied().unwrap_or(0) };
    let info = DevInfo { key, kind, _pad: 0 };
    atomic::xchg(tag, 0);
    unsafe { (*s).info = info };
    atomic::xchg(tag, dev);
    Ok(info)
}

/// Starts tracking `skb`, the first skb of the send traced thread `tid` has in progress.
#[inline(always)]
fn start(
    tid: u32,
    ts: &mut TidState,
    skb: u64,
    dev: DevInfo,
    t: u64,
    point: Point,
) -> Result<(), i64> {
    let send_ts = ts.send_ts;
    // One skb per send: later skbs of the same send (bulk) or pure ACKs are not followed.
    ts.send_ts = 0;
    if t.wrapping_sub(send_ts) > kernel::max_gap_ns() {
        bump(counter::STALE);
        return Ok(());
    }
    // A relay's send continues the journey that reached it: same start, same direction.
    let (first_ts, dir) = match ts.role {
        ROLE_RELAY => (ts.origin_ts, ts.origin_dir),
        ROLE_SERVER => (send_ts, 1),
        _ => (send_ts, 0),
    };
    let started = COUNTERS.get_ptr_mut(counter::STARTED).ok_or(-1i64)?;
    // This CPU's count decides sampling (one in `every` per CPU); the add itself is atomic.
    let n = unsafe { core::ptr::read_volatile(started) };
    atomic::add(started, 1);
    let every = kernel::sample_every();
    let sampled = every != 0 && n % every as u64 == 0;
    // The packet is born at its first device queue: the sender-stack hop is already open.
    let h = hop::hop_between(Point::SendEnter as u16, 0, point as u16, dev.kind as u16);
    let f = Flight {
        first_ts,
        last_ts: t,
        hop_start: send_ts,
        cur_hop: h as u32,
        dir,
        last_point: point as u16,
        last_kind: dev.kind as u16,
        sampled: sampled as u16,
        rx_passes: 0,
        softirqs: 0,
        // Passively traced (`trace --container`), a relayed leg ends at its socket too.
        flags: match (ts.role == ROLE_RELAY, kernel::trace_any()) {
            (true, true) => FLIGHT_RELAYED | FLIGHT_ANY,
            (true, false) => FLIGHT_RELAYED,
            _ => 0,
        },
        last_softirq: u32::MAX,
    };
    if sampled {
        // A record that does not fit is counted; the packet is still followed.
        let dst = (ts.dst_addr, ts.dst_port as u16);
        let _ = start_timeline(tid, skb, &f, send_ts, ts.role == ROLE_RELAY, dst);
        append_point(skb, point as u16, dev.kind as u16, dev.key, h as u32, t);
    }
    // An address that came back without a free we saw (deferred free) is a new generation
    // (counted `reused` by the claim).
    if !flights::claim(skb, &f) && sampled {
        let _ = TIMELINES.remove(skb);
    }
    Ok(())
}

/// A device-level point: `dev` is the `struct net_device *` if the probe has it, else 0
/// (read from `skb->dev`).
#[inline(always)]
pub fn on_dev_point(skb: u64, dev: u64, point: Point) -> Result<(), i64> {
    // Hot path: most skbs are not ours. Decide that with one inlined array lookup, before any
    // clock read or kernel memory read.
    let mut f = flights::get(skb);
    if let Some(old) = f {
        let lp = unsafe { (*old).last_point };
        let lk = unsafe { (*old).last_kind };
        // A veth, loopback or bridge-port transmit always ends in the peer's netif_rx: a
        // second queue right after it is a new packet at a recycled address (TCP reuses the
        // fclone companion's address for its next segment).
        // Likewise a packet waiting in the backlog (netif_rx) is received before anything else.
        let requeued = point == Point::DevQueue
            && (lp == Point::NetifRx as u16
                || lp == Point::DevQueue as u16
                    && (lk == DevKind::Veth as u16
                        || lk == DevKind::Loopback as u16
                        || lk == DevKind::BridgePort as u16));
        if lp == Point::SockReady as u16
            || lp == Point::Copy as u16
            || lp == Point::SchedWaking as u16
            || lp == Point::SchedSwitch as u16
            || requeued
        {
            // A packet delivered to a socket never returns to a device: this address was freed
            // unseen (splice, deferred free) and reused. New generation.
            bump(counter::REUSED);
            forget(skb, unsafe { (*old).sampled });
            f = None;
        }
    }
    let f = match f {
        Some(f) => f,
        // A packet is born at its first device queue inside a traced send, or at a NAT rewrite
        // there (netfilter OUTPUT runs before the device queue; function probes only).
        None if point == Point::DevQueue || point == Point::NatManip => {
            let tid = current_tid();
            let ts = match traced(tid) {
                Some(ts) if ts.send_ts != 0 => ts,
                _ if kernel::trace_any() => return start_any(skb, dev, point),
                _ if kernel::icmp_echo() && point == Point::DevQueue => {
                    return echo_reply(skb);
                }
                _ => return Ok(()),
            };
            // Softirq work at interrupt exit (another connection's segment, an ACK) runs in
            // the traced thread's context too: only its own socket's skb starts a journey.
            if !own_skb(ts, skb) {
                bump(counter::FOREIGN);
                return Ok(());
            }
            let t = now();
            let info = point_dev(skb, 0)?;
            if !kernel::filter_pass(skb, &info.key) {
                ts.send_ts = 0;
                return Ok(());
            }
            return start(tid, ts, skb, info, t, point);
        }
        None if kernel::trace_any() => return start_any(skb, dev, point),
        None => return Ok(()),
    };
    let t = now();
    if t.wrapping_sub(unsafe { (*f).last_ts }) > kernel::max_gap_ns() {
        bump(counter::STALE);
        forget(skb, unsafe { (*f).sampled });
        return Ok(());
    }
    let info = point_dev(skb, dev)?;
    if point == Point::NetifReceive {
        on_receive_pass(f, skb, t);
    }
    advance(f, skb, point as u16, info.kind as u16, info.key, t);
    Ok(())
}

/// `--proto icmp`: a packet queued on a path device outside a traced send may be the
/// kernel's echo reply to a followed request (`icmp.rs`).
#[inline(always)]
fn echo_reply(skb: u64) -> Result<(), i64> {
    let info = point_dev(skb, 0)?;
    if info.kind == 0 {
        return Ok(());
    }
    crate::icmp::on_queue(skb, info.key, info.kind)?;
    Ok(())
}

/// Whether `skb` belongs to the socket the traced thread sends on: exactly when the socket is
/// known (`tcp_sendmsg_locked`, or learnt from the thread's receives on syscall-bounded
/// kernels), else any skb with a socket (forwarded and softirq-built packets have none).
#[inline(always)]
fn own_skb(ts: &TidState, skb: u64) -> bool {
    let sk = kernel::skb_sk(skb);
    if ts.sock != 0 { sk == ts.sock } else { sk != 0 }
}

/// `netpath trace` on traffic netpath does not generate: a packet starts when first seen on a
/// watched device and passes the filters.
#[inline(always)]
fn start_any(skb: u64, dev: u64, point: Point) -> Result<(), i64> {
    if point == Point::SockReady || point == Point::Copy {
        return Ok(());
    }
    let info = point_dev(skb, dev)?;
    if info.kind == 0 || !kernel::filter_pass(skb, &info.key) {
        return Ok(());
    }
    // Pure ACKs never wake a reader: they would never end, so only data is followed.
    if kernel::tcp_payload(skb).unwrap_or(0) == 0 {
        return Ok(());
    }
    let t = now();
    let started = COUNTERS.get_ptr_mut(counter::STARTED).ok_or(-1i64)?;
    unsafe { *started += 1 };
    let f = Flight {
        first_ts: t,
        last_ts: t,
        hop_start: t,
        cur_hop: NO_HOP,
        dir: 0,
        last_point: point as u16,
        last_kind: info.kind as u16,
        sampled: 1,
        rx_passes: (point == Point::NetifReceive) as u16,
        softirqs: 0,
        flags: FLIGHT_ANY,
        last_softirq: u32::MAX,
    };
    let first = TimelinePoint {
        ts: t,
        netns: info.key.netns,
        ifindex: info.key.ifindex,
        point: point as u16,
        kind: info.kind as u16,
        hop: Hop::Other as u16,
        cpu: unsafe { bpf_get_smp_processor_id() } as u16,
    };
    if new_record(skb, 0, &f, first, 0, 0).is_err() {
        return Ok(());
    }
    if !flights::claim(skb, &f) {
        let _ = TIMELINES.remove(skb);
    }
    Ok(())
}

/// Ends a device-started flight when its socket is woken: that is as far as netpath can follow
/// a packet to a process it does not trace.
#[inline(always)]
fn finish_any(skb: u64, f: *mut Flight, t: u64) {
    let f = unsafe { &*f };
    record(f.dir, f.cur_hop, t - f.hop_start);
    record(f.dir, Hop::OneWay as u32, t - f.first_ts);
    bump(counter::COMPLETED);
    emit_timeline(skb, f, t);
    flights::release(skb);
}

#[inline(always)]
pub fn forget(skb: u64, sampled: u16) {
    flights::release(skb);
    if sampled != 0 {
        let _ = TIMELINES.remove(skb);
    }
}

/// A receive pass: count it, count the NET_RX softirq run carrying it if it is a new one,
/// and remember the skb on this CPU for `sk_data_ready`, which has only the socket.
#[inline(always)]
fn on_receive_pass(f: *mut Flight, skb: u64, t: u64) {
    let f = unsafe { &mut *f };
    f.rx_passes = f.rx_passes.saturating_add(1);
    if let Some(rx) = RXCPU.get_ptr_mut(0) {
        let rx = unsafe { &mut *rx };
        let cpu = unsafe { bpf_get_smp_processor_id() };
        let run = ((cpu as u64) << 24 | (rx[2] & 0xff_ffff)) as u32;
        if run != f.last_softirq {
            f.softirqs = f.softirqs.saturating_add(1);
            f.last_softirq = run;
        }
        rx[0] = skb;
        rx[1] = t;
    }
    if kernel::dgram() {
        crate::dgram::on_receive_pass(skb, f.first_ts);
    }
    // Without sock:sk_data_ready (before 6.7) the last receive pass is the last point a
    // splicing relay's journey reaches.
    if kernel::ready_fallback() {
        if f.flags & FLIGHT_RELAYED == 0 {
            relay::publish(skb, f.first_ts, f.dir, t);
        }
        // No sk_data_ready: the socket's wakeup follows this receive pass on this CPU.
        sched::arm(skb, f.first_ts);
    }
}

/// A function-probe point (kprobe/fentry backends): same state machine as the device points.
#[inline(always)]
pub fn on_fn_point(skb: u64, dev: u64, point: Point) -> Result<(), i64> {
    if skb == 0 {
        return Ok(());
    }
    on_dev_point(skb, dev, point)
}

/// `irq:softirq_entry` for NET_RX: a new softirq run on this CPU.
#[inline(always)]
pub fn on_net_rx_softirq() {
    if let Some(rx) = RXCPU.get_ptr_mut(0) {
        unsafe { (*rx)[2] += 1 };
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

/// `sock:sk_data_ready` on socket `sk`: attributed to the skb TCP just queued on it (the tail of
/// its receive queue), else to the last tracked skb received on this CPU if that skb is this
/// socket's (its source is the socket's peer: a segment coalesced into an older tail skb has
/// no `skb->sk`). The queue finds it also when the wakeup comes later from the socket
/// backlog, in process context, on another CPU.
#[inline(always)]
pub fn on_sock_ready(sk: u64) -> Result<(), i64> {
    let rx = RXCPU.get_ptr_mut(0).ok_or(-1i64)?;
    let tail = kernel::sk_rcvq_tail(sk);
    let queued = match flights::get(tail) {
        Some(f) if receiving(unsafe { (*f).last_point }) => Some((tail, f)),
        _ => None,
    };
    let (skb, f) = match queued {
        Some(q) => q,
        None => {
            let last = unsafe { (*rx)[0] };
            match flights::get(last) {
                Some(f) if receiving(unsafe { (*f).last_point }) && peer_of(sk, last) => (last, f),
                _ => return Ok(()),
            }
        }
    };
    if unsafe { (*rx)[0] } == skb {
        unsafe { (*rx)[0] = 0 };
    }
    let t = now();
    advance(f, skb, Point::SockReady as u16, 0, DevKey::default(), t);
    let fl = unsafe { &*f };
    if fl.sampled != 0 {
        note_end_tuple(skb);
    }
    if fl.flags & FLIGHT_ANY != 0 {
        // Passively traced (`trace --container` on a published port): a relay (docker-proxy)
        // may send this journey on, from this wakeup, as below.
        if fl.flags & FLIGHT_RELAYED == 0 {
            relay::publish(skb, fl.first_ts, fl.dir, t);
        }
        finish_any(skb, f, t);
        return Ok(());
    }
    // A relay that splices never copies nor returns from a receive: the last point of the
    // journey it relays is this wakeup. Publish it for the relay's next send.
    if fl.flags & FLIGHT_RELAYED == 0 {
        relay::publish(skb, fl.first_ts, fl.dir, t);
    }
    // The reader this wakes (if asleep) is woken next on this CPU.
    sched::arm(skb, fl.first_ts);
    Ok(())
}

/// Whether `skb` came from the peer `sk` is connected to (source = the socket's destination).
#[inline(always)]
fn peer_of(sk: u64, skb: u64) -> bool {
    match (kernel::sk_dest(sk), kernel::skb_tuple(skb)) {
        (Ok((a, p)), Ok((sa, _, sp, _, _))) => a == sa && p == sp,
        _ => false,
    }
}

/// `skb:skb_copy_datagram_iovec` in a traced receiver: the data reaches the user buffer.
#[inline(always)]
pub fn on_copy(skb: u64) -> Result<(), i64> {
    let f = match flights::get(skb) {
        Some(f) => f,
        None => return Ok(()),
    };
    if unsafe { (*f).flags } & FLIGHT_ANY != 0 {
        // Kernels without sock:sk_data_ready (before 6.7): a device-started journey ends at
        // the copy to the receiving process instead.
        let t = now();
        advance(f, skb, Point::Copy as u16, 0, DevKey::default(), t);
        note_end_tuple(skb);
        finish_any(skb, f, t);
        return Ok(());
    }
    let ts = match traced(current_tid()) {
        Some(ts) => ts,
        None => return Ok(()),
    };
    if unsafe { (*f).last_point } != Point::Copy as u16 {
        advance(f, skb, Point::Copy as u16, 0, DevKey::default(), now());
        if unsafe { (*f).sampled } != 0 {
            note_end_tuple(skb);
        }
    }
    // Syscall-bounded kernels do not show the sending socket: a thread's connection is the
    // one it receives on (request/response), learnt here once.
    if ts.sock == 0 {
        ts.sock = kernel::skb_sk(skb);
    }
    relay::withdraw(skb);
    ts.pending_skb = skb;
    ts.pending_gen = unsafe { (*f).first_ts };
    Ok(())
}

/// `skb:kfree_skb` / `skb:consume_skb` of a tracked skb before its data was copied out.
#[inline(always)]
pub fn on_free(skb: u64, location: u64, reason: u32, dropped: bool) -> Result<(), i64> {
    let f = match flights::get(skb) {
        Some(f) => unsafe { &*f },
        None => return Ok(()),
    };
    if f.last_point == Point::Copy as u16 || f.last_point == Point::RecvExit as u16 {
        // Freed after delivery: the receive exit completes it.
        return Ok(());
    }
    if !dropped && kernel::dgram() && receiving(f.last_point) {
        // UDP's receive may take a datagram off the queue (and free it, deferred, on another
        // CPU) before its wakeup is traced: the receive's return completes it (`dgram.rs`).
        return Ok(());
    }
    let at_socket = f.last_point == Point::SockReady as u16
        || f.last_point == Point::SchedWaking as u16
        || f.last_point == Point::SchedSwitch as u16;
    if !dropped && at_socket {
        // Consumed after it reached the socket (a splicing relay takes it this way): the
        // journey is delivered; the relay's send or the copy continues it.
        return Ok(());
    }
    if dropped {
        bump(counter::DROPPED);
        let key = kernel::skb_dev(skb)
            .and_then(kernel::dev_key)
            .unwrap_or_default();
        let rec = DropRecord {
            ts: now(),
            skb,
            location,
            reason,
            dir: f.dir,
            netns: key.netns,
            ifindex: key.ifindex,
            last_point: f.last_point,
            last_kind: f.last_kind,
            hop: f.cur_hop,
        };
        if DROPS.output::<DropRecord>(&rec, 0).is_err() {
            bump(counter::RINGBUF_LOST);
        }
    } else {
        bump(counter::CONSUMED_EARLY);
    }
    forget(skb, f.sampled);
    Ok(())
}
