//! The hand-over of a journey to a relay that splices (docker-proxy: Go's io.Copy between TCP
//! sockets uses splice): it never copies to user space nor returns from a receive, so the last
//! point of the journey it relays is its socket's wakeup, and its next send continues it.
//!
//! `LAST_READY` is written from softirq on any CPU and taken by a relay's send on another: the
//! skb field is the lock. A writer invalidates it, writes the rest, then publishes the skb; a
//! taker swaps it to 0, so exactly one send takes a journey, and a delivery by copy withdraws
//! it only if it is still the one published (compare-and-swap). The generation is checked
//! against the flight when the taker closes it.
use netpath_common::{OwnSnap, Point, RelayHold};

use crate::{atomic, flights, kernel, maps::*, state};

/// A journey reached a socket: publish it for a splicing relay's next send. Only while relays
/// are followed: the slot is one cache line every CPU writes.
#[inline(always)]
pub fn publish(skb: u64, first_ts: u64, dir: u32, t: u64) {
    if !kernel::relays() {
        return;
    }
    if let Some(r) = LAST_READY.get_ptr_mut(0) {
        let r = r as *mut u64;
        atomic::xchg(r, 0);
        unsafe {
            *r.add(1) = first_ts;
            *r.add(2) = dir as u64;
            *r.add(3) = t;
        }
        atomic::xchg(r, skb);
    }
}

/// `skb` was delivered to a process by a copy: no relay may continue it (a relay whose own
/// wakeup went unseen would otherwise take the last delivery, often the other direction's).
#[inline(always)]
pub fn withdraw(skb: u64) {
    if !kernel::relays() {
        return;
    }
    if let Some(r) = LAST_READY.get_ptr_mut(0) {
        atomic::cas(r as *mut u64, skb, 0);
    }
}

/// The last journey that woke a socket, if it was not delivered by a copy since: the journey
/// a splicing relay is about to send on. Its skb's state ends here (the splice frees it unseen).
#[inline(always)]
pub fn take(t: u64) -> Option<RelayHold> {
    let r = LAST_READY.get_ptr_mut(0)? as *mut u64;
    let skb = atomic::xchg(r, 0);
    if skb == 0 {
        return None;
    }
    let (origin_ts, dir, ready_ts) = unsafe { (*r.add(1), *r.add(2), *r.add(3)) };
    if t.wrapping_sub(ready_ts) > kernel::max_gap_ns() {
        return None;
    }
    // Close the first leg if its state is still there (a splice may have freed the skb).
    if let Some(f) = flights::get(skb) {
        let f = unsafe { &*f };
        let at_socket = f.last_point == Point::SockReady as u16
            || kernel::ready_fallback() && state::receiving(f.last_point);
        if f.first_ts == origin_ts && at_socket {
            state::close_hop(f, ready_ts);
            if f.sampled() {
                crate::timeline::emit_timeline(skb, f, ready_ts);
            }
            state::forget(skb, f.sampled());
        }
    }
    // The wakeup ran on another CPU than the relay's send: of netpath's time in between only
    // the send's own run is known (the snapshot's CPU never matches a real one).
    Some(RelayHold {
        origin_ts,
        recv_ts: ready_ts,
        snap: OwnSnap {
            cpu: u16::MAX,
            ..OwnSnap::default()
        },
        dir: dir as u32,
        _pad: 0,
    })
}
