//! Atomic operations on map values. Programs that share a value run concurrently on other CPUs
//! and nest on the same CPU (a softirq program interrupting a process-context one), so a plain
//! read-modify-write can lose an update. The BPF target has no `core::sync::atomic` read-modify-
//! write API (`atomic-cas: false` in its target spec), but LLVM lowers these intrinsics to the
//! BPF atomic instructions (`lock +=`, `xchg_64`, `cmpxchg_64`; kernel 5.12+ for the last two).
use core::intrinsics::{self, AtomicOrdering::SeqCst};

/// `*p += v`, atomically (BPF_ATOMIC | BPF_ADD: one instruction, no fetch).
#[inline(always)]
pub fn add(p: *mut u64, v: u64) {
    unsafe { intrinsics::atomic_xadd::<u64, u64, { SeqCst }>(p, v) };
}

/// Stores `v` in `*p` and returns what was there.
#[inline(always)]
pub fn xchg(p: *mut u64, v: u64) -> u64 {
    unsafe { intrinsics::atomic_xchg::<u64, { SeqCst }>(p, v) }
}

/// Stores `new` in `*p` if it holds `old`; true when it did.
#[inline(always)]
pub fn cas(p: *mut u64, old: u64, new: u64) -> bool {
    unsafe { intrinsics::atomic_cxchg::<u64, { SeqCst }, { SeqCst }>(p, old, new) }.1
}

/// `*p |= v`, atomically.
#[inline(always)]
pub fn or(p: *mut u64, v: u64) {
    unsafe { intrinsics::atomic_or::<u64, u64, { SeqCst }>(p, v) };
}
