//! The floor: an empty program on a hook netpath uses. `netpath bench` attaches it beside the
//! real ones in the same run, so each program's cost is read against what the kernel charges
//! any program on that hook (dispatch, and bpf_stats' own clock reads).
use aya_ebpf::{macros::raw_tracepoint, programs::RawTracePointContext};

#[raw_tracepoint(tracepoint = "net_dev_queue")]
pub fn floor_net_dev_queue(_ctx: RawTracePointContext) -> i32 {
    0
}

/// The scheduler's hooks fire in colder code than the network's: their own floors tell a
/// program's cost there from the hook's.
#[raw_tracepoint(tracepoint = "sched_waking")]
pub fn floor_sched_waking(_ctx: RawTracePointContext) -> i32 {
    0
}

#[raw_tracepoint(tracepoint = "sched_switch")]
pub fn floor_sched_switch(_ctx: RawTracePointContext) -> i32 {
    0
}
