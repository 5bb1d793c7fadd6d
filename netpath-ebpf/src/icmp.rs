//! `--proto icmp`: the harness's ping socket sends an echo request; the kernel of the target
//! answers it in the receive softirq (icmp_rcv → icmp_echo → icmp_reply), with no traced
//! thread and a new skb. The request's journey ends where that reply is first queued, and the
//! reply's journey starts there: the reply is told by its echo identifier and sequence, equal to
//! those of the request this CPU received last (the reply is built synchronously in the same
//! softirq run). There is no server thread: the turnaround is 0.
use aya_ebpf::helpers::bpf_get_smp_processor_id;
use netpath_common::{DevKey, Flight, Hop, Point, TimelinePoint, counter, hop};

use crate::{
    flights, journey, kernel,
    maps::*,
    path::{advance, now, receiving, record},
    timeline::{append_point, new_record, note_end_tuple},
};

/// A packet queued outside a traced send: if it is the echo reply to a followed request,
/// completes the request and follows the reply. Returns whether it did.
#[inline(always)]
pub fn on_queue(skb: u64, key: DevKey, kind: u32) -> Result<bool, i64> {
    let Some((kernel::ICMP_ECHO_REPLY, id, seq)) = kernel::echo_of(skb) else {
        return Ok(false);
    };
    let rx = RXCPU.get_ptr_mut(0).ok_or(-1i64)?;
    let req = unsafe { (*rx)[0] };
    let Some(fp) = flights::get(req) else {
        return Ok(false);
    };
    if unsafe { (*fp).dir } != 0 || !receiving(unsafe { (*fp).last_point }) {
        return Ok(false);
    }
    if kernel::echo_of(req) != Some((kernel::ICMP_ECHO, id, seq)) {
        return Ok(false);
    }
    unsafe { (*rx)[0] = 0 };
    let t = now();
    // The request's last segment (IP input, icmp_echo, the reply built and routed) ends here.
    advance(fp, req, Point::EchoReply as u16, 0, DevKey::default(), t);
    let f = unsafe { &*fp };
    record(f.dir, f.cur_hop, t - f.hop_start);
    // The request as the target received it (still the skb icmp_rcv is answering): its
    // addresses and identifier after any NAT on the way, so MASQUERADE's rewrite shows.
    note_end_tuple(req);
    journey::complete(req, f, t);
    record(2, Hop::OneWay as u32, 0);
    start_reply(skb, key, kind, t)?;
    Ok(true)
}

/// Follows the reply from its first queue, as the server's send would start it.
#[inline(always)]
fn start_reply(skb: u64, key: DevKey, kind: u32, t: u64) -> Result<(), i64> {
    let started = COUNTERS.get_ptr_mut(counter::STARTED).ok_or(-1i64)?;
    let n = unsafe { core::ptr::read_volatile(started) };
    crate::atomic::add(started, 1);
    let every = kernel::sample_every();
    let sampled = every != 0 && n % every as u64 == 0;
    let point = Point::DevQueue as u16;
    let h = hop::hop_between(Point::SendEnter as u16, 0, point, kind as u16);
    let f = Flight {
        first_ts: t,
        last_ts: t,
        hop_start: t,
        cur_hop: h as u32,
        dir: 1,
        last_point: point,
        last_kind: kind as u16,
        sampled: sampled as u16,
        rx_passes: 0,
        softirqs: 0,
        flags: 0,
        last_softirq: u32::MAX,
    };
    if sampled {
        let first = TimelinePoint {
            ts: t,
            netns: 0,
            ifindex: 0,
            point: Point::SendEnter as u16,
            kind: 0,
            hop: Hop::SenderStack as u16,
            cpu: unsafe { bpf_get_smp_processor_id() } as u16,
        };
        let _ = new_record(skb, 0, &f, first, 0, 0);
        append_point(skb, point, kind as u16, key, h as u32, t);
    }
    if !flights::claim(skb, &f) && sampled {
        let _ = TIMELINES.remove(skb);
    }
    Ok(())
}
