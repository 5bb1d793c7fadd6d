//! The receiving thread's wakeup, opened up with the scheduler's tracepoints: socket woken →
//! thread made runnable (`sched_waking`, inside the socket's wakeup, on the waker's CPU) →
//! thread running (`sched_switch` onto it: after the CPU's idle task, an idle exit; else a
//! run-queue wait; on another CPU than the waker's or not) → data copied → receive returns.
//!
//! Both tracepoints fire for every thread on the machine: an untraced one costs a per-CPU
//! array lookup (waking: is a journey waking anything on this CPU?) or one kernel read and a
//! bitmap test (switch). Relays (docker-proxy's Go runtime wakes another thread through
//! epoll) keep their unsplit wakeup.
use aya_ebpf::helpers::bpf_get_smp_processor_id;
use netpath_common::{
    DevKey, Point, ROLE_RELAY,
    hop::{SCHED_CROSS, SCHED_IDLE},
};

use crate::{flights, kernel, maps::*, path, tids::traced};

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
pub fn on_waking(task: u64) -> Result<(), i64> {
    let w = WAKECPU.get_ptr_mut(0).ok_or(-1i64)?;
    let [skb, generation] = unsafe { *w };
    if skb == 0 {
        return Ok(());
    }
    let ts = match traced(kernel::task_pid(task)) {
        Some(ts) if ts.role != ROLE_RELAY => ts,
        _ => return Ok(()),
    };
    unsafe { (*w)[0] = 0 };
    let f = match flights::get(skb) {
        Some(f) if unsafe { (*f).first_ts } == generation => f,
        _ => return Ok(()),
    };
    let lp = unsafe { (*f).last_point };
    if lp != Point::SockReady as u16 && !path::receiving(lp) {
        return Ok(());
    }
    let cpu = unsafe { bpf_get_smp_processor_id() };
    path::advance(
        f,
        skb,
        Point::SchedWaking as u16,
        0,
        DevKey::default(),
        path::now(),
    );
    ts.wake_skb = skb;
    ts.wake_gen = generation;
    ts.wake_cpu = cpu;
    Ok(())
}

/// `sched:sched_switch(preempt, prev, next)`: `next` runs on this CPU.
#[inline(always)]
pub fn on_switch(prev: u64, next: u64) -> Result<(), i64> {
    let ts = match traced(kernel::task_pid(next)) {
        Some(ts) if ts.wake_skb != 0 => ts,
        _ => return Ok(()),
    };
    let skb = ts.wake_skb;
    ts.wake_skb = 0;
    let f = match flights::get(skb) {
        Some(f) if unsafe { (*f).first_ts } == ts.wake_gen => f,
        _ => return Ok(()),
    };
    if unsafe { (*f).last_point } != Point::SchedWaking as u16 {
        return Ok(());
    }
    let cpu = unsafe { bpf_get_smp_processor_id() };
    let mut kind = 0;
    if kernel::task_pid(prev) == 0 {
        kind |= SCHED_IDLE;
    }
    if cpu != ts.wake_cpu {
        kind |= SCHED_CROSS;
    }
    path::advance(
        f,
        skb,
        Point::SchedSwitch as u16,
        kind,
        DevKey::default(),
        path::now(),
    );
    Ok(())
}
