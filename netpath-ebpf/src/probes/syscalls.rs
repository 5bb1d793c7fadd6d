//! `syscalls:*` tracepoints of the traced threads: where a journey starts and ends.
//! The harness uses blocking sockets, so send is `sendto` and receive is `recvfrom`.
use aya_ebpf::{macros::tracepoint, programs::TracePointContext};

use crate::{journey, own};

/// Offset of `long ret` in `sys_exit_*` records (after the common header and `__syscall_nr`).
const RET_OFFSET: usize = 16;

#[tracepoint(category = "syscalls", name = "sys_enter_sendto")]
pub fn sys_enter_sendto(_ctx: TracePointContext) -> u32 {
    own::run(journey::on_send_enter);
    0
}

#[tracepoint(category = "syscalls", name = "sys_exit_sendto")]
pub fn sys_exit_sendto(_ctx: TracePointContext) -> u32 {
    own::run(journey::on_send_exit);
    0
}

#[tracepoint(category = "syscalls", name = "sys_exit_recvfrom")]
pub fn sys_exit_recvfrom(ctx: TracePointContext) -> u32 {
    own::run(|| {
        let ret = unsafe { ctx.read_at::<i64>(RET_OFFSET) }.unwrap_or(0);
        journey::on_recv_exit(ret, 0)
    });
    0
}

/// A relay that splices (docker-proxy) sends with splice(2): on kernels without
/// `tcp:tcp_sendmsg_locked` this is where its send starts. Only relay threads act on it.
#[tracepoint(category = "syscalls", name = "sys_enter_splice")]
pub fn sys_enter_splice(_ctx: TracePointContext) -> u32 {
    own::run(journey::on_relay_splice);
    0
}
