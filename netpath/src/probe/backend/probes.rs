//! The one probe table: every program of the eBPF object, how and where it attaches, the
//! hop-model points it stamps and which backends attach it. The loader (`tracer`), `doctor` and
//! `Backend::visible_hops` read it; a new probe point is a row here, its program in one
//! `netpath-ebpf/src/probes/` module and its point in `netpath_common::hop`.
use netpath_common::Point;

use super::Backend;

/// How a program attaches.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// A tracepoint; `target` is `category:name`.
    Tracepoint,
    /// A raw tracepoint; `target` is the tracepoint's name (arg 0 is usually the skb).
    RawTracepoint,
    /// A TC classifier; `target` is `ingress` or `egress`.
    Tc,
    /// A kprobe; `target` is the kernel function.
    Kprobe,
    /// An fentry program; `target` is the kernel function (its BTF must be reachable).
    Fentry,
}

/// What the loader does with a probe.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// Always attached; a kernel without the tracepoint loses only that point.
    Path,
    /// The traced receiving thread's wakeup (scheduler tracepoints, which fire on every
    /// context switch of the machine): attached only when some thread is followed.
    Wakeup,
    /// Where journeys start and end (socket tracepoints): TCP needs all three
    /// (`tcp:tcp_sendmsg_locked` is in kernels from 6.13), datagrams only the two `sock:*_length`
    /// ones (6.3+); where TCP lacks one, its runs use the `SyscallBound` ones instead.
    SockBound,
    /// Journey bounds on older kernels: the traced threads' syscall tracepoints, which cost
    /// more (every syscall on the slow path).
    SyscallBound,
    /// A `SyscallBound` probe that also starts datagram sends on any kernel (no socket
    /// tracepoint marks the start of a UDP or ping send).
    SyscallSend,
    /// Timeline detail that never splits a hop: attached only when full timelines are wanted.
    Detail,
    /// Only for traffic netpath does not generate (`trace --container`, `serve`): where a
    /// journey that waited at its socket is read by the application.
    Passive,
    /// An empty program on a hook the others use, attached only by `Tracer::attach_floor`.
    Floor,
    /// Per-device packet counts, attached per device by `Tracer::attach_tc_here`.
    Counter,
    /// `netpath validate`'s injected delay, attached on the one device it names.
    Delay,
    /// A function probe of the kprobe/fentry backends.
    Function,
    /// Only `netpath doctor` loads it, to learn whether the kernel allows its kind.
    Doctor,
}

#[derive(Clone, Copy, Debug)]
pub struct Probe {
    /// Program name in the eBPF object.
    pub prog: &'static str,
    pub kind: Kind,
    /// Where it attaches (see `Kind`).
    pub target: &'static str,
    pub role: Role,
    /// Hop-model points it stamps (none: it counts, frees or bounds a send's end).
    pub points: &'static [Point],
    /// Backends that attach it.
    pub backends: &'static [Backend],
}

const ALL: &[Backend] = &[Backend::Tracepoint, Backend::Kprobe, Backend::Fentry];
/// kprobes serve the fentry backend too, for functions whose BTF aya cannot reach (modules).
const FN: &[Backend] = &[Backend::Kprobe, Backend::Fentry];
const FE: &[Backend] = &[Backend::Fentry];

const fn p(
    prog: &'static str,
    kind: Kind,
    target: &'static str,
    role: Role,
    points: &'static [Point],
    backends: &'static [Backend],
) -> Probe {
    Probe {
        prog,
        kind,
        target,
        role,
        points,
        backends,
    }
}

use Kind::{Fentry, Kprobe, RawTracepoint as Raw, Tc, Tracepoint as Tp};
use Point as P;
use Role::{
    Counter, Delay, Detail, Doctor, Floor, Function, Passive, Path, SockBound, SyscallBound,
    SyscallSend, Wakeup,
};

/// Every probe, in load order. Rows of one kind used by `doctor` come first of that kind.
#[rustfmt::skip]
pub const PROBES: &[Probe] = &[
    p("net_dev_queue", Raw, "net_dev_queue", Path, &[P::DevQueue, P::EchoReply], ALL),
    p("netif_rx", Raw, "netif_rx", Path, &[P::NetifRx], ALL),
    p("netif_receive_skb", Raw, "netif_receive_skb", Path, &[P::NetifReceive], ALL),
    p("skb_copy_datagram_iovec", Raw, "skb_copy_datagram_iovec", Path, &[P::Copy], ALL),
    p("kfree_skb", Raw, "kfree_skb", Path, &[P::Drop], ALL),
    p("consume_skb", Raw, "consume_skb", Path, &[], ALL),
    p("sk_data_ready", Raw, "sk_data_ready", Path, &[P::SockReady], ALL),
    p("softirq_entry", Raw, "softirq_entry", Path, &[], ALL),
    p("sched_waking", Raw, "sched_waking", Wakeup, &[P::SchedWaking], ALL),
    p("sched_switch", Raw, "sched_switch", Wakeup, &[P::SchedSwitch], ALL),
    p("tcp_sendmsg_locked", Raw, "tcp_sendmsg_locked", SockBound, &[P::SendEnter], ALL),
    p("sock_send_length", Raw, "sock_send_length", SockBound, &[], ALL),
    p("sock_recv_length", Raw, "sock_recv_length", SockBound, &[P::RecvExit], ALL),
    p("floor_net_dev_queue", Raw, "net_dev_queue", Floor, &[], ALL),
    p("floor_sched_waking", Raw, "sched_waking", Floor, &[], ALL),
    p("floor_sched_switch", Raw, "sched_switch", Floor, &[], ALL),
    p("net_dev_start_xmit", Raw, "net_dev_start_xmit", Detail, &[P::DevXmit], ALL),
    p("tcp_rcv_space_adjust", Raw, "tcp_rcv_space_adjust", Passive, &[P::SockRead], ALL),
    p("sys_enter_sendto", Tp, "syscalls:sys_enter_sendto", SyscallSend, &[P::SendEnter], ALL),
    p("sys_exit_sendto", Tp, "syscalls:sys_exit_sendto", SyscallBound, &[], ALL),
    p("sys_exit_recvfrom", Tp, "syscalls:sys_exit_recvfrom", SyscallBound, &[P::RecvExit], ALL),
    p("sys_enter_splice", Tp, "syscalls:sys_enter_splice", SyscallBound, &[P::SendEnter], ALL),
    p("tc_ingress", Tc, "ingress", Counter, &[], ALL),
    p("tc_egress", Tc, "egress", Counter, &[], ALL),
    p("tc_delay", Tc, "ingress", Delay, &[], ALL),
    p("doctor_kprobe", Kprobe, "ip_rcv", Doctor, &[], &[]),
    p("doctor_fentry", Fentry, "ip_rcv", Doctor, &[], &[]),
    p("kp_veth_xmit", Kprobe, "veth_xmit", Function, &[P::VethXmit], FN),
    p("fe_veth_xmit", Fentry, "veth_xmit", Function, &[P::VethXmit], FE),
    p("kp_br_forward", Kprobe, "br_forward", Function, &[P::BridgeForward], FN),
    p("fe_br_forward", Fentry, "br_forward", Function, &[P::BridgeForward], FE),
    p("kp_nf_nat_manip_pkt", Kprobe, "nf_nat_manip_pkt", Function, &[P::NatManip], FN),
    p("fe_nf_nat_manip_pkt", Fentry, "nf_nat_manip_pkt", Function, &[P::NatManip], FE),
    p("kp_vxlan_xmit_one", Kprobe, "vxlan_xmit_one", Function, &[P::VxlanXmit], FN),
    p("fe_vxlan_xmit_one", Fentry, "vxlan_xmit_one", Function, &[P::VxlanXmit], FE),
    p("kp_udp_tunnel_xmit_skb", Kprobe, "udp_tunnel_xmit_skb", Function, &[P::UdpTunnelXmit], FN),
    p("fe_udp_tunnel_xmit_skb", Fentry, "udp_tunnel_xmit_skb", Function, &[P::UdpTunnelXmit], FE),
    p("kp_vxlan_rcv", Kprobe, "vxlan_rcv", Function, &[P::VxlanRcv], FN),
    p("fe_vxlan_rcv", Fentry, "vxlan_rcv", Function, &[P::VxlanRcv], FE),
    p("kp_ip_rcv", Kprobe, "ip_rcv", Function, &[P::IpRcv], FN),
    p("fe_ip_rcv", Fentry, "ip_rcv", Function, &[P::IpRcv], FE),
    p("kp_tcp_v4_rcv", Kprobe, "tcp_v4_rcv", Function, &[P::TcpRcv], FN),
    p("fe_tcp_v4_rcv", Fentry, "tcp_v4_rcv", Function, &[P::TcpRcv], FE),
];

impl Probe {
    /// `(category, name)` of a tracepoint's target (the whole target, twice, for the others).
    pub fn tracepoint(&self) -> (&'static str, &'static str) {
        self.target
            .split_once(':')
            .unwrap_or((self.target, self.target))
    }
}

/// Whether a run that follows no thread of its own (`serve`: journeys start on devices and end
/// at the application's read, `Passive`) needs probe `p`: not the wakeup, socket-bound or
/// syscall probes, which only act for traced threads, nor the copy to user space where
/// `sk_data_ready` parks such journeys (`ready`).
pub fn passive_needs(p: &Probe, ready: bool) -> bool {
    match p.role {
        Role::Path => !(ready && p.points == [Point::Copy]),
        Role::Wakeup | Role::SockBound | Role::SyscallBound | Role::SyscallSend => false,
        _ => true,
    }
}

/// Whether the light profile (`serve`'s default) attaches `p`: not the two path programs that
/// name no hop and run for every packet or softirq of the machine: `softirq_entry` (a
/// packet's NET_RX softirq runs) and `consume_skb` (packets consumed before their socket; a
/// journey left open by one is then taken over as stale or reused, and counted so).
pub fn light_needs(p: &Probe) -> bool {
    !matches!(p.prog, "softirq_entry" | "consume_skb")
}

/// The probes `backend` attaches with `role`, in table order.
pub fn of(backend: Backend, role: Role) -> impl Iterator<Item = &'static Probe> {
    PROBES
        .iter()
        .filter(move |p| p.role == role && p.backends.contains(&backend))
}

/// The probes of one kind, in table order.
pub fn of_kind(kind: Kind) -> impl Iterator<Item = &'static Probe> {
    PROBES.iter().filter(move |p| p.kind == kind)
}

/// The probe `doctor` tries for `kind`: its `Doctor` row if it has one, else the first row of
/// that kind.
pub fn for_doctor(kind: Kind) -> &'static Probe {
    of_kind(kind)
        .find(|p| p.role == Role::Doctor)
        .or_else(|| of_kind(kind).next())
        .expect("every kind has a probe in the table")
}

/// Function probes of `backend`: (kernel function, kprobe program, fentry program if the
/// backend has one), one per function in table order.
pub fn functions(
    backend: Backend,
) -> impl Iterator<Item = (&'static str, &'static str, Option<&'static str>)> {
    of(backend, Role::Function)
        .filter(|p| p.kind == Kind::Kprobe)
        .map(move |k| {
            let fentry = of(backend, Role::Function)
                .find(|f| f.kind == Kind::Fentry && f.target == k.target)
                .map(|f| f.prog);
            (k.target, k.prog, fentry)
        })
}

/// Every point some probe of `backend` stamps on the harness's journeys (the `Passive` ones'
/// only on traffic netpath does not generate).
pub fn points(backend: Backend) -> impl Iterator<Item = Point> {
    PROBES
        .iter()
        .filter(move |p| p.backends.contains(&backend) && p.role != Role::Passive)
        .flat_map(|p| p.points.iter().copied())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn program_names_are_unique() {
        let mut names: Vec<&str> = PROBES.iter().map(|p| p.prog).collect();
        names.sort();
        let n = names.len();
        names.dedup();
        assert_eq!(names.len(), n);
    }

    #[test]
    fn every_function_has_a_kprobe_and_an_fentry() {
        let kp: Vec<_> = functions(Backend::Kprobe).collect();
        let fe: Vec<_> = functions(Backend::Fentry).collect();
        assert_eq!(kp.len(), 8);
        assert_eq!(kp.len(), fe.len());
        assert!(kp.iter().all(|f| f.2.is_none()));
        assert!(fe.iter().all(|f| f.2.is_some()));
        assert_eq!(functions(Backend::Tracepoint).count(), 0);
    }

    #[test]
    fn a_passive_run_leaves_the_thread_probes_detached() {
        let needed = |ready| -> Vec<&str> {
            of_kind(Kind::RawTracepoint)
                .chain(of_kind(Kind::Tracepoint))
                .filter(|p| {
                    matches!(
                        p.role,
                        Role::Path | Role::Wakeup | Role::SockBound | Role::Passive
                    )
                })
                .filter(|p| passive_needs(p, ready))
                .map(|p| p.prog)
                .collect()
        };
        let with_ready = needed(true);
        for gone in [
            "sched_waking",
            "sched_switch",
            "tcp_sendmsg_locked",
            "sock_recv_length",
        ] {
            assert!(!with_ready.contains(&gone), "{gone} in {with_ready:?}");
        }
        for kept in [
            "net_dev_queue",
            "netif_receive_skb",
            "sk_data_ready",
            "kfree_skb",
            // Where a journey parked at its socket is read by the application.
            "tcp_rcv_space_adjust",
        ] {
            assert!(with_ready.contains(&kept), "{kept} not in {with_ready:?}");
        }
        assert!(!with_ready.contains(&"skb_copy_datagram_iovec"));
        // Without sk_data_ready, the copy ends a passive journey.
        assert!(needed(false).contains(&"skb_copy_datagram_iovec"));
    }

    #[test]
    fn doctor_tries_the_same_programs_as_before() {
        let d = |k| for_doctor(k).prog;
        assert_eq!(d(Kind::Tracepoint), "sys_enter_sendto");
        assert_eq!(d(Kind::RawTracepoint), "net_dev_queue");
        assert_eq!(d(Kind::Tc), "tc_ingress");
        assert_eq!(d(Kind::Kprobe), "doctor_kprobe");
        assert_eq!(d(Kind::Fentry), "doctor_fentry");
    }
}
