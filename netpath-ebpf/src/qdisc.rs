//! `--parts`: the qdisc part of a transmit. `dev_queue` (`net_dev_queue`) stands before the
//! device's qdisc and `start_xmit` (`net_dev_start_xmit`) where the driver takes the packet, so
//! the time between them, on one device, is the qdisc's enqueue and dequeue (and the checks of
//! `validate_xmit_skb`). Userspace names the qdisc from netlink.
use netpath_common::{
    DevInfo, Flight, Point, QDISC_KINDS,
    config::{XMIT_POINT, XMIT_QDISC},
    hist,
};

use crate::{config::conf, maps::QDISC_PARTS};

/// Whether `start_xmit` is a timeline point (else it only times qdiscs).
#[inline(always)]
pub fn xmit_point() -> bool {
    conf!(xmit) & XMIT_POINT != 0
}

/// A followed packet reached `start_xmit` at `t` on the device `dev`: if its last point was
/// that device's queue, the time since is its qdisc part.
#[inline(always)]
pub fn on_xmit(f: &Flight, dev: &DevInfo, t: u64) {
    if conf!(xmit) & XMIT_QDISC == 0 || f.last_point != Point::DevQueue as u16 {
        return;
    }
    let i = (f.last_kind as u32 & (QDISC_KINDS - 1)) * 2 + (f.dir as u32 & 1);
    let Some(h) = QDISC_PARTS.get_ptr_mut(i) else {
        return;
    };
    let d = t.wrapping_sub(f.last_ts);
    let b = hist::bucket(d) as usize & (hist::HIST_SLOTS - 1);
    // Per CPU: plain adds, no other writer.
    unsafe {
        (*h).sum_ns += d;
        (*h).at = (dev.key.netns as u64) << 32 | dev.key.ifindex as u64;
        (*h).buckets[b] += 1;
    }
}
