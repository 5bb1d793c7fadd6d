//! The per-packet state machine every probe family feeds. A probe reports "skb S reached point P
//! (on device D)"; this module keeps the packet's state, names the segment with
//! `netpath_common::hop::hop_between`, and accumulates per-hop counts, sums and histograms in
//! per-CPU maps. Only sampled packets produce a ring-buffer record.
use aya_ebpf::helpers::{bpf_get_current_pid_tgid, bpf_get_smp_processor_id, bpf_ktime_get_ns};
use netpath_common::{
    DevKey, DropRecord, Hop, MAX_POINTS, Point, ROLE_SERVER, SkbState, TimelinePoint,
    counter, hist, hop,
};

use crate::{kernel, maps::*};

const NO_HOP: u32 = u32::MAX;

#[inline(always)]
pub fn now() -> u64 {
    unsafe { bpf_ktime_get_ns() }
}

#[inline(always)]
pub fn current_tid() -> u32 {
    bpf_get_current_pid_tgid() as u32
}

/// Role of the current thread, if traced.
#[inline(always)]
pub fn traced_role(tid: u32) -> Option<u32> {
    unsafe { TIDS.get(&tid).copied() }
}

#[inline(always)]
fn record(dir: u32, hop: u32, d: u64) {
    if hop >= netpath_common::NHOPS as u32 || dir >= netpath_common::NDIRS as u32 {
        return;
    }
    let s = hop::slot(dir, hop);
    if let Some(st) = STATS.get_ptr_mut(s) {
        unsafe {
            (*st).count += 1;
            (*st).sum_ns += d;
        }
    }
    let b = s * hist::NBUCKETS as u32 + hist::bucket(d);
    if let Some(c) = HIST.get_ptr_mut(b) {
        unsafe { *c += 1 };
    }
}

/// Moves a tracked packet to `point`: closes the open hop if the segment names another one.
#[inline(always)]
fn advance(st: *mut SkbState, point: u16, kind: u16, key: DevKey, t: u64) {
    let s = unsafe { &mut *st };
    let h = hop::hop_between(s.last_point, s.last_kind, point, kind) as u32;
    if h != s.cur_hop {
        if s.cur_hop != NO_HOP {
            record(s.dir, s.cur_hop, s.last_ts - s.hop_start);
        }
        s.cur_hop = h;
        s.hop_start = s.last_ts;
    }
    s.last_ts = t;
    s.last_point = point;
    s.last_kind = kind;
    if s.sampled != 0 {
        let n = s.npoints as usize;
        if n < MAX_POINTS {
            s.points[n] = TimelinePoint {
                ts: t,
                netns: key.netns,
                ifindex: key.ifindex,
                point,
                kind,
                hop: h as u16,
                cpu: unsafe { bpf_get_smp_processor_id() } as u16,
            };
            s.npoints += 1;
        } else {
            bump(counter::TRUNCATED);
        }
    }
    bump(counter::EVENTS);
}

#[inline(always)]
fn dev_kind(key: &DevKey) -> u16 {
    unsafe { DEVS.get(key).map(|k| *k as u16).unwrap_or(0) }
}

/// Starts tracking `skb` if the current thread is inside a traced send syscall.
#[inline(always)]
fn start(tid: u32, send_ts: u64, skb: u64, key: DevKey, kind: u16, t: u64) -> Result<(), i64> {
    // One skb per send: later skbs of the same send (bulk) or pure ACKs are not followed.
    let _ = SEND_TS.remove(&tid);
    if t.wrapping_sub(send_ts) > kernel::max_gap_ns() {
        bump(counter::STALE);
        return Ok(());
    }
    let role = traced_role(tid).unwrap_or(0);
    let dir = if role == ROLE_SERVER { 1 } else { 0 };
    let st = SCRATCH.get_ptr_mut(0).ok_or(-1i64)?;
    let started = COUNTERS.get_ptr_mut(counter::STARTED).ok_or(-1i64)?;
    let every = kernel::sample_every();
    let n = unsafe { *started };
    let (saddr, daddr, sport, dport) = kernel::skb_tuple(skb).unwrap_or((0, 0, 0, 0));
    unsafe {
        *started = n + 1;
        let s = &mut *st;
        s.first_ts = send_ts;
        s.last_ts = send_ts;
        s.hop_start = send_ts;
        s.skb = skb;
        s.cur_hop = NO_HOP;
        s.dir = dir;
        s.last_point = Point::SendEnter as u16;
        s.last_kind = 0;
        s.npoints = 0;
        s.sampled = (every != 0 && n % every as u64 == 0) as u16;
        s.saddr = saddr;
        s.daddr = daddr;
        s.sport = sport;
        s.dport = dport;
        s.tid = tid;
        s.softirqs = 0;
        s.rx_passes = 0;
        s.last_softirq = u32::MAX;
        if s.sampled != 0 {
            s.points[0] = TimelinePoint {
                ts: send_ts,
                netns: 0,
                ifindex: 0,
                point: Point::SendEnter as u16,
                kind: 0,
                hop: Hop::SenderStack as u16,
                cpu: bpf_get_smp_processor_id() as u16,
            };
            s.npoints = 1;
        }
    }
    if SKBS.get_ptr(&skb).is_some() {
        // The address came back without a free we saw (deferred free): new generation.
        bump(counter::REUSED);
    }
    if SKBS.insert(&skb, unsafe { &*st }, 0).is_err() {
        bump(counter::SKB_MAP_FULL);
        return Ok(());
    }
    if let Some(st) = SKBS.get_ptr_mut(&skb) {
        advance(st, Point::DevQueue as u16, kind, key, t);
    }
    Ok(())
}

/// Looks up a tracked skb, discarding state older than `MAX_GAP_NS`.
#[inline(always)]
fn tracked(skb: u64, t: u64) -> Option<*mut SkbState> {
    let st = SKBS.get_ptr_mut(&skb)?;
    if t.wrapping_sub(unsafe { (*st).last_ts }) > kernel::max_gap_ns() {
        bump(counter::STALE);
        let _ = SKBS.remove(&skb);
        return None;
    }
    Some(st)
}

/// A device-level point: `dev` is the `struct net_device *` if the probe has it, else 0
/// (read from `skb->dev`).
#[inline(always)]
pub fn on_dev_point(skb: u64, dev: u64, point: Point) -> Result<(), i64> {
    // Hot path: most skbs are not ours. Decide that with one hash lookup, before any clock read
    // or kernel memory read.
    let st = match SKBS.get_ptr_mut(&skb) {
        Some(st) => st,
        None if point == Point::DevQueue => {
            let tid = current_tid();
            let send_ts = match unsafe { SEND_TS.get(&tid) } {
                Some(ts) => *ts,
                None => return Ok(()),
            };
            let t = now();
            let key = kernel::dev_key(kernel::skb_dev(skb)?)?;
            return start(tid, send_ts, skb, key, dev_kind(&key), t);
        }
        None => return Ok(()),
    };
    let t = now();
    if t.wrapping_sub(unsafe { (*st).last_ts }) > kernel::max_gap_ns() {
        bump(counter::STALE);
        let _ = SKBS.remove(&skb);
        return Ok(());
    }
    let dev = if dev != 0 { dev } else { kernel::skb_dev(skb)? };
    let key = kernel::dev_key(dev)?;
    let kind = dev_kind(&key);
    if point == Point::NetifReceive {
        on_receive_pass(st, skb, t);
    }
    advance(st, point as u16, kind, key, t);
    Ok(())
}

/// A receive pass: count it, count the NET_RX softirq run carrying it if it is a new one,
/// and remember the skb on this CPU for `sk_data_ready`, which has only the socket.
#[inline(always)]
fn on_receive_pass(st: *mut SkbState, skb: u64, t: u64) {
    let s = unsafe { &mut *st };
    s.rx_passes = s.rx_passes.saturating_add(1);
    if let Some(rx) = RXCPU.get_ptr_mut(0) {
        let rx = unsafe { &mut *rx };
        let cpu = unsafe { bpf_get_smp_processor_id() };
        let run = ((cpu as u64) << 24 | (rx[2] & 0xff_ffff)) as u32;
        if run != s.last_softirq {
            s.softirqs = s.softirqs.saturating_add(1);
            s.last_softirq = run;
        }
        rx[0] = skb;
        rx[1] = t;
    }
}

/// `irq:softirq_entry` for NET_RX: a new softirq run on this CPU.
#[inline(always)]
pub fn on_net_rx_softirq() {
    if let Some(rx) = RXCPU.get_ptr_mut(0) {
        unsafe { (*rx)[2] += 1 };
    }
}

/// `sock:sk_data_ready`: attributed to the last tracked skb received on this CPU.
#[inline(always)]
pub fn on_sock_ready() -> Result<(), i64> {
    let rx = RXCPU.get_ptr_mut(0).ok_or(-1i64)?;
    let skb = unsafe { (*rx)[0] };
    if skb == 0 {
        return Ok(());
    }
    unsafe { (*rx)[0] = 0 };
    let t = now();
    if let Some(st) = tracked(skb, t)
        && unsafe { (*st).last_point } == Point::NetifReceive as u16
    {
        advance(st, Point::SockReady as u16, 0, DevKey::default(), t);
    }
    Ok(())
}

/// `skb:skb_copy_datagram_iovec` in a traced receiver: the data reaches the user buffer.
#[inline(always)]
pub fn on_copy(skb: u64) -> Result<(), i64> {
    let tid = current_tid();
    if traced_role(tid).is_none() {
        return Ok(());
    }
    let t = now();
    let st = match tracked(skb, t) {
        Some(st) => st,
        None => return Ok(()),
    };
    if unsafe { (*st).last_point } != Point::Copy as u16 {
        advance(st, Point::Copy as u16, 0, DevKey::default(), t);
    }
    let generation = unsafe { (*st).first_ts };
    let _ = PENDING.insert(&tid, &[skb, generation], 0);
    Ok(())
}

/// Send syscall entry of a traced thread; closes the server's turnaround.
#[inline(always)]
pub fn on_send_enter() -> Result<(), i64> {
    let tid = current_tid();
    let role = match traced_role(tid) {
        Some(r) => r,
        None => return Ok(()),
    };
    let t = now();
    if role == ROLE_SERVER
        && let Some(r) = unsafe { TURN.get(&tid) }
    {
        record(2, Hop::OneWay as u32, t.wrapping_sub(*r));
        let _ = TURN.remove(&tid);
    }
    // BPF_NOEXIST: tcp_sendmsg_locked fires once per skb filled; the first one starts the send.
    let _ = SEND_TS.insert(&tid, &t, 1);
    Ok(())
}

#[inline(always)]
pub fn on_send_exit() {
    let tid = current_tid();
    if traced_role(tid).is_some() {
        let _ = SEND_TS.remove(&tid);
    }
}

/// Receive syscall exit of a traced thread with `ret` bytes: completes the journey.
#[inline(always)]
pub fn on_recv_exit(ret: i64) -> Result<(), i64> {
    let tid = current_tid();
    let role = match traced_role(tid) {
        Some(r) => r,
        None => return Ok(()),
    };
    if ret <= 0 {
        return Ok(());
    }
    let t = now();
    let pending = unsafe { PENDING.get(&tid).copied() };
    let _ = PENDING.remove(&tid);
    let [skb, generation] = match pending {
        Some(p) => p,
        None => {
            bump(counter::RECV_UNMATCHED);
            return Ok(());
        }
    };
    let st = match SKBS.get_ptr_mut(&skb) {
        Some(st) if unsafe { (*st).first_ts } == generation => st,
        _ => {
            bump(counter::RECV_UNMATCHED);
            return Ok(());
        }
    };
    advance(st, Point::RecvExit as u16, 0, DevKey::default(), t);
    let s = unsafe { &mut *st };
    record(s.dir, s.cur_hop, t - s.hop_start);
    record(s.dir, Hop::OneWay as u32, t - s.first_ts);
    let p = (s.rx_passes as u32).min(7) * 8 + (s.softirqs as u32).min(7);
    if let Some(c) = PASSES.get_ptr_mut(s.dir * 64 + p) {
        unsafe { *c += 1 };
    }
    bump(counter::COMPLETED);
    if s.sampled != 0 {
        if SAMPLES.output::<SkbState>(s, 0).is_ok() {
            bump(counter::SAMPLES);
        } else {
            bump(counter::RINGBUF_LOST);
        }
    }
    let _ = SKBS.remove(&skb);
    if role == ROLE_SERVER {
        let _ = TURN.insert(&tid, &t, 0);
    }
    Ok(())
}

/// `skb:kfree_skb` / `skb:consume_skb` of a tracked skb before its data was copied out.
#[inline(always)]
pub fn on_free(skb: u64, location: u64, reason: u32, dropped: bool) -> Result<(), i64> {
    let st = match SKBS.get_ptr_mut(&skb) {
        Some(st) => st,
        None => return Ok(()),
    };
    let s = unsafe { &*st };
    if s.last_point == Point::Copy as u16 || s.last_point == Point::RecvExit as u16 {
        // Freed after delivery: the receive exit completes it.
        return Ok(());
    }
    if dropped {
        bump(counter::DROPPED);
        let t = now();
        let key = kernel::skb_dev(skb)
            .and_then(kernel::dev_key)
            .unwrap_or_default();
        let rec = DropRecord {
            ts: t,
            skb,
            location,
            reason,
            dir: s.dir,
            netns: key.netns,
            ifindex: key.ifindex,
            last_point: s.last_point,
            last_kind: s.last_kind,
            hop: s.cur_hop,
        };
        if DROPS.output::<DropRecord>(&rec, 0).is_err() {
            bump(counter::RINGBUF_LOST);
        }
    } else {
        bump(counter::CONSUMED_EARLY);
    }
    let _ = SKBS.remove(&skb);
    Ok(())
}
