//! Sampled timelines, drained from the kernel's ring buffer while the run goes: the ring holds
//! about 1,200 timelines, so a run longer than that would otherwise lose all later ones. A
//! thread sleeps in poll(2) on the ring, woken once a quarter of it is used (the kernel wakes
//! no reader for each record: `samples_flags` in netpath-ebpf) or after 100 ms, and moves every
//! record it gets into memory; what the ring still cannot take is counted by the kernel
//! (`ringbuf_lost`), what memory will not keep (beyond [`MAX_KEPT`]) is counted here and added
//! to it.
use std::os::fd::{AsFd as _, AsRawFd as _};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use aya::maps::{MapData, RingBuf};
use netpath_common::SkbState;

/// Timelines kept in memory between two reads (about 860 MB at most; a run at the default
/// sampling of one in 64 keeps ~16,000 per million journeys).
pub const MAX_KEPT: usize = 1 << 20;

struct Shared {
    ring: Mutex<RingBuf<MapData>>,
    kept: Mutex<Vec<SkbState>>,
    discarded: AtomicU64,
    stop: AtomicBool,
}

/// The drain thread and what it collected.
pub struct SampleDrain {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

impl SampleDrain {
    pub fn start(ring: RingBuf<MapData>) -> SampleDrain {
        let shared = Arc::new(Shared {
            ring: Mutex::new(ring),
            kept: Mutex::new(Vec::new()),
            discarded: AtomicU64::new(0),
            stop: AtomicBool::new(false),
        });
        let s = shared.clone();
        let thread = std::thread::Builder::new()
            .name("np-samples".into())
            .spawn(move || {
                while !s.stop.load(Ordering::Relaxed) {
                    wait_readable(&s.ring, 100);
                    s.drain_ring();
                }
            })
            .ok();
        SampleDrain { shared, thread }
    }

    /// Every timeline delivered since the last call.
    pub fn take(&self) -> Vec<SkbState> {
        self.shared.drain_ring();
        std::mem::take(&mut *self.shared.kept.lock().unwrap())
    }

    /// Timelines the kernel delivered but memory did not keep, since the last reset.
    pub fn discarded(&self) -> u64 {
        self.shared.discarded.load(Ordering::Relaxed)
    }

    /// Forgets everything delivered so far (a new run starts).
    pub fn reset(&self) {
        self.shared.drain_ring();
        self.shared.kept.lock().unwrap().clear();
        self.shared.discarded.store(0, Ordering::Relaxed);
    }
}

impl Shared {
    fn drain_ring(&self) {
        let mut ring = self.ring.lock().unwrap();
        let mut kept = self.kept.lock().unwrap();
        while let Some(item) = ring.next() {
            if item.len() < std::mem::size_of::<SkbState>() {
                continue;
            }
            if kept.len() >= MAX_KEPT {
                self.discarded.fetch_add(1, Ordering::Relaxed);
                continue;
            }
            // SAFETY: the kernel writes a whole SkbState; read_unaligned copes with alignment.
            kept.push(unsafe { std::ptr::read_unaligned(item.as_ptr() as *const SkbState) });
        }
    }
}

/// Sleeps until the ring has data or `ms` pass (without holding the ring's lock).
fn wait_readable(ring: &Mutex<RingBuf<MapData>>, ms: i32) {
    let fd = ring.lock().unwrap().as_fd().as_raw_fd();
    let mut p = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd; the map (and its fd) lives as long as `Shared`.
    unsafe { libc::poll(&mut p, 1, ms) };
}

impl Drop for SampleDrain {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
