//! The direct-mapped flight table: per-skb state of the packets in flight, in an array indexed
//! by a hash of the skb address and tagged with it. An untracked packet costs one inlined array
//! lookup and a compare (a hash map lookup costs a helper call and a hash). A slot is claimed
//! and released with compare-and-swap on its tag, so two CPUs never own one slot; a packet
//! whose slot holds another live packet is not followed and counted (`slot_collision`).
use netpath_common::{Flight, FlightSlot, counter, ptr_slot};

use crate::{atomic, kernel, maps::*};

#[inline(always)]
fn slot(skb: u64) -> Option<*mut FlightSlot> {
    FLIGHTS.get_ptr_mut(ptr_slot(skb, kernel::flight_mask()))
}

/// The state of `skb`, if it is followed.
#[inline(always)]
pub fn get(skb: u64) -> Option<*mut Flight> {
    let s = slot(skb)?;
    if skb != 0 && unsafe { (*s).skb } == skb {
        Some(unsafe { &raw mut (*s).flight })
    } else {
        None
    }
}

/// Follows `skb` from now on with state `f` (replacing an older generation at the same address).
/// A slot held by another packet that has not been seen for `MAX_GAP_NS` is taken over (that
/// packet was freed unseen); one still live is a collision.
#[inline(always)]
pub fn claim(skb: u64, f: &Flight) -> bool {
    let Some(s) = slot(skb) else { return false };
    let tag = unsafe { &raw mut (*s).skb };
    let held = unsafe { *tag };
    if held == skb {
        bump(counter::REUSED);
    } else if held != 0 {
        let last = unsafe { (*s).flight.last_ts };
        if f.last_ts.wrapping_sub(last) <= kernel::max_gap_ns() || !atomic::cas(tag, held, skb) {
            bump(counter::SLOT_COLLISION);
            return false;
        }
        bump(counter::STALE);
    } else if !atomic::cas(tag, 0, skb) {
        bump(counter::SLOT_COLLISION);
        return false;
    }
    unsafe { (*s).flight = *f };
    true
}

/// Stops following `skb` (no-op if its slot has moved on to another packet).
#[inline(always)]
pub fn release(skb: u64) {
    if let Some(s) = slot(skb) {
        atomic::cas(unsafe { &raw mut (*s).skb }, skb, 0);
    }
}
