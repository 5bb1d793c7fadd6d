//! netpath's own time, so userspace can take it out of the hops. Every program counts one run
//! as it starts; along one journey in `own_every` (and in every send and receive of a traced
//! thread) a program that stamps a point also adds the time from its clock read to its end.
//! Two stamps of such a journey on one CPU then bracket netpath's time between them: the
//! measured tails plus the runs, which userspace charges the calibrated cost of one run (the
//! hook's dispatch and the work before a clock read). On another CPU only the later program's
//! own run is known (`OwnSnap::until`). The second clock read is what this costs, so it is
//! paid on a sample of journeys.
use aya_ebpf::helpers::{bpf_get_smp_processor_id, bpf_ktime_get_ns};
use netpath_common::{Flight, OwnSnap};

use crate::{config::conf, maps::OWN};

/// A point's time and netpath's own accounting on this CPU at that moment.
#[derive(Clone, Copy)]
pub struct Stamp {
    pub t: u64,
    pub own: OwnSnap,
}

/// What a program's handler returns: the clock from which its tail is netpath's own time to
/// measure, if it is (see `tail`).
pub type Done = Result<Option<u64>, i64>;

#[inline(always)]
pub fn now() -> u64 {
    unsafe { bpf_ktime_get_ns() }
}

#[inline(always)]
fn on() -> bool {
    conf!(own_every) != 0
}

/// Runs a program's handler after counting the run, and measures its tail when the handler
/// asks. Plain adds: the per-CPU value is shared only with programs nesting on this CPU, and a
/// lost run would move one hop's estimate by one run's cost, where an atomic add would cost
/// every run.
#[inline(always)]
pub fn run(handler: impl FnOnce() -> Done) {
    if !on() {
        let _ = handler();
        return;
    }
    let own = OWN.get_ptr_mut(0);
    if let Some(o) = own {
        unsafe { (*o).runs += 1 };
    }
    if let (Ok(Some(t)), Some(o)) = (handler(), own) {
        unsafe { (*o).ns += now().saturating_sub(t) };
    }
}

/// The tail to measure after a point of flight `f` stamped at `t`: only along the journeys
/// whose own time is measured.
#[inline(always)]
pub fn tail(f: &Flight, t: u64) -> Option<u64> {
    f.own().then_some(t)
}

/// The clock for a point, with netpath's own accounting on this CPU up to it.
#[inline(always)]
pub fn stamp() -> Stamp {
    let t = now();
    if !on() {
        return Stamp {
            t,
            own: OwnSnap::default(),
        };
    }
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

/// Whether journey number `n` (this CPU's count) has its own time measured.
#[inline(always)]
pub fn measured(n: u64) -> bool {
    let every = conf!(own_every);
    every != 0 && n.is_multiple_of(every as u64)
}
