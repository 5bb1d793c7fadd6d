//! Passively traced journeys (traffic netpath does not generate: `trace --container`, `serve`)
//! do not end when their socket is woken. They wait there (`park`) until the application's
//! receive has consumed their data (`on_read`, from `tcp:tcp_rcv_space_adjust`, which every TCP
//! read path calls once it moved `copied_seq`: recvmsg, splice, zero-copy receive). The time in
//! between is the `socket-queue` hop: the application's own time before it reads, its wakeup
//! and the rest of its event loop included.
//!
//! A journey leaves the flight table when it parks: TCP may have merged its data into the skb
//! queued before it and freed its skb, whose address the next packet then takes. It moves into
//! its socket's entry of `SOCKQ`, and its timeline to a key of that entry (`parked_key`).
use netpath_common::{
    DevKey, Flight, Hop, Parked, Point, SOCK_DEPTH, SOCK_SLOTS, SkbState, SockSlot, counter,
    parked_key, ptr_slot,
};

use crate::{
    atomic, flights, kernel,
    maps::*,
    own::{Done, stamp, tail},
    state::{advance, close_hop, record},
    timeline::emit_timeline,
};

#[inline(always)]
fn slot_of(sk: u64) -> Option<(u32, *mut SockSlot)> {
    let i = ptr_slot(sk, SOCK_SLOTS - 1);
    Some((i, SOCKQ.get_ptr_mut(i)?))
}

/// The entry of `sk` at `t`, claimed for it if free or abandoned (nothing parked or read there
/// for `max_gap_ns`: its journeys are dropped, counted `unread`). None: another live socket
/// holds it.
#[inline(always)]
fn claim(sk: u64, t: u64) -> Option<(u32, *mut SockSlot)> {
    let (i, s) = slot_of(sk)?;
    let tag = unsafe { &raw mut (*s).sk };
    let held = unsafe { core::ptr::read_volatile(tag) };
    if held == sk {
        return Some((i, s));
    }
    if held != 0 {
        if t.wrapping_sub(unsafe { (*s).last_ts }) <= kernel::max_gap_ns()
            || !atomic::cas(tag, held, sk)
        {
            return None;
        }
        drop_unread(i, unsafe { &*s });
    } else if !atomic::cas(tag, 0, sk) {
        return None;
    }
    unsafe {
        (*s).head = 0;
        (*s).tail = 0;
        (*s).last_ts = t;
    }
    Some((i, s))
}

/// The journeys of an abandoned entry: their data was never read (the socket closed, or its
/// reader stopped). Not reported; counted.
#[inline(always)]
fn drop_unread(i: u32, s: &SockSlot) {
    for k in 0..SOCK_DEPTH {
        let idx = s.head.wrapping_add(k);
        if idx == s.tail {
            break;
        }
        let _ = TIMELINES.remove(parked_key(i, idx));
        bump(counter::UNREAD);
    }
}

/// Parks journey `f` of `skb`, whose data TCP just queued on socket `sk` (woken at `t`), until
/// the application reads it. False when it cannot wait there (no room in its socket's ring, or
/// the entry is another live socket's): the caller ends it at the wakeup.
#[inline(always)]
pub fn park(sk: u64, skb: u64, f: *mut Flight, t: u64) -> bool {
    let Ok(end_seq) = kernel::tcp_rcv_nxt(sk) else {
        return false;
    };
    let Some((i, s)) = claim(sk, t) else {
        return false;
    };
    let s = unsafe { &mut *s };
    let idx = s.tail;
    if idx.wrapping_sub(s.head) >= SOCK_DEPTH {
        return false;
    }
    let flight = unsafe { *f };
    if flight.sampled() {
        let Some(tl) = TIMELINES.get_ptr(skb) else {
            return false;
        };
        // By reference: a timeline is far larger than the 512-byte BPF stack.
        let tl: &SkbState = unsafe { &*tl };
        if TIMELINES.insert(parked_key(i, idx), tl, 0).is_err() {
            return false;
        }
        let _ = TIMELINES.remove(skb);
    }
    s.parked[(idx & (SOCK_DEPTH - 1)) as usize] = Parked {
        flight,
        end_seq,
        _pad: 0,
    };
    s.tail = idx.wrapping_add(1);
    s.last_ts = t;
    flights::release(skb);
    true
}

/// `tcp:tcp_rcv_space_adjust` on socket `sk`: its reader consumed data. The journeys parked
/// there whose data is all read end here, oldest first.
#[inline(always)]
pub fn on_read(sk: u64) -> Done {
    let Some((i, s)) = slot_of(sk) else {
        return Ok(None);
    };
    if unsafe { core::ptr::read_volatile(&raw const (*s).sk) } != sk {
        return Ok(None);
    }
    let st = stamp();
    let s = unsafe { &mut *s };
    let copied = kernel::tcp_copied_seq(sk)?;
    let mut measure = None;
    for _ in 0..SOCK_DEPTH {
        let head = s.head;
        if head == s.tail {
            break;
        }
        let p = &mut s.parked[(head & (SOCK_DEPTH - 1)) as usize];
        // Sequence numbers wrap: read up to the journey's last byte.
        if (copied.wrapping_sub(p.end_seq) as i32) < 0 {
            break;
        }
        let key = parked_key(i, head);
        let f = &raw mut p.flight;
        advance(f, key, Point::SockRead as u16, 0, DevKey::default(), &st);
        measure = measure.or(tail(unsafe { &*f }, st.t));
        end(key, unsafe { &*f }, st.t);
        s.head = head.wrapping_add(1);
    }
    s.last_ts = st.t;
    if s.head == s.tail {
        // Nothing waits: the entry is free for any socket (this one's next journey claims it
        // again; the socket lock keeps that after this).
        atomic::cas(&raw mut s.sk, sk, 0);
    }
    Ok(measure)
}

/// A passively traced journey ends at `t`, its timeline kept under `key`: its last hop and its
/// one-way time recorded, its timeline emitted while the run is armed (a journey that crossed
/// hooks while programs were being attached or detached misses points).
#[inline(always)]
pub fn end(key: u64, f: &Flight, t: u64) {
    close_hop(f, t);
    record(
        f.dir as u32,
        Hop::OneWay as u32,
        t.wrapping_sub(f.first_ts),
        None,
    );
    bump(counter::COMPLETED);
    if !f.sampled() {
        return;
    }
    if kernel::armed() {
        emit_timeline(key, f, t);
    } else {
        let _ = TIMELINES.remove(key);
    }
}
