//! `sock:sk_data_ready`: the receiving socket is woken.
use aya_ebpf::{macros::raw_tracepoint, programs::RawTracePointContext};

use crate::path;

#[raw_tracepoint(tracepoint = "sk_data_ready")]
pub fn sk_data_ready(_ctx: RawTracePointContext) -> i32 {
    let _ = path::on_sock_ready();
    0
}
