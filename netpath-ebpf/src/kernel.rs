//! Kernel struct access. Offsets are never hard-coded: the loader reads them from BTF and
//! overrides these globals before load (the counterpart of libbpf's `const volatile`).
use aya_ebpf::helpers::bpf_probe_read_kernel;
use netpath_common::DevKey;

#[unsafe(no_mangle)]
static OFF_SKB_DEV: u32 = 0;
#[unsafe(no_mangle)]
static OFF_SKB_HEAD: u32 = 0;
#[unsafe(no_mangle)]
static OFF_SKB_NETWORK_HEADER: u32 = 0;
#[unsafe(no_mangle)]
static OFF_SKB_TRANSPORT_HEADER: u32 = 0;
#[unsafe(no_mangle)]
static OFF_DEV_IFINDEX: u32 = 0;
#[unsafe(no_mangle)]
static OFF_DEV_ND_NET: u32 = 0;
#[unsafe(no_mangle)]
static OFF_NET_NS_INUM: u32 = 0;
#[unsafe(no_mangle)]
static OFF_SK_DADDR: u32 = 0;
#[unsafe(no_mangle)]
static OFF_SK_DPORT: u32 = 0;
#[unsafe(no_mangle)]
static OFF_SK_RCVQ_TAIL: u32 = 0;
#[unsafe(no_mangle)]
static OFF_SKB_SK: u32 = 0;
#[unsafe(no_mangle)]
static OFF_TASK_PID: u32 = 0;
#[unsafe(no_mangle)]
static OFF_SK_RCV_SADDR: u32 = 0;
#[unsafe(no_mangle)]
static OFF_SK_NUM: u32 = 0;

/// (address, port) socket `sk` receives on, network byte order (`skc_num` is host order).
#[inline(always)]
pub fn sk_local(sk: u64) -> Result<(u32, u16), i64> {
    let a = unsafe { read::<u32>(sk, g32(&OFF_SK_RCV_SADDR))? };
    let p = unsafe { read::<u16>(sk, g32(&OFF_SK_NUM))? };
    Ok((a, p.to_be()))
}

/// `task->pid` (the thread id; 0 for the idle tasks).
#[inline(always)]
pub fn task_pid(task: u64) -> u32 {
    unsafe { read::<u32>(task, g32(&OFF_TASK_PID)) }.unwrap_or(u32::MAX)
}
/// Slots of the flight table in use, minus one (a power of two minus one, at most
/// `FLIGHT_SLOTS - 1`): a test sets it tiny to force collisions.
#[unsafe(no_mangle)]
static FLIGHT_MASK: u32 = netpath_common::FLIGHT_SLOTS - 1;

#[inline(always)]
pub fn flight_mask() -> u32 {
    g32(&FLIGHT_MASK) & (netpath_common::FLIGHT_SLOTS - 1)
}
/// Kernel-side packet filter of `netpath trace`: bit set of the filters below that apply.
#[unsafe(no_mangle)]
static FILTER_ON: u32 = 0;
/// Port (network byte order) matched against source or destination.
#[unsafe(no_mangle)]
static FILTER_PORT: u32 = 0;
/// A second port that also passes the port filter (0: none): the container side of a
/// published port, so both legs of a relayed journey are followed.
#[unsafe(no_mangle)]
static FILTER_PORT2: u32 = 0;
/// IPv4 address (network byte order) matched against source or destination.
#[unsafe(no_mangle)]
static FILTER_ADDR: u32 = 0;
#[unsafe(no_mangle)]
static FILTER_PROTO: u32 = 0;
/// Netns inode and ifindex of the device where the packet is first seen.
#[unsafe(no_mangle)]
static FILTER_NETNS: u32 = 0;
#[unsafe(no_mangle)]
static FILTER_IFINDEX: u32 = 0;
/// The kernel has no `sock:sk_data_ready`: relays continue from the last receive pass.
#[unsafe(no_mangle)]
static READY_FALLBACK: u32 = 0;

#[inline(always)]
pub fn ready_fallback() -> bool {
    g32(&READY_FALLBACK) != 0
}

/// What the harness sends in this run (0 TCP, 1 UDP, 2 ICMP echo), set by the loader before
/// each traced run (`compare --proto tcp,udp,icmp` interleaves them under one load).
#[inline(always)]
fn proto_mode() -> u32 {
    crate::maps::PROTO_MODE.get(0).copied().unwrap_or(0)
}

/// Datagram journeys (`--proto udp|icmp`): UDP copies a linear skb without
/// `skb:skb_copy_datagram_iovec` and frees it later on another CPU, so the receive that
/// completes a journey finds it by the address it was received on (`dgram.rs`).
#[inline(always)]
pub fn dgram() -> bool {
    proto_mode() != 0
}

/// `--proto icmp`: the harness pings; the kernel's echo reply continues the round trip.
#[inline(always)]
pub fn icmp_echo() -> bool {
    proto_mode() == 2
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
    let head = unsafe { read::<u64>(skb, g32(&OFF_SKB_HEAD))? };
    let nh = unsafe { read::<u16>(skb, g32(&OFF_SKB_NETWORK_HEADER))? } as u64;
    let th = unsafe { read::<u16>(skb, g32(&OFF_SKB_TRANSPORT_HEADER))? } as u64;
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

/// Follow any packet first seen on a watched device (filters apply), not only traced sends.
#[unsafe(no_mangle)]
static TRACE_ANY: u32 = 0;

#[inline(always)]
pub fn trace_any() -> bool {
    g32(&TRACE_ANY) != 0
}

/// Record one sampled timeline every N started packets (0: none, 1: all).
#[unsafe(no_mangle)]
static SAMPLE_EVERY: u32 = 64;
/// A tracked skb not seen for this long is stale (its address was reused or it was lost).
#[unsafe(no_mangle)]
static MAX_GAP_NS: u64 = 100_000_000;

#[inline(always)]
fn g32(v: &u32) -> u32 {
    unsafe { core::ptr::read_volatile(v) }
}

#[inline(always)]
pub fn sample_every() -> u32 {
    g32(&SAMPLE_EVERY)
}

#[inline(always)]
pub fn max_gap_ns() -> u64 {
    unsafe { core::ptr::read_volatile(&MAX_GAP_NS) }
}

#[inline(always)]
unsafe fn read<T>(base: u64, off: u32) -> Result<T, i64> {
    unsafe { bpf_probe_read_kernel((base + off as u64) as *const T).map_err(|e| e as i64) }
}

/// `skb->dev`.
#[inline(always)]
pub fn skb_dev(skb: u64) -> Result<u64, i64> {
    unsafe { read::<u64>(skb, g32(&OFF_SKB_DEV)) }
}

/// `skb->sk`: the socket the skb belongs to (0: none, e.g. forwarded).
#[inline(always)]
pub fn skb_sk(skb: u64) -> u64 {
    unsafe { read::<u64>(skb, g32(&OFF_SKB_SK)) }.unwrap_or(0)
}

/// (netns inode, ifindex) of a `struct net_device *`.
#[inline(always)]
pub fn dev_key(dev: u64) -> Result<DevKey, i64> {
    if dev == 0 {
        return Err(-1);
    }
    let ifindex = unsafe { read::<u32>(dev, g32(&OFF_DEV_IFINDEX))? };
    let net = unsafe { read::<u64>(dev, g32(&OFF_DEV_ND_NET))? };
    let netns = if net == 0 {
        0
    } else {
        unsafe { read::<u32>(net, g32(&OFF_NET_NS_INUM))? }
    };
    Ok(DevKey { netns, ifindex })
}

pub const F_PORT: u32 = 1;
pub const F_ADDR: u32 = 2;
pub const F_PROTO: u32 = 4;
pub const F_NETNS: u32 = 8;
pub const F_IFINDEX: u32 = 16;

/// Whether a packet about to be tracked passes the `trace` filters.
#[inline(always)]
pub fn filter_pass(skb: u64, key: &DevKey) -> bool {
    let on = g32(&FILTER_ON);
    if on == 0 {
        return true;
    }
    if on & F_NETNS != 0 && key.netns != g32(&FILTER_NETNS) {
        return false;
    }
    if on & F_IFINDEX != 0 && key.ifindex != g32(&FILTER_IFINDEX) {
        return false;
    }
    if on & (F_PORT | F_ADDR | F_PROTO) == 0 {
        return true;
    }
    let (saddr, daddr, sport, dport, proto) = match skb_tuple(skb) {
        Ok(t) => t,
        Err(_) => return false,
    };
    if on & F_PROTO != 0 && proto as u32 != g32(&FILTER_PROTO) {
        return false;
    }
    if on & F_ADDR != 0 {
        let a = g32(&FILTER_ADDR);
        if saddr != a && daddr != a {
            return false;
        }
    }
    if on & F_PORT != 0 {
        let (p, p2) = (g32(&FILTER_PORT) as u16, g32(&FILTER_PORT2) as u16);
        if sport != p && dport != p && (p2 == 0 || sport != p2 && dport != p2) {
            return false;
        }
    }
    true
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
    unsafe { read::<u64>(sk, g32(&OFF_SK_RCVQ_TAIL)) }.unwrap_or(0)
}

/// Destination (address, port) a socket is connected to, network byte order.
#[inline(always)]
pub fn sk_dest(sk: u64) -> Result<(u32, u16), i64> {
    if sk == 0 {
        return Err(-1);
    }
    let a = unsafe { read::<u32>(sk, g32(&OFF_SK_DADDR))? };
    let p = unsafe { read::<u16>(sk, g32(&OFF_SK_DPORT))? };
    Ok((a, p))
}

/// TCP payload bytes of an IPv4 skb (0 for a pure ACK or a non-TCP packet).
#[inline(always)]
pub fn tcp_payload(skb: u64) -> Result<u32, i64> {
    let head = unsafe { read::<u64>(skb, g32(&OFF_SKB_HEAD))? };
    let nh = unsafe { read::<u16>(skb, g32(&OFF_SKB_NETWORK_HEADER))? } as u64;
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
