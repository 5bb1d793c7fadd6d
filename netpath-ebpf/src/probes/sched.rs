//! `sched:*` raw tracepoints: the receiving thread made runnable and switched in (`sched.rs`).
use aya_ebpf::{macros::raw_tracepoint, programs::RawTracePointContext};

use crate::{own, sched};

/// TP_PROTO(struct task_struct *p)
#[raw_tracepoint(tracepoint = "sched_waking")]
pub fn sched_waking(ctx: RawTracePointContext) -> i32 {
    own::run(|| sched::on_waking(ctx.arg::<u64>(0)));
    0
}

/// TP_PROTO(bool preempt, struct task_struct *prev, struct task_struct *next, ...)
#[raw_tracepoint(tracepoint = "sched_switch")]
pub fn sched_switch(ctx: RawTracePointContext) -> i32 {
    own::run(|| sched::on_switch(ctx.arg::<u64>(2)));
    0
}
