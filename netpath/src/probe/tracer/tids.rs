//! The traced-thread set, shared with the harness, and the bitmaps in front of it.
use std::sync::Mutex;

use anyhow::{Result, bail};
use aya::maps::{Array, HashMap, MapData};
use netpath_common::{
    ID_WORDS, ROLE_CLIENT, ROLE_RELAY, ROLE_SERVER, TID_SLOTS, TidSlot, TidState, run, tid_slots,
};

/// The traced-thread set, shared with the harness: it names its client and server threads once
/// warm-up is over, so only measured requests are traced.
pub struct TidControl(
    /// `TIDS`: the traced threads, two slots each (`netpath_common::tid_slots`).
    pub(super) Mutex<Array<MapData, TidSlot>>,
    pub(super) Mutex<Vec<u32>>,
    pub(super) Mutex<HashMap<MapData, u32, u32>>,
    /// `TID_BITS` and `RELAY_BITS`: the kernel's first filter, one bit per id.
    pub(super) Mutex<Bitmaps>,
    /// `RUN`: the run's settings the programs read (`netpath_common::run`).
    pub(super) Mutex<Array<MapData, u32>>,
);

pub(super) struct Bitmaps {
    pub tids: Array<MapData, u64>,
    pub relays: Array<MapData, u64>,
}

/// Sets or clears `id`'s bit (ids alias modulo the bitmap's size: a false positive only sends
/// that thread to the hash map, which says no).
fn set_bit(map: &mut Array<MapData, u64>, id: u32, on: bool) -> Result<()> {
    let w = (id >> 6) & (ID_WORDS - 1);
    let v = map.get(&w, 0)?;
    let bit = 1u64 << (id & 63);
    map.set(w, if on { v | bit } else { v & !bit }, 0)?;
    Ok(())
}

/// Puts thread `tid` with `role` in one of its two slots of `TIDS` (its own, or a free one).
fn insert(t: &mut Array<MapData, TidSlot>, tid: u32, role: u32) -> Result<()> {
    for s in tid_slots(tid) {
        let cur = t.get(&s, 0)?;
        if cur.tid == 0 || cur.tid == tid as u64 {
            let state = TidState {
                role,
                ..TidState::default()
            };
            t.set(
                s,
                TidSlot {
                    tid: tid as u64,
                    state,
                },
                0,
            )?;
            return Ok(());
        }
    }
    bail!(
        "thread {tid}: both of its slots in the traced-thread table hold other threads;          trace fewer threads at once"
    )
}

impl TidControl {
    /// Processes that relay journeys (docker-proxy): all their threads are traced as relays
    /// from the next measurement on.
    pub fn set_relays(&self, pids: Vec<u32>) {
        *self.1.lock().unwrap() = pids;
    }

    /// Tells the programs whether relays are followed (only then do they publish journeys
    /// that reach a socket for a splicing relay's next send).
    fn relays_on(&self, on: bool) -> Result<()> {
        self.4.lock().unwrap().set(run::RELAYS, on as u32, 0)?;
        Ok(())
    }

    /// Lets journeys of traffic netpath does not generate start and end (`run::ARMED`): on
    /// once every program is attached, off before any is detached.
    pub fn arm(&self, on: bool) -> Result<()> {
        self.4.lock().unwrap().set(run::ARMED, on as u32, 0)?;
        Ok(())
    }

    /// Trace the relays' threads now (passive tracing has no measurement to start them).
    pub fn start_relays(&self) -> Result<()> {
        self.relays_on(!self.1.lock().unwrap().is_empty())?;
        let relays = self.relay_tids();
        let mut t = self.0.lock().unwrap();
        let mut bits = self.3.lock().unwrap();
        for pid in self.1.lock().unwrap().iter() {
            self.2.lock().unwrap().insert(*pid, 1, 0)?;
            set_bit(&mut bits.relays, *pid, true)?;
        }
        for tid in relays {
            insert(&mut t, tid, ROLE_RELAY)?;
            set_bit(&mut bits.tids, tid, true)?;
        }
        Ok(())
    }

    fn relay_tids(&self) -> Vec<u32> {
        let mut out = Vec::new();
        for pid in self.1.lock().unwrap().iter() {
            if let Ok(dir) = std::fs::read_dir(format!("/proc/{pid}/task")) {
                out.extend(dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok()));
            }
        }
        out
    }
}

impl crate::harness::Phases for TidControl {
    fn measure_start(&self, client_tid: u32, server_tid: u32) -> Result<()> {
        self.relays_on(!self.1.lock().unwrap().is_empty())?;
        let mut t = self.0.lock().unwrap();
        // Relay threads are enumerated now, after warm-up; threads the Go runtime adds later
        // are adopted by the kernel side through RELAY_PIDS.
        let relays = self.relay_tids();
        let mut bits = self.3.lock().unwrap();
        {
            let mut pids = self.2.lock().unwrap();
            for pid in self.1.lock().unwrap().iter() {
                pids.insert(*pid, 1, 0)?;
                set_bit(&mut bits.relays, *pid, true)?;
            }
        }
        let roles = [(client_tid, ROLE_CLIENT), (server_tid, ROLE_SERVER)]
            .into_iter()
            .chain(relays.into_iter().map(|t| (t, ROLE_RELAY)));
        for (tid, role) in roles {
            insert(&mut t, tid, role)?;
            set_bit(&mut bits.tids, tid, true)?;
        }
        Ok(())
    }

    fn measure_end(&self, _client_tid: u32, _server_tid: u32) -> Result<()> {
        let mut t = self.0.lock().unwrap();
        // Bits first: a thread whose bit is clear is untraced, whatever its slot says. Every
        // traced thread has its slot (relay threads the kernel adopted too).
        let mut bits = self.3.lock().unwrap();
        let held: Vec<(u32, u64)> = (0..TID_SLOTS)
            .filter_map(|s| Some((s, t.get(&s, 0).ok()?.tid)))
            .filter(|(_, tid)| *tid != 0)
            .collect();
        for &(_, tid) in &held {
            set_bit(&mut bits.tids, tid as u32, false)?;
        }
        for (s, _) in held {
            t.set(s, TidSlot::default(), 0)?;
        }
        let mut pids = self.2.lock().unwrap();
        let keys: Vec<u32> = pids.keys().filter_map(|k| k.ok()).collect();
        for k in keys {
            set_bit(&mut bits.relays, k, false)?;
            let _ = pids.remove(&k);
        }
        self.relays_on(false)
    }
}
