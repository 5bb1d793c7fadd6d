//! Kernel struct access. Offsets are never hard-coded: the loader reads them from BTF into the
//! load-time `CONFIG` global (`config.rs`).
use aya_ebpf::helpers::bpf_probe_read_kernel;
use netpath_common::{
    DevKey,
    config::{F_ADDR, F_IFINDEX, F_NETNS, F_PORT, F_PROTO},
};

use crate::config::conf;

/// (address, port) socket `sk` receives on, network byte order (`skc_num` is host order).
#[inline(always)]
pub fn sk_local(sk: u64) -> Result<(u32, u16), i64> {
    let a = unsafe { read::<u32>(sk, conf!(offsets.sk_rcv_saddr))? };
    let p = unsafe { read::<u16>(sk, conf!(offsets.sk_num))? };
    Ok((a, p.to_be()))
}

/// `task->pid` (the thread id; 0 for the idle tasks).
#[inline(always)]
pub fn task_pid(task: u64) -> u32 {
    unsafe { read::<u32>(task, conf!(offsets.task_pid)) }.unwrap_or(u32::MAX)
}

/// The flight table's slot mask, bounded by the map's size whatever the loader set.
#[inline(always)]
pub fn flight_mask() -> u32 {
    conf!(flight_mask) & (netpath_common::FLIGHT_SLOTS - 1)
}

/// The kernel has no `sock:sk_data_ready` (see `LoadConfig::ready_fallback`).
#[inline(always)]
pub fn ready_fallback() -> bool {
    conf!(ready_fallback) != 0
}

/// What the harness sends in this run (`netpath_common::proto`), set by the loader before
/// each traced run (`compare --proto tcp,udp,icmp` interleaves them under one load).
#[inline(always)]
fn proto_mode() -> u32 {
    crate::maps::RUN
        .get(netpath_common::run::PROTO)
        .copied()
        .unwrap_or(0)
}

/// Relay processes (docker-proxy) are followed in this run.
#[inline(always)]
pub fn relays() -> bool {
    crate::maps::RUN
        .get(netpath_common::run::RELAYS)
        .is_some_and(|v| *v != 0)
}

/// Every program of the run is attached (`netpath_common::run::ARMED`): passively traced
/// journeys start and end only then.
#[inline(always)]
pub fn armed() -> bool {
    crate::maps::RUN
        .get(netpath_common::run::ARMED)
        .is_some_and(|v| *v != 0)
}

/// No watched device starts a journey at a receive point (`run::TX_ENTRIES_ONLY`).
#[inline(always)]
pub fn tx_entries_only() -> bool {
    crate::maps::RUN
        .get(netpath_common::run::TX_ENTRIES_ONLY)
        .is_some_and(|v| *v != 0)
}

/// Datagram journeys (`--proto udp|icmp`): UDP copies a linear skb without
/// `skb:skb_copy_datagram_iovec` and frees it later on another CPU, so the receive that
/// completes a journey finds it by the address it was received on (`dgram.rs`).
#[inline(always)]
pub fn dgram() -> bool {
    proto_mode() != netpath_common::proto::TCP
}

/// `--proto icmp`: the harness pings; the kernel's echo reply continues the round trip.
#[inline(always)]
pub fn icmp_echo() -> bool {
    proto_mode() == netpath_common::proto::ICMP
}

pub const ICMP_ECHO_REPLY: u8 = 0;
pub const ICMP_ECHO: u8 = 8;

/// (type, identifier, sequence) of an IPv4 ICMP echo request or reply; id and sequence in
/// network byte order. `None` for anything else.
#[inline(always)]
pub fn echo_of(skb: u64) -> Option<(u8, u16, u16)> {
    let (ip, l4) = l4_of(skb).ok()?;
    if unsafe { read::<u8>(ip, 9) }.ok()? != 1 {
        return None;
    }
    let h = unsafe { read::<[u8; 8]>(l4, 0) }.ok()?;
    if h[0] != ICMP_ECHO && h[0] != ICMP_ECHO_REPLY {
        return None;
    }
    Some((
        h[0],
        u16::from_ne_bytes([h[4], h[5]]),
        u16::from_ne_bytes([h[6], h[7]]),
    ))
}

/// An ICMP skb's (type, code, echo identifier, echo sequence), the last two network order and
/// 0 for other types; None for other protocols.
#[inline(always)]
pub fn icmp_of(skb: u64) -> Option<(u8, u8, u16, u16)> {
    let (ip, l4) = l4_of(skb).ok()?;
    if unsafe { read::<u8>(ip, 9) }.ok()? != 1 {
        return None;
    }
    let h = unsafe { read::<[u8; 8]>(l4, 0) }.ok()?;
    let echo = h[0] == ICMP_ECHO || h[0] == ICMP_ECHO_REPLY;
    let (id, seq) = if echo {
        (
            u16::from_ne_bytes([h[4], h[5]]),
            u16::from_ne_bytes([h[6], h[7]]),
        )
    } else {
        (0, 0)
    };
    Some((h[0], h[1], id, seq))
}

/// A packet's tuple for timelines: `skb_tuple`, with an ICMP echo's identifier as both ports.
#[inline(always)]
pub fn timeline_tuple(skb: u64) -> (u32, u32, u16, u16, u8) {
    let (sa, da, sp, dp, proto) = skb_tuple(skb).unwrap_or((0, 0, 0, 0, 0));
    match icmp_of(skb) {
        Some((_, _, id, _)) => (sa, da, id, id, proto),
        None => (sa, da, sp, dp, proto),
    }
}

/// Addresses of the IPv4 header and the transport header of an skb (Err if not IPv4).
#[inline(always)]
fn l4_of(skb: u64) -> Result<(u64, u64), i64> {
    let head = unsafe { read::<u64>(skb, conf!(offsets.skb_head))? };
    let nh = unsafe { read::<u16>(skb, conf!(offsets.skb_network_header))? } as u64;
    let th = unsafe { read::<u16>(skb, conf!(offsets.skb_transport_header))? } as u64;
    let ip = head + nh;
    let vihl = unsafe { read::<u8>(ip, 0)? };
    if vihl >> 4 != 4 {
        return Err(-1);
    }
    // The transport header offset may not be set yet on some paths (0xffff): the IHL says.
    let l4 = if th == 0xffff || th == 0 {
        ip + ((vihl & 0x0f) as u64) * 4
    } else {
        head + th
    };
    Ok((ip, l4))
}

#[inline(always)]
pub fn trace_any() -> bool {
    conf!(trace_any) != 0
}

#[inline(always)]
pub fn sample_every() -> u32 {
    conf!(sample_every)
}

#[inline(always)]
pub fn max_gap_ns() -> u64 {
    conf!(max_gap_ns)
}

#[inline(always)]
unsafe fn read<T>(base: u64, off: u32) -> Result<T, i64> {
    unsafe { bpf_probe_read_kernel((base + off as u64) as *const T).map_err(|e| e as i64) }
}

/// `skb->dev`.
#[inline(always)]
pub fn skb_dev(skb: u64) -> Result<u64, i64> {
    unsafe { read::<u64>(skb, conf!(offsets.skb_dev)) }
}

/// `skb->sk`: the socket the skb belongs to (0: none, e.g. forwarded).
#[inline(always)]
pub fn skb_sk(skb: u64) -> u64 {
    unsafe { read::<u64>(skb, conf!(offsets.skb_sk)) }.unwrap_or(0)
}

/// (netns inode, ifindex) of a `struct net_device *`.
#[inline(always)]
pub fn dev_key(dev: u64) -> Result<DevKey, i64> {
    if dev == 0 {
        return Err(-1);
    }
    let ifindex = unsafe { read::<u32>(dev, conf!(offsets.dev_ifindex))? };
    let net = unsafe { read::<u64>(dev, conf!(offsets.dev_nd_net))? };
    let netns = if net == 0 {
        0
    } else {
        unsafe { read::<u32>(net, conf!(offsets.net_ns_inum))? }
    };
    Ok(DevKey { netns, ifindex })
}

/// Whether a packet about to be tracked passes the `trace` filters.
#[inline(always)]
pub fn filter_pass(skb: u64, key: &DevKey) -> bool {
    let on = conf!(filter.on);
    if on == 0 {
        return true;
    }
    if on & F_NETNS != 0 && key.netns != conf!(filter.netns) {
        return false;
    }
    if on & F_IFINDEX != 0 && key.ifindex != conf!(filter.ifindex) {
        return false;
    }
    if on & (F_PORT | F_ADDR | F_PROTO) == 0 {
        return true;
    }
    let (saddr, daddr, sport, dport, proto) = match skb_tuple(skb) {
        Ok(t) => t,
        Err(_) => return false,
    };
    if on & F_PROTO != 0 && proto as u32 != conf!(filter.proto) {
        return false;
    }
    if on & F_ADDR != 0 {
        let a = conf!(filter.addr);
        if saddr != a && daddr != a {
            return false;
        }
    }
    if on & F_PORT != 0 {
        let p = conf!(filter.port) as u16;
        if sport != p && dport != p && !second_leg(saddr, daddr, sport, dport) {
            return false;
        }
    }
    true
}

/// A published port's second leg: the container side's port, between the container and the
/// proxy's (or the NAT's) side of its network.
#[inline(always)]
fn second_leg(saddr: u32, daddr: u32, sport: u16, dport: u16) -> bool {
    let (p2, a2) = (conf!(filter.port2) as u16, conf!(filter.addr2));
    p2 != 0 && (sport == p2 && daddr == a2 || dport == p2 && saddr == a2)
}

/// IPv4/TCP-or-UDP tuple of an skb whose network and transport headers are set.
/// Returns (saddr, daddr, sport, dport, protocol), addresses and ports in network byte order;
/// zeros when not IPv4.
#[inline(always)]
pub fn skb_tuple(skb: u64) -> Result<(u32, u32, u16, u16, u8), i64> {
    let Ok((ip, l4)) = l4_of(skb) else {
        return Ok((0, 0, 0, 0, 0));
    };
    let proto = unsafe { read::<u8>(ip, 9)? };
    let saddr = unsafe { read::<u32>(ip, 12)? };
    let daddr = unsafe { read::<u32>(ip, 16)? };
    let ports = unsafe { read::<[u16; 2]>(l4, 0)? };
    Ok((saddr, daddr, ports[0], ports[1], proto))
}

/// The skb at the tail of a socket's receive queue (0 if empty or unreadable).
#[inline(always)]
pub fn sk_rcvq_tail(sk: u64) -> u64 {
    if sk == 0 {
        return 0;
    }
    unsafe { read::<u64>(sk, conf!(offsets.sk_rcvq_tail)) }.unwrap_or(0)
}

/// `tcp_sock.rcv_nxt`: the sequence number after the last byte TCP queued on the socket.
#[inline(always)]
pub fn tcp_rcv_nxt(sk: u64) -> Result<u32, i64> {
    unsafe { read::<u32>(sk, conf!(offsets.tcp_rcv_nxt)) }
}

/// `tcp_sock.copied_seq`: the sequence number after the last byte the application consumed.
#[inline(always)]
pub fn tcp_copied_seq(sk: u64) -> Result<u32, i64> {
    unsafe { read::<u32>(sk, conf!(offsets.tcp_copied_seq)) }
}

/// Destination (address, port) a socket is connected to, network byte order.
#[inline(always)]
pub fn sk_dest(sk: u64) -> Result<(u32, u16), i64> {
    if sk == 0 {
        return Err(-1);
    }
    let a = unsafe { read::<u32>(sk, conf!(offsets.sk_daddr))? };
    let p = unsafe { read::<u16>(sk, conf!(offsets.sk_dport))? };
    Ok((a, p))
}

/// TCP payload bytes of an IPv4 skb (0 for a pure ACK or a non-TCP packet).
#[inline(always)]
pub fn tcp_payload(skb: u64) -> Result<u32, i64> {
    let head = unsafe { read::<u64>(skb, conf!(offsets.skb_head))? };
    let nh = unsafe { read::<u16>(skb, conf!(offsets.skb_network_header))? } as u64;
    let ip = head + nh;
    let vihl = unsafe { read::<u8>(ip, 0)? };
    if vihl >> 4 != 4 || unsafe { read::<u8>(ip, 9)? } != 6 {
        return Ok(0);
    }
    let ihl = ((vihl & 0x0f) as u32) * 4;
    let tot = u16::from_be(unsafe { read::<u16>(ip, 2)? }) as u32;
    let doff = ((unsafe { read::<u8>(ip + ihl as u64, 12)? } >> 4) as u32) * 4;
    Ok(tot.saturating_sub(ihl + doff))
}
