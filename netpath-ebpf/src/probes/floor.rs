//! The floor: an empty program on a hook netpath uses. `netpath bench` attaches it beside the
//! real ones in the same run, so each program's cost is read against what the kernel charges
//! any program on that hook (dispatch, and bpf_stats' own clock reads).
use aya_ebpf::{macros::raw_tracepoint, programs::RawTracePointContext};

#[raw_tracepoint(tracepoint = "net_dev_queue")]
pub fn floor_net_dev_queue(_ctx: RawTracePointContext) -> i32 {
    0
}
