//! `--proto icmp`: the harness's ping socket sends an echo request; the kernel of the target
//! answers it in the receive softirq (icmp_rcv → icmp_echo → icmp_reply), with no traced
//! thread and a new skb. The request's journey ends where that reply is first queued, and the
//! reply's journey starts there: the reply is told by its echo identifier and sequence, equal to
//! those of the request this CPU received last (the reply is built synchronously in the same
//! softirq run). There is no server thread: the turnaround is 0.
use netpath_common::{DevKey, FLIGHT_SAMPLED, Hop, Point};

use crate::{
    flights, kernel,
    maps::*,
    own::{Done, Stamp, stamp, tail},
    state::{advance, begin_journey, close_hop, complete, new_flight, receiving, record},
    timeline::{append_point, note_end_tuple, start_timeline},
};

/// A packet queued outside a traced send: if it is the echo reply to a followed request,
/// completes the request and follows the reply.
#[inline(always)]
pub fn on_queue(skb: u64, key: DevKey, kind: u32) -> Done {
    let Some((kernel::ICMP_ECHO_REPLY, id, seq)) = kernel::echo_of(skb) else {
        return Ok(None);
    };
    let rx = RXCPU.get_ptr_mut(0).ok_or(-1i64)?;
    let req = unsafe { (*rx)[0] };
    let Some(fp) = flights::get(req) else {
        return Ok(None);
    };
    if unsafe { (*fp).dir } != 0 || !receiving(unsafe { (*fp).last_point }) {
        return Ok(None);
    }
    if kernel::echo_of(req) != Some((kernel::ICMP_ECHO, id, seq)) {
        return Ok(None);
    }
    unsafe { (*rx)[0] = 0 };
    let st = stamp();
    // The request's last segment (IP input, icmp_echo, the reply built and routed) ends here.
    advance(fp, req, Point::EchoReply as u16, 0, DevKey::default(), &st);
    let f = unsafe { &*fp };
    close_hop(f, st.t);
    // The request as the target received it (still the skb icmp_rcv is answering): its
    // addresses and identifier after any NAT on the way, so MASQUERADE's rewrite shows.
    note_end_tuple(req);
    let measure = tail(f, st.t);
    complete(req, f, st.t);
    record(2, Hop::OneWay as u32, 0, Some((0, 0)));
    start_reply(skb, key, kind, &st)?;
    Ok(measure)
}

/// Follows the reply from its first queue, as the server's send would start it.
#[inline(always)]
fn start_reply(skb: u64, key: DevKey, kind: u32, st: &Stamp) -> Result<(), i64> {
    let flags = begin_journey()?;
    let sampled = flags & FLIGHT_SAMPLED != 0;
    let t = st.t;
    let point = Point::DevQueue as u16;
    let f = new_flight(t, t, 1, (Point::DevQueue, kind as u16), st, (0, 0), flags);
    let h = f.cur_hop as u32;
    if sampled {
        // Started as a send would start it, with no sending thread and no socket's address.
        let _ = start_timeline(0, skb, &f, t, false, (0, 0));
        append_point(skb, point, kind as u16, key, h, t);
    }
    if !flights::claim(skb, &f) && sampled {
        let _ = TIMELINES.remove(skb);
    }
    Ok(())
}
