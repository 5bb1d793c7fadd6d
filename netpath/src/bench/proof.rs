//! The bench's "hops you can prove" section: do the hop tables, netpath's own time taken out,
//! add up to the untraced path, and do exactly known delays come back at their hop?
//!
//! One interleaved compare of the lab drivers (spin, split) gives, per driver, the untraced
//! RTT, the raw hop sum, netpath's own time in it and the compensated sum, and per driver its
//! difference to its reference (bridge − host, every other − bridge) compensated against
//! untraced. One `validate` run on bridge and overlay gives the injected delays recovered.
use anyhow::{Context as _, Result};
use serde::Serialize;

use crate::{
    driver::Driver,
    harness::RrLoad,
    measure::interleave::CompareOptions,
    probe::backend::Backend,
    record::{
        Quiet,
        own::{PairCheck, pair_checks},
    },
    validate::{At, ValidateOptions, ValidateOutput},
};

/// The drivers of the consistency run: every same-machine lab driver the goals name.
pub const DRIVERS: [Driver; 5] = [
    Driver::Host,
    Driver::Bridge,
    Driver::Overlay,
    Driver::Macvlan,
    Driver::PublishedNat,
];
/// Delays `validate` injects, µs.
pub const DELAYS: [f64; 6] = [0.0, 0.5, 1.0, 2.0, 5.0, 10.0];

/// One driver's hop sum against its untraced round trip.
#[derive(Clone, Debug, Serialize, schemars::JsonSchema)]
pub struct SumRow {
    pub driver: String,
    pub untraced_mean_us: f64,
    pub raw_sum_us: f64,
    pub own_us: f64,
    /// The round trip outside the hops (the client's syscall edges) and netpath's own time in
    /// it (`Consistency`); the compensated sum includes the difference.
    pub edges_us: Option<f64>,
    pub edges_own_us: Option<f64>,
    pub compensated_sum_us: f64,
    /// (compensated − untraced) / untraced, %.
    pub error_pct: f64,
    /// The same error in every round, median over the rounds (`Consistency`).
    pub error_rounds_median_pct: Option<f64>,
    /// The untraced RTT mean's own range over the rounds (max − min over median), %: how far
    /// the untraced figure the error is taken against moved between rounds of the same run.
    pub untraced_range_pct: f64,
    /// ns charged per program run.
    pub run_cost_ns: f64,
}

#[derive(Clone, Debug, Serialize, schemars::JsonSchema)]
pub struct Proof {
    pub rounds: usize,
    pub requests: u64,
    pub sums: Vec<SumRow>,
    pub pairs: Vec<PairCheck>,
    pub validate: ValidateOutput,
}

fn options(drivers: Vec<Driver>, rounds: usize, requests: u64) -> Result<CompareOptions> {
    let rr = RrLoad {
        requests,
        warmup: 500,
        ..RrLoad::default()
    };
    super::compare_options(drivers, rounds, rr)
}

/// Both runs, on the lab (their own tracer loads: the consistency run's compare loads one).
pub fn run(backend: Backend, rounds: usize, requests: u64) -> Result<Proof> {
    let opts = options(DRIVERS.to_vec(), rounds, requests)?;
    let reports =
        crate::measure::compare::run(backend, &opts, &mut Quiet).context("the consistency run")?;
    let sums = reports
        .iter()
        .filter_map(|r| {
            let c = r.consistency.as_ref()?;
            Some(SumRow {
                driver: r.driver.clone(),
                untraced_mean_us: c.untraced_mean_us,
                raw_sum_us: c.raw_sum_us,
                own_us: c.own_us,
                edges_us: c.edges_us,
                edges_own_us: c.edges_own_us,
                compensated_sum_us: c.compensated_sum_us,
                error_pct: c.error_mean_pct,
                error_rounds_median_pct: c.error_rounds_median_pct,
                untraced_range_pct: r.rr.as_ref().map_or(0.0, |rr| rr.mean_us.rel() * 100.0),
                run_cost_ns: c.run_cost_ns,
            })
        })
        .collect();
    let pairs = pair_checks(&reports);
    let v = ValidateOptions {
        drivers: vec![Driver::Bridge, Driver::Overlay],
        delays_us: DELAYS.to_vec(),
        at: At::Server,
        rules: None,
        compare: options(vec![Driver::Bridge, Driver::Overlay], rounds, requests / 2)?,
    };
    let mut tracer = crate::probe::tracer::Tracer::load(backend, &v.compare.tracer())?;
    let validate = crate::validate::run(&mut tracer, &v).context("the validate run")?;
    Ok(Proof {
        rounds,
        requests,
        sums,
        pairs,
        validate,
    })
}
