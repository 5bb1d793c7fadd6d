//! netpath's own time, so userspace can take it out of the hops. Every program counts one run
//! as it starts (`enter`); a program that stamps a point (`stamp`) also adds the time from its
//! clock read to its end (`leave`). Two stamps of a packet on one CPU then bracket netpath's
//! time between them: the measured tails plus the runs, which userspace charges the calibrated
//! cost of one run (the hook's dispatch and the work before a clock read). On another CPU only
//! the later program's own run is known (`OwnSnap::until`).
use aya_ebpf::helpers::{bpf_get_smp_processor_id, bpf_ktime_get_ns};
use netpath_common::OwnSnap;

use crate::maps::OWN;

/// A point's time and netpath's own accounting on this CPU at that moment.
#[derive(Clone, Copy)]
pub struct Stamp {
    pub t: u64,
    pub own: OwnSnap,
}

/// What a program's handler returns: the clock it stamped a point with, if it did (its tail
/// from there is netpath's own time).
pub type Done = Result<Option<u64>, i64>;

#[inline(always)]
pub fn now() -> u64 {
    unsafe { bpf_ktime_get_ns() }
}

/// Runs a program's handler between the run count and the tail measurement. Plain adds: the
/// per-CPU value is shared only with programs nesting on this CPU, and a lost run would move
/// one hop's estimate by one run's cost, where an atomic add would cost every run.
#[inline(always)]
pub fn run(handler: impl FnOnce() -> Done) {
    let own = OWN.get_ptr_mut(0);
    if let Some(o) = own {
        unsafe { (*o).runs += 1 };
    }
    if let (Ok(Some(t)), Some(o)) = (handler(), own) {
        unsafe { (*o).ns += now().saturating_sub(t) };
    }
}

/// The clock for a point, with netpath's own accounting on this CPU up to it.
#[inline(always)]
pub fn stamp() -> Stamp {
    let t = now();
    let own = match OWN.get_ptr_mut(0) {
        Some(o) => unsafe {
            OwnSnap {
                ns: (*o).ns as u32,
                runs: (*o).runs as u16,
                cpu: bpf_get_smp_processor_id() as u16,
            }
        },
        None => OwnSnap::default(),
    };
    Stamp { t, own }
}
