//! fentry versions of the function probes, for functions whose BTF the loader can reach
//! (vmlinux). Cheaper than kprobes; module functions fall back to `kprobe.rs`.
use aya_ebpf::{macros::fentry, programs::FEntryContext};
use netpath_common::Point;

use crate::path;

#[inline(always)]
fn arg(ctx: &FEntryContext, n: usize) -> u64 {
    ctx.arg::<u64>(n)
}

#[fentry(function = "veth_xmit")]
pub fn fe_veth_xmit(ctx: FEntryContext) -> u32 {
    let _ = path::on_fn_point(arg(&ctx, 0), arg(&ctx, 1), Point::VethXmit);
    0
}

#[fentry(function = "br_forward")]
pub fn fe_br_forward(ctx: FEntryContext) -> u32 {
    let _ = path::on_fn_point(arg(&ctx, 1), 0, Point::BridgeForward);
    0
}

#[fentry(function = "nf_nat_manip_pkt")]
pub fn fe_nf_nat_manip_pkt(ctx: FEntryContext) -> u32 {
    let _ = path::on_fn_point(arg(&ctx, 0), 0, Point::NatManip);
    0
}

#[fentry(function = "vxlan_xmit_one")]
pub fn fe_vxlan_xmit_one(ctx: FEntryContext) -> u32 {
    let _ = path::on_fn_point(arg(&ctx, 0), arg(&ctx, 1), Point::VxlanXmit);
    0
}

#[fentry(function = "udp_tunnel_xmit_skb")]
pub fn fe_udp_tunnel_xmit_skb(ctx: FEntryContext) -> u32 {
    let _ = path::on_fn_point(arg(&ctx, 2), 0, Point::UdpTunnelXmit);
    0
}

#[fentry(function = "vxlan_rcv")]
pub fn fe_vxlan_rcv(ctx: FEntryContext) -> u32 {
    let _ = path::on_fn_point(arg(&ctx, 1), 0, Point::VxlanRcv);
    0
}

#[fentry(function = "ip_rcv")]
pub fn fe_ip_rcv(ctx: FEntryContext) -> u32 {
    let _ = path::on_fn_point(arg(&ctx, 0), arg(&ctx, 1), Point::IpRcv);
    0
}

#[fentry(function = "tcp_v4_rcv")]
pub fn fe_tcp_v4_rcv(ctx: FEntryContext) -> u32 {
    let _ = path::on_fn_point(arg(&ctx, 0), 0, Point::TcpRcv);
    0
}
