//! Netfilter marks of a send still in its sender's stack (`--parts`): its journey and record
//! only begin at the first device (`path::start`), after the namespace's OUTPUT and POSTROUTING
//! hooks ran, on the same CPU in the same thread. The boundaries they crossed wait here, per
//! CPU, and go into the record if the journey is sampled.
use aya_ebpf::{macros::map, maps::PerCpuArray};
use netpath_common::{DevKey, NO_HOP, Point};

use crate::timeline::append_point;

/// Marks one send can wait with (a namespace's OUTPUT and POSTROUTING hooks rarely hold more
/// than a few groups of chains).
const MARKS: usize = 8;

/// Per CPU: `[tid, n, (boundary, ns) × MARKS]`.
#[map]
static NF_PENDING: PerCpuArray<[u64; 2 + 2 * MARKS]> = PerCpuArray::with_max_entries(1, 0);

/// Keeps boundary `k` crossed at `t` by thread `tid`'s send that began at `send_ts`; marks of
/// an earlier send or another thread are dropped first.
#[inline(always)]
pub fn push(tid: u32, send_ts: u64, k: u64, t: u64) {
    let Some(p) = NF_PENDING.get_ptr_mut(0) else {
        return;
    };
    let p = unsafe { &mut *p };
    if p[0] != tid as u64 || p[1] == 0 || p[3] < send_ts {
        p[0] = tid as u64;
        p[1] = 0;
    }
    let n = p[1] as usize;
    if n < MARKS {
        p[2 + 2 * n] = k;
        p[3 + 2 * n] = t;
        p[1] = n as u64 + 1;
    }
}

/// Marks boundary `k`, crossed at `t`, in `skb`'s sampled record (its kind is the boundary's
/// number); userspace takes the marks out of the points and pairs them into parts.
#[inline(always)]
pub fn mark(skb: u64, k: u64, t: u64) {
    let key = DevKey {
        netns: 0,
        ifindex: 0,
    };
    append_point(
        skb,
        Point::NfBoundary as u16,
        k as u16,
        key,
        NO_HOP as u32,
        t,
    );
}

/// Moves thread `tid`'s marks of the send that began at `send_ts` into `skb`'s record.
#[inline(always)]
pub fn drain(skb: u64, tid: u32, send_ts: u64) {
    let Some(p) = NF_PENDING.get_ptr_mut(0) else {
        return;
    };
    let p = unsafe { &mut *p };
    if p[0] != tid as u64 {
        return;
    }
    for i in 0..MARKS {
        if i as u64 >= p[1] {
            break;
        }
        let (k, t) = (p[2 + 2 * i], p[3 + 2 * i]);
        if t >= send_ts {
            mark(skb, k, t);
        }
    }
    p[1] = 0;
}
