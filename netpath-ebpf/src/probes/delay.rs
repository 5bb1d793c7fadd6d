//! `netpath validate`: a TC program that holds each data packet on one device for an exact time
//! (a busy wait on the clock), so a known delay lands in one hop and the hop tables must
//! recover it. Attached only by `validate`, on the device it names.
use aya_ebpf::{bindings::TC_ACT_OK, macros::classifier, programs::TcContext};
use netpath_common::delay;

use crate::{maps::DELAY, own::now};

/// Most clock reads one packet waits through: at ~30 ns a read, beyond the longest delay
/// `validate` takes (50 µs), and a bound the verifier walks (it refuses loops of some 8000
/// pending branches).
const MAX_SPINS: u32 = 3000;

#[classifier]
pub fn tc_delay(ctx: TcContext) -> i32 {
    let ns = DELAY.get(delay::NS).copied().unwrap_or(0);
    // Pure ACKs and ARP pass at once: only the packets journeys follow carry data.
    if ns == 0 || (ctx.len() as u64) < DELAY.get(delay::MIN_LEN).copied().unwrap_or(0) {
        return TC_ACT_OK;
    }
    let start = now();
    let mut held = 0;
    let mut i = 0;
    while i < MAX_SPINS {
        held = now().wrapping_sub(start);
        if held >= ns {
            break;
        }
        i += 1;
    }
    if let Some(n) = DELAY.get_ptr_mut(delay::HELD) {
        crate::atomic::add(n, 1);
    }
    if let Some(n) = DELAY.get_ptr_mut(delay::HELD_NS) {
        crate::atomic::add(n, held);
    }
    TC_ACT_OK
}
