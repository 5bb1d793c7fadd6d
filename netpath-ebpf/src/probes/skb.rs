//! `skb:*` raw tracepoints: copy to user, drops and frees.
use aya_ebpf::{macros::raw_tracepoint, programs::RawTracePointContext};

use crate::{own, path};

#[raw_tracepoint(tracepoint = "skb_copy_datagram_iovec")]
pub fn skb_copy_datagram_iovec(ctx: RawTracePointContext) -> i32 {
    own::run(|| path::on_copy(ctx.arg::<u64>(0)));
    0
}

#[raw_tracepoint(tracepoint = "kfree_skb")]
pub fn kfree_skb(ctx: RawTracePointContext) -> i32 {
    // TP_PROTO(struct sk_buff *skb, void *location, enum skb_drop_reason reason, ...)
    own::run(|| {
        path::on_free(
            ctx.arg::<u64>(0),
            ctx.arg::<u64>(1),
            ctx.arg::<u64>(2) as u32,
            true,
        )
    });
    0
}

#[raw_tracepoint(tracepoint = "consume_skb")]
pub fn consume_skb(ctx: RawTracePointContext) -> i32 {
    own::run(|| path::on_free(ctx.arg::<u64>(0), ctx.arg::<u64>(1), 0, false));
    0
}
