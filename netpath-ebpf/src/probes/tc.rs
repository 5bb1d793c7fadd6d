//! TC clsact programs on the lab's devices: packet and byte counts per device and direction,
//! from the stable `__sk_buff` ABI (a cross-check of the tracepoint counts).
use aya_ebpf::{bindings::TC_ACT_OK, macros::classifier, programs::TcContext};

use crate::maps::TC_STATS;

#[inline(always)]
fn count(ctx: &TcContext, egress: u64) -> i32 {
    let ifindex = unsafe { (*ctx.skb.skb).ifindex } as u64;
    let key = ifindex << 1 | egress;
    let len = ctx.len() as u64;
    match TC_STATS.get_ptr_mut(key) {
        Some(v) => unsafe {
            (*v)[0] += 1;
            (*v)[1] += len;
        },
        None => {
            let _ = TC_STATS.insert(key, [1, len], 0);
        }
    }
    TC_ACT_OK
}

#[classifier]
pub fn tc_ingress(ctx: TcContext) -> i32 {
    count(&ctx, 0)
}

#[classifier]
pub fn tc_egress(ctx: TcContext) -> i32 {
    count(&ctx, 1)
}
