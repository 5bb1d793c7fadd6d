//! `irq:softirq_entry`: counts NET_RX softirq runs per CPU, so each packet can tell how many
//! distinct runs carried it.
use aya_ebpf::{macros::raw_tracepoint, programs::RawTracePointContext};

use crate::{own, path};

const NET_RX_SOFTIRQ: u64 = 3;

#[raw_tracepoint(tracepoint = "softirq_entry")]
pub fn softirq_entry(ctx: RawTracePointContext) -> i32 {
    own::run(|| {
        if ctx.arg::<u64>(0) == NET_RX_SOFTIRQ {
            path::on_net_rx_softirq();
        }
        Ok(None)
    });
    0
}
