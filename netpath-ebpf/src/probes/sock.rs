//! Socket-level raw tracepoints: where a journey starts (`tcp:tcp_sendmsg_locked`), where the
//! receiving socket is woken (`sock:sk_data_ready`) and where the receive returns
//! (`sock:sock_recv_length`). Raw tracepoints here cost far less than syscall tracepoints,
//! which push every syscall on the machine onto the slow path.
use aya_ebpf::{macros::raw_tracepoint, programs::RawTracePointContext};

use crate::{journey, own, path, sockq};

const MSG_PEEK: u64 = 2;

/// TP_PROTO(const struct sock *sk)
#[raw_tracepoint(tracepoint = "sk_data_ready")]
pub fn sk_data_ready(ctx: RawTracePointContext) -> i32 {
    own::run(|| path::on_sock_ready(ctx.arg::<u64>(0)));
    0
}

/// TP_PROTO(const struct sock *sk, const struct msghdr *msg, const struct sk_buff *skb, int size_goal)
#[raw_tracepoint(tracepoint = "tcp_sendmsg_locked")]
pub fn tcp_sendmsg_locked(ctx: RawTracePointContext) -> i32 {
    own::run(|| journey::on_send_enter_sk(ctx.arg::<u64>(0)));
    0
}

/// TP_PROTO(struct sock *sk, int ret, int flags)
#[raw_tracepoint(tracepoint = "sock_send_length")]
pub fn sock_send_length(_ctx: RawTracePointContext) -> i32 {
    own::run(journey::on_send_exit);
    0
}

/// TP_PROTO(struct sock *sk, int ret, int flags)
#[raw_tracepoint(tracepoint = "sock_recv_length")]
pub fn sock_recv_length(ctx: RawTracePointContext) -> i32 {
    own::run(|| {
        if ctx.arg::<u64>(2) & MSG_PEEK != 0 {
            return Ok(None);
        }
        let ret = ctx.arg::<u64>(1) as i32 as i64;
        journey::on_recv_exit(ret, ctx.arg::<u64>(0))
    });
    0
}

/// TP_PROTO(struct sock *sk): every TCP read path calls it once the reader consumed data
/// (`copied_seq` moved). Attached only for traffic netpath does not generate, whose journeys
/// wait at their socket for the application's read (`sockq.rs`).
#[raw_tracepoint(tracepoint = "tcp_rcv_space_adjust")]
pub fn tcp_rcv_space_adjust(ctx: RawTracePointContext) -> i32 {
    own::run(|| sockq::on_read(ctx.arg::<u64>(0)));
    0
}
