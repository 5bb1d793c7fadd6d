//! Where a datagram's journey ends (`--proto udp|icmp`). UDP copies a linear skb to the user
//! without `skb:skb_copy_datagram_iovec`, frees it deferred on another CPU, and a spinning
//! receiver can take it off the queue before the `sk_data_ready` program ran: neither the copy
//! nor the wakeup reliably names the skb a receive returns. Its destination does: each receive
//! pass of a followed datagram records it under (destination address, port), and the receive
//! that returns data on a socket takes the entry of the address and port the socket receives
//! on (a ping socket: its echo identifier). Request/response keeps one datagram in flight per
//! socket.
use crate::{flights, kernel, maps::*};

#[inline(always)]
fn key(addr: u32, port: u16) -> u64 {
    (addr as u64) << 16 | port as u64
}

/// A receive pass of followed datagram `skb` (generation `first_ts`): the last one before the
/// socket has the final destination (NAT rewrites happen after the pass that carries them).
#[inline(always)]
pub fn on_receive_pass(skb: u64, first_ts: u64) {
    if let Ok((_, daddr, _, dport, proto)) = kernel::skb_tuple(skb) {
        // A ping socket's "port" is its echo identifier.
        let port = match (proto, kernel::echo_of(skb)) {
            (1, Some((_, id, _))) => id,
            _ => dport,
        };
        let _ = DGRAM_RX.insert(key(daddr, port), [skb, first_ts], 0);
    }
}

/// The journey a receive on `sk` returns: (skb, generation), or (0, 0) if none is recorded.
#[inline(always)]
pub fn received_on(sk: u64) -> (u64, u64) {
    let Ok((addr, port)) = kernel::sk_local(sk) else {
        return (0, 0);
    };
    let k = key(addr, port);
    let Some(v) = (unsafe { DGRAM_RX.get(k) }).copied() else {
        return (0, 0);
    };
    let _ = DGRAM_RX.remove(k);
    // Still the same packet in the flight table (else on_recv_exit counts it unmatched).
    match flights::get(v[0]) {
        Some(_) => (v[0], v[1]),
        None => (0, 0),
    }
}
