//! Full timelines of the sampled packets: built in `TIMELINES` while the packet travels (only
//! sampled packets pay for points, tuples and device keys here) and sent to userspace through
//! the `SAMPLES` ring buffer when the journey ends.
use aya_ebpf::helpers::bpf_get_smp_processor_id;
use netpath_common::{DevKey, Flight, Hop, MAX_POINTS, Point, TimelinePoint, counter};

use crate::{kernel, maps::*};

const NO_HOP: u32 = u32::MAX;

#[inline(always)]
pub fn append_point(skb: u64, point: u16, kind: u16, key: DevKey, h: u32, t: u64) {
    let s = match TIMELINES.get_ptr_mut(skb) {
        Some(s) => unsafe { &mut *s },
        None => return,
    };
    let n = s.npoints as usize;
    if n < MAX_POINTS {
        s.points[n & (MAX_POINTS - 1)] = TimelinePoint {
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

/// The full record of a sampled packet, built in per-CPU scratch (it exceeds the BPF stack).
#[inline(always)]
pub fn start_timeline(
    tid: u32,
    skb: u64,
    f: &Flight,
    send_ts: u64,
    relay: bool,
    (sock_daddr, sock_dport): (u32, u16),
) -> Result<(), i64> {
    // A relayed journey's record starts at the relay's send: the time before it (the first
    // connection and the proxy hop) is in the record of the first connection.
    let first = TimelinePoint {
        ts: send_ts,
        netns: 0,
        ifindex: 0,
        point: Point::SendEnter as u16,
        kind: 0,
        hop: if relay { Hop::Proxy } else { Hop::SenderStack } as u16,
        cpu: unsafe { bpf_get_smp_processor_id() } as u16,
    };
    new_record(skb, tid, f, first, sock_daddr, sock_dport)
}

/// Creates the full record of a sampled packet in `TIMELINES`, built in per-CPU scratch (it
/// exceeds the BPF stack), with the packet's tuple and its first point.
#[inline(always)]
pub fn new_record(
    skb: u64,
    tid: u32,
    f: &Flight,
    first: TimelinePoint,
    sock_daddr: u32,
    sock_dport: u16,
) -> Result<(), i64> {
    let st = SCRATCH.get_ptr_mut(0).ok_or(-1i64)?;
    let (saddr, daddr, sport, dport, proto) = kernel::timeline_tuple(skb);
    let (icmp_type, icmp_code, _, icmp_seq) = kernel::icmp_of(skb).unwrap_or((0, 0, 0, 0));
    let s = unsafe { &mut *st };
    s.first_ts = f.first_ts;
    s.last_ts = f.first_ts;
    s.hop_start = f.first_ts;
    s.skb = skb;
    s.cur_hop = NO_HOP;
    s.dir = f.dir as u32;
    s.last_point = first.point;
    s.last_kind = first.kind;
    s.sampled = 1;
    s.saddr = saddr;
    s.daddr = daddr;
    s.sport = sport;
    s.dport = dport;
    s.tid = tid;
    s.softirqs = 0;
    s.rx_passes = 0;
    s.last_softirq = 0;
    s.end_saddr = 0;
    s.end_daddr = 0;
    s.end_sport = 0;
    s.end_dport = 0;
    s.sock_daddr = sock_daddr;
    s.sock_dport = sock_dport;
    s.proto = proto;
    s.icmp_type = icmp_type;
    s.icmp_code = icmp_code;
    s.icmp_seq = icmp_seq;
    s.points[0] = first;
    s.npoints = 1;
    if TIMELINES.insert(skb, s, 0).is_err() {
        bump(counter::RINGBUF_LOST);
        return Err(-1);
    }
    Ok(())
}

/// Keeps the tuple a sampled packet has when it reaches the socket (the skb is still valid at
/// the wakeup and at the copy; after the receive it may be freed).
#[inline(always)]
pub fn note_end_tuple(skb: u64) {
    if let Some(s) = TIMELINES.get_ptr_mut(skb) {
        let (sa, da, sp, dp, _) = kernel::timeline_tuple(skb);
        let s = unsafe { &mut *s };
        s.end_saddr = sa;
        s.end_daddr = da;
        s.end_sport = sp;
        s.end_dport = dp;
    }
}

#[inline(always)]
pub fn emit_timeline(skb: u64, f: &Flight, t: u64) {
    if let Some(s) = TIMELINES.get_ptr_mut(skb) {
        let s = unsafe { &mut *s };
        s.last_ts = t;
        s.rx_passes = f.rx_passes;
        s.softirqs = f.softirqs;
        if SAMPLES
            .output::<netpath_common::SkbState>(&*s, samples_flags())
            .is_ok()
        {
            bump(counter::SAMPLES);
        } else {
            bump(counter::RINGBUF_LOST);
        }
        let _ = TIMELINES.remove(skb);
    }
}
