//! kprobes on the driver, bridge, netfilter and tunnel functions tracepoints cannot see. Module
//! functions (veth, bridge, vxlan, nf_nat on Debian/Ubuntu kernels) included. Each reports a
//! point on an already tracked skb; a NAT rewrite inside a traced send may start one.
use aya_ebpf::{macros::kprobe, programs::ProbeContext};
use netpath_common::Point;

use crate::path;

#[inline(always)]
fn arg(ctx: &ProbeContext, n: usize) -> u64 {
    ctx.arg::<u64>(n).unwrap_or(0)
}

/// veth_xmit(struct sk_buff *skb, struct net_device *dev)
#[kprobe]
pub fn kp_veth_xmit(ctx: ProbeContext) -> u32 {
    let _ = path::on_fn_point(arg(&ctx, 0), arg(&ctx, 1), Point::VethXmit);
    0
}

/// br_forward(const struct net_bridge_port *to, struct sk_buff *skb, bool, bool)
#[kprobe]
pub fn kp_br_forward(ctx: ProbeContext) -> u32 {
    let _ = path::on_fn_point(arg(&ctx, 1), 0, Point::BridgeForward);
    0
}

/// nf_nat_manip_pkt(struct sk_buff *skb, struct nf_conn *ct, enum nf_nat_manip_type, dir)
#[kprobe]
pub fn kp_nf_nat_manip_pkt(ctx: ProbeContext) -> u32 {
    let _ = path::on_fn_point(arg(&ctx, 0), 0, Point::NatManip);
    0
}

/// vxlan_xmit_one(struct sk_buff *skb, struct net_device *dev, __be32 vni, ...)
#[kprobe]
pub fn kp_vxlan_xmit_one(ctx: ProbeContext) -> u32 {
    let _ = path::on_fn_point(arg(&ctx, 0), arg(&ctx, 1), Point::VxlanXmit);
    0
}

/// udp_tunnel_xmit_skb(struct rtable *rt, struct sock *sk, struct sk_buff *skb, ...)
#[kprobe]
pub fn kp_udp_tunnel_xmit_skb(ctx: ProbeContext) -> u32 {
    let _ = path::on_fn_point(arg(&ctx, 2), 0, Point::UdpTunnelXmit);
    0
}

/// vxlan_rcv(struct sock *sk, struct sk_buff *skb)
#[kprobe]
pub fn kp_vxlan_rcv(ctx: ProbeContext) -> u32 {
    let _ = path::on_fn_point(arg(&ctx, 1), 0, Point::VxlanRcv);
    0
}

/// ip_rcv(struct sk_buff *skb, struct net_device *dev, ...)
#[kprobe]
pub fn kp_ip_rcv(ctx: ProbeContext) -> u32 {
    let _ = path::on_fn_point(arg(&ctx, 0), arg(&ctx, 1), Point::IpRcv);
    0
}

/// tcp_v4_rcv(struct sk_buff *skb)
#[kprobe]
pub fn kp_tcp_v4_rcv(ctx: ProbeContext) -> u32 {
    let _ = path::on_fn_point(arg(&ctx, 0), 0, Point::TcpRcv);
    0
}
