//! Minimal programs `netpath doctor` loads and attaches to learn what this kernel allows.
use aya_ebpf::{
    macros::{fentry, kprobe},
    programs::{FEntryContext, ProbeContext},
};

#[kprobe]
pub fn doctor_kprobe(_ctx: ProbeContext) -> u32 {
    0
}

#[fentry(function = "ip_rcv")]
pub fn doctor_fentry(_ctx: FEntryContext) -> u32 {
    0
}
