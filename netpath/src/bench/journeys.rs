//! The journey-count run: one long traced request/response run, every loss counted on both
//! sides — what the kernel submitted to the sample ring against what userspace received, and
//! every counter of a journey the kernel could not finish.

use super::*;
use netpath_common::counter;

#[derive(Clone, Debug, Serialize, schemars::JsonSchema)]
pub struct JourneyRun {
    pub driver: Driver,
    /// Measured round trips asked for (each is two one-way journeys), warm-up excluded.
    pub requests: u64,
    /// One-way journeys the harness made while traced (requests and responses after warm-up).
    pub journeys_sent: u64,
    /// One-way journeys the kernel completed (send syscall entry to receive syscall exit).
    pub journeys_completed: u64,
    /// Packets tracked from a send.
    pub packets_started: u64,
    /// Timelines the kernel wrote to the sample ring (one in `sample_every` journeys).
    pub samples_submitted: u64,
    /// Timelines userspace received from the ring.
    pub samples_received: u64,
    /// Every loss counter, kernel side (ring full, map full, stale, …) and userspace side
    /// (`ringbuf_lost` includes the timelines memory did not keep).
    #[schemars(with = "crate::record::schema_parts::Lost")]
    pub losses: BTreeMap<&'static str, u64>,
    pub elapsed_s: f64,
}

impl JourneyRun {
    /// Samples submitted but neither received nor counted lost (should be 0).
    pub fn unaccounted(&self) -> i64 {
        self.samples_submitted as i64 - self.samples_received as i64
    }

    /// Sent journeys the kernel neither completed nor counted in a loss counter (should be ≤ 0).
    pub fn journeys_unaccounted(&self) -> i64 {
        let counted: u64 = self.losses.values().sum();
        self.journeys_sent as i64 - self.journeys_completed as i64 - counted as i64
    }
}

/// `journeys` one-way journeys (`journeys / 2` round trips), traced, on `lab`.
pub fn run(tracer: &mut Tracer, lab: &NetPath, journeys: u64) -> Result<JourneyRun> {
    let t0 = Instant::now();
    let rr = RrConfig {
        load: crate::harness::RrLoad {
            requests: (journeys / 2).max(1),
            timeout: Duration::from_secs(1800),
            ..crate::harness::RrLoad::default()
        },
        // Blocking, like the bench's other traced runs and sockperf's.
        wait: crate::harness::WaitMode::Block,
        ..RrConfig::default()
    };
    let (r, _) = rr_traced(tracer, lab, &rr, false)?;
    let snap = tracer.snapshot()?;
    let received = tracer.drain_samples().len() as u64;
    let c = |i: u32| snap.counters[i as usize];
    let losses = crate::record::losses(&snap.counters);
    Ok(JourneyRun {
        driver: lab.driver,
        requests: r.count,
        journeys_sent: 2 * r.count,
        journeys_completed: c(counter::COMPLETED),
        packets_started: c(counter::STARTED),
        samples_submitted: c(counter::SAMPLES),
        samples_received: received,
        losses,
        elapsed_s: t0.elapsed().as_secs_f64(),
    })
}
