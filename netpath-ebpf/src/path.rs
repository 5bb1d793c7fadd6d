//! The per-packet state machine's device and socket points: a probe reports "skb S reached
//! point P (on device D)"; this module starts and follows packets through the flight table and
//! hands the segments to `state`, which names them and accumulates per-hop counts, sums and
//! histograms. Only sampled packets keep a full timeline and produce a ring-buffer record.
use aya_ebpf::helpers::bpf_get_smp_processor_id;
use netpath_common::{
    DEV_SLOTS, DEV_WATCHED, DIR_IN, DIR_OUT, DevInfo, DevKey, DevKind, DropRecord, FLIGHT_ANY,
    FLIGHT_OWN, FLIGHT_RELAYED, FLIGHT_SAMPLED, Flight, NO_HOP, OWN_SEND, Point, ROLE_RELAY,
    ROLE_SERVER, TidState, TimelinePoint, counter, devrole, ptr_slot,
};

use crate::{
    atomic, flights, kernel,
    maps::*,
    own::{Done, Stamp, now, stamp, tail},
    relay, sched, sockq,
    state::{advance, begin_journey, count_started, current_tid, forget, new_flight, receiving},
    tids::traced,
    timeline::{append_point, new_record, note_end_tuple, start_timeline},
};

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
    let v = unsafe { DEVS.get(key).copied().unwrap_or(0) };
    let info = DevInfo {
        key,
        kind: v & 0xffff,
        role: (v >> devrole::SHIFT) & devrole::MASK,
        watched: (v & DEV_WATCHED != 0) as u32,
        _pad: 0,
    };
    atomic::xchg(tag, 0);
    unsafe { (*s).info = info };
    atomic::xchg(tag, dev);
    Ok(info)
}

/// Starts tracking `skb`, the first skb of the send traced thread `tid` has in progress.
#[inline(always)]
fn start(tid: u32, ts: &mut TidState, skb: u64, dev: DevInfo, st: &Stamp, point: Point) -> Done {
    let send_ts = ts.send_ts;
    // One skb per send: later skbs of the same send (bulk) or pure ACKs are not followed.
    ts.send_ts = 0;
    if st.t.wrapping_sub(send_ts) > kernel::max_gap_ns() {
        bump(counter::STALE);
        return Ok(None);
    }
    // A relay's send continues the journey that reached it: same start, same direction.
    let relay = ts.role == ROLE_RELAY;
    let (first_ts, dir) = match ts.role {
        ROLE_RELAY => (ts.origin_ts, ts.origin_dir as u16),
        ROLE_SERVER => (send_ts, 1),
        _ => (send_ts, 0),
    };
    let mut flags = begin_journey()?;
    let sampled = flags & FLIGHT_SAMPLED != 0;
    // The send decided whether this journey's own time is measured (`journey::own_send`), and
    // measured its tail only then; a relay's send always measures it.
    if !relay {
        flags &= !FLIGHT_OWN;
        flags |= if ts.own_bits & OWN_SEND != 0 {
            FLIGHT_OWN
        } else {
            0
        };
    }
    // Passively traced (`trace --container`), a relayed leg ends at its socket too.
    flags |= match (relay, kernel::trace_any()) {
        (true, true) => FLIGHT_RELAYED | FLIGHT_ANY,
        (true, false) => FLIGHT_RELAYED,
        _ => 0,
    };
    // The packet is born at its first device queue: the sender-stack hop is already open,
    // with netpath's time since the send in it.
    let own = ts.send_snap.until(&st.own);
    let kind = dev.kind as u16;
    let f = new_flight(first_ts, send_ts, dir, (point, kind), st, own, flags);
    if sampled {
        // A record that does not fit is counted; the packet is still followed.
        let dst = (ts.dst_addr, ts.dst_port as u16);
        let _ = start_timeline(tid, skb, &f, send_ts, relay, dst);
        crate::nfmarks::drain(skb, tid, send_ts);
        append_point(skb, point as u16, kind, dev.key, f.cur_hop as u32, st.t);
    }
    // An address that came back without a free we saw (deferred free) is a new generation
    // (counted `reused` by the claim).
    if !flights::claim(skb, &f) && sampled {
        let _ = TIMELINES.remove(skb);
    }
    Ok(tail(&f, st.t))
}

/// Whether a packet already followed at `old` is in fact a new one at a recycled address.
#[inline(always)]
fn recycled(old: &Flight, point: Point) -> bool {
    let (lp, lk) = (old.last_point, old.last_kind);
    // A veth, loopback or bridge-port transmit always ends in the peer's netif_rx: a second
    // queue right after it is a new packet at a recycled address (TCP reuses the fclone
    // companion's address for its next segment). Likewise a packet waiting in the backlog
    // (netif_rx) is received before anything else.
    let requeued = point == Point::DevQueue
        && (lp == Point::NetifRx as u16
            || lp == Point::DevQueue as u16
                && (lk == DevKind::Veth as u16
                    || lk == DevKind::Loopback as u16
                    || lk == DevKind::BridgePort as u16));
    // A packet delivered to a socket never returns to a device: this address was freed
    // unseen (splice, deferred free) and reused.
    requeued
        || lp == Point::SockReady as u16
        || lp == Point::Copy as u16
        || lp == Point::SchedWaking as u16
        || lp == Point::SchedSwitch as u16
}

/// The device of a receive pass that follows the packet's `netif_rx`: the same one (the
/// backlog hands the packet to the device it was queued for), so its kind is known and the
/// kernel read of `skb->dev` is spared. A sampled packet reads it anyway: its timeline names
/// the device.
#[inline(always)]
fn same_dev(f: &Flight, point: Point) -> Option<DevInfo> {
    (point == Point::NetifReceive && f.last_point == Point::NetifRx as u16 && !f.sampled()).then(
        || DevInfo {
            kind: f.last_kind as u32,
            ..DevInfo::default()
        },
    )
}

/// A device-level point: `dev` is the `struct net_device *` if the probe has it, else 0
/// (read from `skb->dev`).
#[inline(always)]
pub fn on_dev_point(skb: u64, dev: u64, point: Point) -> Done {
    // Hot path: most skbs are not ours. Decide that with one inlined array lookup, before any
    // clock read or kernel memory read.
    let mut f = flights::get(skb);
    if let Some(old) = f
        && recycled(unsafe { &*old }, point)
    {
        bump(counter::REUSED);
        forget(skb, unsafe { (*old).sampled() });
        f = None;
    }
    let Some(f) = f else {
        return on_new_skb(skb, dev, point);
    };
    let st = stamp();
    if st.t.wrapping_sub(unsafe { (*f).last_ts }) > kernel::max_gap_ns() {
        bump(counter::STALE);
        forget(skb, unsafe { (*f).sampled() });
        return Ok(None);
    }
    let info = same_dev(unsafe { &*f }, point).map_or_else(|| point_dev(skb, dev), Ok)?;
    if point == Point::NetifReceive {
        on_receive_pass(f, skb, st.t);
    }
    if point == Point::DevXmit {
        crate::qdisc::on_xmit(unsafe { &*f }, &info, st.t);
    }
    advance(f, skb, point as u16, info.kind as u16, info.key, &st);
    Ok(tail(unsafe { &*f }, st.t))
}

/// `start_xmit` when it is no timeline point (`--parts` without `trace`'s detail): the qdisc
/// part alone (`qdisc.rs`), without the point's stamp and hop bookkeeping, which leaves the
/// flight as it was and the hops as they are without this program.
#[inline(always)]
pub fn on_xmit_only(skb: u64, dev: u64) -> Done {
    let Some(f) = flights::get(skb) else {
        return Ok(None);
    };
    let f = unsafe { &*f };
    if f.last_point != Point::DevQueue as u16 {
        return Ok(None);
    }
    let t = now();
    crate::qdisc::on_xmit(f, &dev_info(dev)?, t);
    Ok(None)
}

/// A point of an skb not followed: a packet is born at its first device queue inside a traced
/// send, or at a NAT rewrite there (netfilter OUTPUT runs before the device queue; function
/// probes only).
#[inline(always)]
fn on_new_skb(skb: u64, dev: u64, point: Point) -> Done {
    if point != Point::DevQueue && point != Point::NatManip {
        return if kernel::trace_any() {
            start_any(skb, dev, point)
        } else {
            Ok(None)
        };
    }
    let tid = current_tid();
    let ts = match traced(tid) {
        Some(ts) if ts.send_ts != 0 => ts,
        _ if kernel::trace_any() => return start_any(skb, dev, point),
        _ if kernel::icmp_echo() && point == Point::DevQueue => return echo_reply(skb),
        _ => return Ok(None),
    };
    // Softirq work at interrupt exit (another connection's segment, an ACK) runs in the traced
    // thread's context too: only its own socket's skb starts a journey.
    if !own_skb(ts, skb) {
        bump(counter::FOREIGN);
        return Ok(None);
    }
    let st = stamp();
    let info = point_dev(skb, 0)?;
    if !kernel::filter_pass(skb, &info.key) {
        ts.send_ts = 0;
        return Ok(None);
    }
    start(tid, ts, skb, info, &st, point)
}

/// `--proto icmp`: a packet queued on a path device outside a traced send may be the
/// kernel's echo reply to a followed request (`icmp.rs`).
#[inline(always)]
fn echo_reply(skb: u64) -> Done {
    let info = point_dev(skb, 0)?;
    if info.watched == 0 {
        return Ok(None);
    }
    crate::icmp::on_queue(skb, info.key, info.kind)
}

/// Whether `skb` belongs to the socket the traced thread sends on: exactly when the socket is
/// known (`tcp_sendmsg_locked`, or learnt from the thread's receives on syscall-bounded
/// kernels), else any skb with a socket (forwarded and softirq-built packets have none).
#[inline(always)]
fn own_skb(ts: &TidState, skb: u64) -> bool {
    let sk = kernel::skb_sk(skb);
    if ts.sock != 0 { sk == ts.sock } else { sk != 0 }
}

/// `netpath trace` and `serve` on traffic netpath does not generate: a packet starts when
/// first seen on a watched device (where the devices have roles, at its entry into or out of a
/// followed container, `entry`) and passes the filters, once every program is attached
/// (`run::ARMED`). The node's other devices in `DEVS` only name hops: no journey starts there.
/// One entry in `sample_every` is followed, chosen from this CPU's started count (`sampled`);
/// the others cost no more.
#[inline(always)]
fn start_any(skb: u64, dev: u64, point: Point) -> Done {
    if point == Point::SockReady || point == Point::Copy {
        return Ok(None);
    }
    // Decided before the device read: where journeys start only at transmits (`entry`), a
    // receive point of a packet not followed has nothing to do.
    if (point == Point::NetifRx || point == Point::NetifReceive) && kernel::tx_entries_only() {
        return Ok(None);
    }
    let info = point_dev(skb, dev)?;
    if info.watched == 0 || !kernel::armed() {
        return Ok(None);
    }
    let Some(dir) = entry(point, &info) else {
        return Ok(None);
    };
    if !kernel::filter_pass(skb, &info.key) {
        return Ok(None);
    }
    // Sampled, every entry counts (pure ACKs too: telling them costs kernel reads the
    // skipped ones are spared); else only the journeys followed.
    let every = kernel::sample_every();
    let mut n = 0;
    if every > 1 {
        n = count_started()?;
        if !sampled(n, every) {
            return Ok(None);
        }
    }
    // Pure ACKs never wake a reader: they would never end, so only data is followed.
    if kernel::tcp_payload(skb).unwrap_or(0) == 0 {
        return Ok(None);
    }
    if every <= 1 {
        n = count_started()?;
    }
    let st = stamp();
    // Every followed passive journey keeps its timeline.
    let mut flags = FLIGHT_ANY | FLIGHT_SAMPLED;
    if crate::own::measured(n) {
        flags |= netpath_common::FLIGHT_OWN;
    }
    let kind = info.kind as u16;
    let mut f = new_flight(st.t, st.t, dir, (point, kind), &st, (0, 0), flags);
    f.cur_hop = netpath_common::NO_HOP;
    f.rx_passes = (point == Point::NetifReceive) as u16;
    let first = TimelinePoint {
        ts: st.t,
        netns: info.key.netns,
        ifindex: info.key.ifindex,
        point: point as u16,
        kind: info.kind as u16,
        // No segment ends at a journey's first point.
        hop: NO_HOP,
        cpu: unsafe { bpf_get_smp_processor_id() } as u16,
    };
    if new_record(skb, 0, &f, first, 0, 0).is_err() {
        return Ok(None);
    }
    if !flights::claim(skb, &f) {
        let _ = TIMELINES.remove(skb);
    }
    Ok(tail(&f, st.t))
}

/// Whether a packet of a watched device at `point` enters or leaves a followed container here,
/// and which way. A transmit on the container's own side goes out, on its peer in; a macvlan's
/// or ipvlan's traffic in is first seen received on the container's own device (no peer
/// transmits it). Devices without roles (`trace`): any point, direction in.
#[inline(always)]
fn entry(point: Point, info: &DevInfo) -> Option<u16> {
    match (info.role, point) {
        (devrole::ANY, _) => Some(DIR_IN),
        (devrole::OWN, Point::DevQueue) => Some(DIR_OUT),
        (devrole::PEER, Point::DevQueue) => Some(DIR_IN),
        (devrole::OWN, Point::NetifRx | Point::NetifReceive)
            if info.kind == DevKind::Macvlan as u32 || info.kind == DevKind::Ipvlan as u32 =>
        {
            Some(DIR_IN)
        }
        _ => None,
    }
}

/// Whether started journey number `n` (this CPU's count) is followed: one in `every`,
/// picked by a multiplicative hash of the count, so traffic with a period of its own (a
/// request in, its response out, again) cannot line up with the pick as `n % N` would.
#[inline(always)]
fn sampled(n: u64, every: u32) -> bool {
    let h = n.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 32;
    h < (1u64 << 32) / every as u64
}

/// Ends a device-started flight at its socket when it cannot wait there for the application's
/// read (`sockq::park`), or at the copy on kernels without `sk_data_ready`.
#[inline(always)]
fn finish_any(skb: u64, f: *mut Flight, t: u64) {
    sockq::end(skb, unsafe { &*f }, t);
    flights::release(skb);
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
            relay::publish(skb, f.first_ts, f.dir as u32, t);
        }
        // No sk_data_ready: the socket's wakeup follows this receive pass on this CPU.
        sched::arm(skb, f.first_ts);
    }
}

/// A function-probe point (kprobe/fentry backends): same state machine as the device points.
#[inline(always)]
pub fn on_fn_point(skb: u64, dev: u64, point: Point) -> Done {
    if skb == 0 {
        return Ok(None);
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

/// The followed packet `sk_data_ready` on `sk` is about: the skb TCP just queued on it (the
/// tail of its receive queue), else the last tracked skb received on this CPU if that skb is
/// this socket's (its source is the socket's peer: a segment coalesced into an older tail skb
/// has no `skb->sk`). The queue finds it also when the wakeup comes later from the socket
/// backlog, in process context, on another CPU.
#[inline(always)]
fn ready_skb(sk: u64) -> Option<(u64, *mut Flight)> {
    let rx = RXCPU.get_ptr_mut(0)?;
    let tail = kernel::sk_rcvq_tail(sk);
    let found = match flights::get(tail) {
        Some(f) if receiving(unsafe { (*f).last_point }) => (tail, f),
        _ => {
            let last = unsafe { (*rx)[0] };
            match flights::get(last) {
                Some(f) if receiving(unsafe { (*f).last_point }) && peer_of(sk, last) => (last, f),
                _ => return None,
            }
        }
    };
    if unsafe { (*rx)[0] } == found.0 {
        unsafe { (*rx)[0] = 0 };
    }
    Some(found)
}

/// `sock:sk_data_ready` on socket `sk`.
#[inline(always)]
pub fn on_sock_ready(sk: u64) -> Done {
    let Some((skb, f)) = ready_skb(sk) else {
        return Ok(None);
    };
    let st = stamp();
    advance(f, skb, Point::SockReady as u16, 0, DevKey::default(), &st);
    let fl = unsafe { &*f };
    if fl.sampled() {
        note_end_tuple(skb);
    }
    // A relay that splices never copies nor returns from a receive: the last point of the
    // journey it relays is this wakeup. Publish it for the relay's next send (also when
    // passively traced: `trace --container` on a published port).
    if fl.flags & FLIGHT_RELAYED == 0 {
        relay::publish(skb, fl.first_ts, fl.dir as u32, st.t);
    }
    let measure = tail(fl, st.t);
    if fl.flags & FLIGHT_ANY != 0 {
        // Traffic netpath does not generate: the journey waits for the application's read.
        if !sockq::park(sk, skb, f, st.t) {
            bump(counter::UNREAD);
            finish_any(skb, f, st.t);
        }
        return Ok(measure);
    }
    // The reader this wakes (if asleep) is woken next on this CPU.
    sched::arm(skb, fl.first_ts);
    Ok(measure)
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
pub fn on_copy(skb: u64) -> Done {
    let Some(f) = flights::get(skb) else {
        return Ok(None);
    };
    if unsafe { (*f).flags } & FLIGHT_ANY != 0 {
        // Kernels without sock:sk_data_ready (before 6.7): a device-started journey ends at
        // the copy to the receiving process instead. Elsewhere it parked at its wakeup.
        if !kernel::ready_fallback() {
            return Ok(None);
        }
        let st = stamp();
        advance(f, skb, Point::Copy as u16, 0, DevKey::default(), &st);
        note_end_tuple(skb);
        let measure = tail(unsafe { &*f }, st.t);
        finish_any(skb, f, st.t);
        return Ok(measure);
    }
    // The point's clock before the thread's lookup: what follows is netpath's own time.
    let st = stamp();
    let Some(ts) = traced(current_tid()) else {
        return Ok(None);
    };
    if unsafe { (*f).last_point } != Point::Copy as u16 {
        advance(f, skb, Point::Copy as u16, 0, DevKey::default(), &st);
        if unsafe { (*f).sampled() } {
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
    Ok(tail(unsafe { &*f }, st.t))
}

/// `skb:kfree_skb` / `skb:consume_skb` of a tracked skb before its data was copied out.
#[inline(always)]
pub fn on_free(skb: u64, location: u64, reason: u32, dropped: bool) -> Done {
    let f = match flights::get(skb) {
        Some(f) => unsafe { &*f },
        None => return Ok(None),
    };
    if f.last_point == Point::Copy as u16 || f.last_point == Point::RecvExit as u16 {
        // Freed after delivery: the receive exit completes it.
        return Ok(None);
    }
    if !dropped && kernel::dgram() && receiving(f.last_point) {
        // UDP's receive may take a datagram off the queue (and free it, deferred, on another
        // CPU) before its wakeup is traced: the receive's return completes it (`dgram.rs`).
        return Ok(None);
    }
    let at_socket = f.last_point == Point::SockReady as u16
        || f.last_point == Point::SchedWaking as u16
        || f.last_point == Point::SchedSwitch as u16;
    if !dropped && at_socket {
        // Consumed after it reached the socket (a splicing relay takes it this way): the
        // journey is delivered; the relay's send or the copy continues it.
        return Ok(None);
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
            dir: f.dir as u32,
            netns: key.netns,
            ifindex: key.ifindex,
            last_point: f.last_point,
            last_kind: f.last_kind,
            hop: f.cur_hop as u32,
        };
        if DROPS
            .output::<DropRecord>(&rec, aya_ebpf::bindings::BPF_RB_NO_WAKEUP as u64)
            .is_err()
        {
            bump(counter::RINGBUF_LOST);
        }
    } else {
        bump(counter::CONSUMED_EARLY);
    }
    forget(skb, f.sampled());
    Ok(None)
}
