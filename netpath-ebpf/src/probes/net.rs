//! `net:*` raw tracepoints: arg 0 is the `struct sk_buff *`.
use aya_ebpf::{macros::raw_tracepoint, programs::RawTracePointContext};
use netpath_common::Point;

use crate::{own, path};

#[raw_tracepoint(tracepoint = "net_dev_queue")]
pub fn net_dev_queue(ctx: RawTracePointContext) -> i32 {
    own::run(|| path::on_dev_point(ctx.arg::<u64>(0), 0, Point::DevQueue));
    0
}

#[raw_tracepoint(tracepoint = "net_dev_start_xmit")]
pub fn net_dev_start_xmit(ctx: RawTracePointContext) -> i32 {
    // TP_PROTO(const struct sk_buff *skb, const struct net_device *dev)
    let (skb, dev) = (ctx.arg::<u64>(0), ctx.arg::<u64>(1));
    if crate::qdisc::xmit_point() {
        own::run(|| path::on_dev_point(skb, dev, Point::DevXmit));
    } else {
        own::run(|| path::on_xmit_only(skb, dev));
    }
    0
}

#[raw_tracepoint(tracepoint = "netif_rx")]
pub fn netif_rx(ctx: RawTracePointContext) -> i32 {
    own::run(|| path::on_dev_point(ctx.arg::<u64>(0), 0, Point::NetifRx));
    0
}

#[raw_tracepoint(tracepoint = "netif_receive_skb")]
pub fn netif_receive_skb(ctx: RawTracePointContext) -> i32 {
    own::run(|| path::on_dev_point(ctx.arg::<u64>(0), 0, Point::NetifReceive));
    0
}
