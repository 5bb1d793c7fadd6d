//! Which threads netpath follows. Every socket syscall on the machine (AF_UNIX included) asks;
//! the answer for the untraced ones comes from a bitmap (an inlined array lookup and a bit
//! test); only the traced threads reach the `TIDS` table behind it.
use netpath_common::{ID_WORDS, ROLE_RELAY, TidState, tid_slots};

use crate::{atomic, maps::*};

#[inline(always)]
fn in_bitmap(map: &aya_ebpf::maps::Array<u64>, id: u32) -> bool {
    match map.get((id >> 6) & (ID_WORDS - 1)) {
        Some(w) => *w & (1u64 << (id & 63)) != 0,
        None => false,
    }
}

/// Whether thread `tid` may be traced: the bitmap's answer, an inlined array lookup (a false
/// positive only sends the thread to `state`, which says no).
#[inline(always)]
pub fn maybe_traced(tid: u32) -> bool {
    in_bitmap(&TID_BITS, tid)
}

/// State of thread `tid`, if traced: the table behind the bitmap (its two slots).
#[inline(always)]
pub fn state(tid: u32) -> Option<&'static mut TidState> {
    for s in tid_slots(tid) {
        if let Some(p) = TIDS.get_ptr_mut(s)
            && unsafe { core::ptr::read_volatile(&raw const (*p).tid) } == tid as u64
        {
            return Some(unsafe { &mut (*p).state });
        }
    }
    None
}

/// State of thread `tid`, if traced.
#[inline(always)]
pub fn traced(tid: u32) -> Option<&'static mut TidState> {
    if !maybe_traced(tid) {
        return None;
    }
    state(tid)
}

/// A thread of a relay process that was not there when tracing started (the Go runtime adds
/// threads under load): traced from its first send on.
#[inline(always)]
pub fn adopt_relay_thread(tid: u32, tgid: u32) -> Option<&'static mut TidState> {
    if !in_bitmap(&RELAY_BITS, tgid) {
        return None;
    }
    // A free slot of the two, claimed by its tag: no other CPU can take it meanwhile.
    for s in tid_slots(tid) {
        let Some(p) = TIDS.get_ptr_mut(s) else {
            continue;
        };
        if !atomic::cas(unsafe { &raw mut (*p).tid }, 0, tid as u64) {
            continue;
        }
        unsafe {
            (*p).state = TidState {
                role: ROLE_RELAY,
                ..TidState::default()
            }
        };
        // The bitmap word is shared with other threads: set the bit atomically.
        if let Some(w) = TID_BITS.get_ptr_mut((tid >> 6) & (ID_WORDS - 1)) {
            atomic::or(w, 1u64 << (tid & 63));
        }
        return Some(unsafe { &mut (*p).state });
    }
    None
}
