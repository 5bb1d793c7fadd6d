//! The receiving thread's wakeup, opened up with the scheduler's tracepoints: socket woken →
//! thread made runnable (`sched_waking`, inside the socket's wakeup, on the waker's CPU) →
//! thread running (`sched_switch` onto it: after the CPU's idle task, an idle exit; else a
//! run-queue wait; on another CPU than the waker's or not) → data copied → receive returns.
//!
//! Both tracepoints fire for every thread on the machine. An untraced waking costs a per-CPU
//! array lookup (is a journey waking anything on this CPU?); a switch, a bitmap test on the
//! next task's pointer (`TASK_BITS`, set by the waking of a traced thread), so switching to
//! any other task reads nothing of it. (A global count of woken traced threads would do as
//! well, but its cache line would cross CPUs with every wakeup.) Relays (docker-proxy's Go runtime wakes another
//! thread through epoll) keep their unsplit wakeup.
use aya_ebpf::helpers::bpf_get_smp_processor_id;
use netpath_common::{
    DevKey, Point, ROLE_RELAY, TASK_WORDS,
    hop::{SCHED_CROSS, SCHED_IDLE},
};

use crate::{
    flights, kernel,
    maps::*,
    own::{Done, stamp, tail},
    state::{advance, current_tid, receiving},
    tids::{maybe_traced, state, traced},
};

/// A tracked journey woke socket `sk` on this CPU (`sk_data_ready`, or the last receive pass
/// where that tracepoint is missing): the next waking of a traced thread here is its reader.
#[inline(always)]
pub fn arm(skb: u64, generation: u64) {
    if let Some(w) = WAKECPU.get_ptr_mut(0) {
        unsafe { *w = [skb, generation] };
    }
}

/// `sched:sched_waking(p)`.
#[inline(always)]
pub fn on_waking(task: u64) -> Done {
    let w = WAKECPU.get_ptr_mut(0).ok_or(-1i64)?;
    let [skb, generation] = unsafe { *w };
    if skb == 0 {
        return Ok(None);
    }
    // A journey woke a socket on this CPU: the point's clock before the task's lookups.
    let st = stamp();
    let ts = match traced(kernel::task_pid(task)) {
        Some(ts) if ts.role != ROLE_RELAY => ts,
        _ => return Ok(None),
    };
    unsafe { (*w)[0] = 0 };
    // Before the task can run: its switch must find the bit.
    mark_woken(task);
    let f = match flights::get(skb) {
        Some(f) if unsafe { (*f).first_ts } == generation => f,
        _ => return Ok(None),
    };
    let lp = unsafe { (*f).last_point };
    if lp != Point::SockReady as u16 && !receiving(lp) {
        return Ok(None);
    }
    advance(f, skb, Point::SchedWaking as u16, 0, DevKey::default(), &st);
    ts.wake_skb = skb;
    ts.wake_gen = generation;
    ts.wake_cpu = unsafe { bpf_get_smp_processor_id() };
    Ok(tail(unsafe { &*f }, st.t))
}

/// `TASK_BITS` word and bit of a task pointer (pointers alias: a false positive only costs
/// the switch the pid read it would have made anyway).
#[inline(always)]
fn task_bit(task: u64) -> (u32, u64) {
    let i = netpath_common::ptr_slot(task, TASK_WORDS * 64 - 1);
    (i >> 6, 1u64 << (i & 63))
}

/// Lets `sched_switch` look at `task`. Bits stay set until the loader's reset: a traced
/// thread is woken again and again, so after its first wakeup this is a read.
#[inline(always)]
fn mark_woken(task: u64) {
    let (w, bit) = task_bit(task);
    if let Some(p) = TASK_BITS.get_ptr_mut(w)
        && unsafe { *p } & bit == 0
    {
        // Other CPUs set bits of the same word.
        crate::atomic::or(p, bit);
    }
}

#[inline(always)]
fn maybe_woken(task: u64) -> bool {
    let (w, bit) = task_bit(task);
    TASK_BITS.get(w).is_some_and(|v| *v & bit != 0)
}

/// `sched:sched_switch(preempt, prev, next)`: `next` runs on this CPU (`prev` is current).
#[inline(always)]
pub fn on_switch(next: u64) -> Done {
    if !maybe_woken(next) {
        return Ok(None);
    }
    let tid = kernel::task_pid(next);
    if !maybe_traced(tid) {
        return Ok(None);
    }
    // A traced thread runs: the point's clock before the hash lookup.
    let st = stamp();
    let ts = match state(tid) {
        Some(ts) if ts.wake_skb != 0 => ts,
        _ => return Ok(None),
    };
    let skb = ts.wake_skb;
    ts.wake_skb = 0;
    let f = match flights::get(skb) {
        Some(f) if unsafe { (*f).first_ts } == ts.wake_gen => f,
        _ => return Ok(None),
    };
    if unsafe { (*f).last_point } != Point::SchedWaking as u16 {
        return Ok(None);
    }
    let cpu = unsafe { bpf_get_smp_processor_id() };
    let mut kind = 0;
    // `prev` is still the current task here: its id comes from a helper, not a kernel read.
    if current_tid() == 0 {
        kind |= SCHED_IDLE;
    }
    if cpu != ts.wake_cpu {
        kind |= SCHED_CROSS;
    }
    advance(
        f,
        skb,
        Point::SchedSwitch as u16,
        kind,
        DevKey::default(),
        &st,
    );
    Ok(tail(unsafe { &*f }, st.t))
}
