//! Function probes of the kprobe and fentry backends: the driver, bridge, netfilter and tunnel
//! functions tracepoints cannot see, module functions (veth, bridge, vxlan, nf_nat on
//! Debian/Ubuntu kernels) included. Each reports a point on an already tracked skb; a NAT
//! rewrite inside a traced send may start one. One `function!` line makes both forms: the
//! kprobe `kp_<f>` and the fentry `fe_<f>` (cheaper; the loader uses it where the function's
//! BTF is reachable, vmlinux, and falls back to the kprobe for module functions).
use aya_ebpf::{
    EbpfContext,
    helpers::bpf_probe_read_kernel,
    macros::{fentry, kprobe},
    programs::{FEntryContext, ProbeContext},
};
use netpath_common::Point;

use crate::{own, path};

#[inline(always)]
fn kp_arg(ctx: &ProbeContext, n: usize) -> u64 {
    ctx.arg::<u64>(n).unwrap_or(0)
}

/// An fentry argument as a plain number. Read straight from the context, a pointer argument
/// is a typed kernel pointer to the verifier, and the flight table's hash of it (shifts and
/// masks) is refused as pointer arithmetic; read through the helper it is a scalar, as the
/// kprobe and raw tracepoint arguments are.
#[inline(always)]
fn fe_arg(ctx: &FEntryContext, n: usize) -> u64 {
    let at = unsafe { (ctx.as_ptr() as *const u64).add(n) };
    unsafe { bpf_probe_read_kernel(at) }.unwrap_or(0)
}

/// `function!(kprobe name, fentry name, "kernel function", skb arg, dev arg or none, point)`.
macro_rules! function {
    ($kp:ident, $fe:ident, $func:literal, skb $skb:literal, dev $dev:tt, $point:ident) => {
        #[kprobe]
        pub fn $kp(ctx: ProbeContext) -> u32 {
            let dev = function!(@dev kp_arg, ctx, $dev);
            own::run(|| path::on_fn_point(kp_arg(&ctx, $skb), dev, Point::$point));
            0
        }

        #[fentry(function = $func)]
        pub fn $fe(ctx: FEntryContext) -> u32 {
            let dev = function!(@dev fe_arg, ctx, $dev);
            own::run(|| path::on_fn_point(fe_arg(&ctx, $skb), dev, Point::$point));
            0
        }
    };
    (@dev $arg:ident, $ctx:ident, none) => {
        0
    };
    (@dev $arg:ident, $ctx:ident, $n:literal) => {
        $arg(&$ctx, $n)
    };
}

// veth_xmit(struct sk_buff *skb, struct net_device *dev)
function!(kp_veth_xmit, fe_veth_xmit, "veth_xmit", skb 0, dev 1, VethXmit);
// br_forward(const struct net_bridge_port *to, struct sk_buff *skb, bool, bool)
function!(kp_br_forward, fe_br_forward, "br_forward", skb 1, dev none, BridgeForward);
// nf_nat_manip_pkt(struct sk_buff *skb, struct nf_conn *ct, enum nf_nat_manip_type, dir)
function!(kp_nf_nat_manip_pkt, fe_nf_nat_manip_pkt, "nf_nat_manip_pkt", skb 0, dev none, NatManip);
// vxlan_xmit_one(struct sk_buff *skb, struct net_device *dev, __be32 vni, ...)
function!(kp_vxlan_xmit_one, fe_vxlan_xmit_one, "vxlan_xmit_one", skb 0, dev 1, VxlanXmit);
// udp_tunnel_xmit_skb(struct rtable *rt, struct sock *sk, struct sk_buff *skb, ...)
function!(kp_udp_tunnel_xmit_skb, fe_udp_tunnel_xmit_skb, "udp_tunnel_xmit_skb", skb 2, dev none, UdpTunnelXmit);
// vxlan_rcv(struct sock *sk, struct sk_buff *skb)
function!(kp_vxlan_rcv, fe_vxlan_rcv, "vxlan_rcv", skb 1, dev none, VxlanRcv);
// ip_rcv(struct sk_buff *skb, struct net_device *dev, ...)
function!(kp_ip_rcv, fe_ip_rcv, "ip_rcv", skb 0, dev 1, IpRcv);
// tcp_v4_rcv(struct sk_buff *skb)
function!(kp_tcp_v4_rcv, fe_tcp_v4_rcv, "tcp_v4_rcv", skb 0, dev none, TcpRcv);
