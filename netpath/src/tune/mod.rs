//! `netpath tune -d DRIVER --knob NAME[=A,B]`: one driver measured with a knob at setting A
//! and at setting B, interleaved in one run, and per figure the difference with its noise.
//!
//! The driver's lab is built twice (two run ids), A applied to one and B to the other (lab
//! knobs: read back to prove they took effect), or the two sides given two harness settings
//! (nodelay, wait, cpus); both go to the rounds machinery as two sides, so round i of A and
//! round i of B are neighbours in time (A, B, then B, A, …; untraced and traced alternating
//! like `compare`'s). Afterwards lab knobs are restored and read back, and both labs torn
//! down (Ctrl-C's teardown removes the labs, and with them every setting: no knob touches
//! anything outside netpath's namespaces).
//!
//! `tune --apply CMD --revert CMD` (`change.rs`) measures one path, the lab's or between two
//! containers, with an outside change in place for side A and reverted for side B
//! (`outside.rs` runs the commands and guarantees the revert).

pub mod change;
mod conntrack;
pub mod devices;
mod ethtool;
pub mod knobs;
pub mod outside;
pub mod readback;

use anyhow::{Context as _, Result};
use serde::Serialize;

use crate::driver::Driver;
use crate::measure::ab::{self, Deltas};
use crate::measure::compare::CompareOptions;
use crate::path::NetPath;
use crate::probe::backend::Backend;
use crate::probe::tracer::Tracer;
use crate::record::DriverReport;
use devices::Applied;
use knobs::{KnobSpec, Value};
use readback::ReadBack;

/// One setting's side of a tune run.
#[derive(Clone, Debug, Serialize, schemars::JsonSchema)]
pub struct TuneSide {
    /// `gro=on`.
    pub label: String,
    pub driver: Driver,
    /// The knob's setting (None for an outside change).
    pub setting: Option<Value>,
    /// Lab knobs: each device's value before and after applying the setting.
    pub applied: Applied,
    /// Lab knobs: each device's value after restoring it.
    pub restored: Vec<ReadBack>,
    /// TCP segments per request/response the client's and the server's namespace sent
    /// (None with bulk on, whose segments would count too).
    pub segments_per_request: Option<(f64, f64)>,
    pub report: DriverReport,
}

/// `netpath tune`'s result: both sides and the differences.
#[derive(Clone, Debug, Serialize, schemars::JsonSchema)]
pub struct TuneResult {
    pub driver: Driver,
    /// The knob turned, or None when an outside change was (`change`).
    pub knob: Option<KnobSpec>,
    /// `--apply`/`--revert`: the commands, where they ran, how often, the path's names.
    pub change: Option<change::ChangeInfo>,
    pub a: TuneSide,
    pub b: TuneSide,
    /// A − B per figure, by `ab`'s groups (hops ranked by share of the difference).
    #[serde(flatten)]
    pub deltas: Deltas,
    /// The brief line (bulk and RTT p50), then one line per figure that is a result:
    /// "gro=on vs gro=off: bulk +1.2 Gbit/s (+18%), spread 0.2".
    pub verdicts: Vec<String>,
    /// What differed between the sides' conditions besides the knob's own setting (a wait or
    /// cpus knob's sides differ in it by design).
    pub warnings: Vec<String>,
}

/// A lab built for one side, with its knob applied.
struct Built {
    path: NetPath,
    applied: Applied,
}

fn build_side(spec: &KnobSpec, driver: Driver, v: &Value) -> Result<Built> {
    let mut path = crate::lab::build(knobs::side_driver(spec, driver, v))?;
    let applied = if spec.knob.on_lab() {
        match devices::apply(&mut path, spec, v) {
            Ok(a) => a,
            Err(e) => {
                let _ = path.teardown();
                return Err(e);
            }
        }
    } else {
        Applied::default()
    };
    Ok(Built { path, applied })
}

/// Restores the knob on one side's lab and tears it down.
/// Both sides' labs, built and set; A is finished again when B cannot be built.
fn build_both(spec: &KnobSpec, driver: Driver) -> Result<(Built, Built)> {
    let a = build_side(spec, driver, &spec.a)?;
    match build_side(spec, driver, &spec.b) {
        Ok(b) => Ok((a, b)),
        Err(e) => {
            let _ = finish_side(spec, a);
            Err(e)
        }
    }
}

impl TuneSide {
    fn new(
        label: &str,
        driver: Driver,
        setting: &Value,
        (applied, restored): (Applied, Vec<ReadBack>),
        report: DriverReport,
        opts: &CompareOptions,
    ) -> Self {
        TuneSide {
            label: label.to_string(),
            driver,
            setting: Some(setting.clone()),
            applied,
            restored,
            segments_per_request: segments(&report, opts),
            report,
        }
    }
}

fn finish_side(spec: &KnobSpec, mut b: Built) -> Result<(Applied, Vec<ReadBack>)> {
    let restored = if spec.knob.on_lab() {
        devices::restore(&mut b.path, spec.knob, &mut b.applied)
    } else {
        Ok(Vec::new())
    };
    let torn = b.path.teardown();
    let restored = restored?;
    torn?;
    Ok((b.applied, restored))
}

/// Measures `driver` with `spec`'s two settings, interleaved; `base` gives rounds, requests,
/// bulk and the run mode that the knob does not set. `on_applied` is handed what each side's
/// lab knob read back once it is applied, before the rounds.
pub fn run(
    backend: Backend,
    driver: Driver,
    spec: &KnobSpec,
    base: &CompareOptions,
    on_applied: &mut dyn FnMut(&str, &Applied),
) -> Result<TuneResult> {
    knobs::check_driver(spec, driver)?;
    let opts_a = knobs::side_options(spec, base, &spec.a)?;
    let opts_b = knobs::side_options(spec, base, &spec.b)?;
    let mut tracer = Tracer::load(backend, &base.tracer())?;
    let (a, b) = build_both(spec, driver)?;
    on_applied(&spec.a_label, &a.applied);
    on_applied(&spec.b_label, &b.applied);
    let sides = [
        crate::measure::interleave::Side {
            path: &a.path,
            label: spec.a_label.clone(),
            proto: opts_a.proto(),
            opts: &opts_a,
            enter: None,
        },
        crate::measure::interleave::Side {
            path: &b.path,
            label: spec.b_label.clone(),
            proto: opts_b.proto(),
            opts: &opts_b,
            enter: None,
        },
    ];
    let measured = crate::measure::interleave::run_sides(&mut tracer, &sides);
    drop(sides);
    let (da, db) = (a.path.driver, b.path.driver);
    let fa = finish_side(spec, a);
    let fb = finish_side(spec, b);
    let mut reports = measured.context("measuring both settings")?;
    let (applied_a, restored_a) = fa?;
    let (applied_b, restored_b) = fb?;
    let rb = reports.pop().context("no report for B")?;
    let ra = reports.pop().context("no report for A")?;
    let a = TuneSide::new(
        &spec.a_label,
        da,
        &spec.a,
        (applied_a, restored_a),
        ra,
        &opts_a,
    );
    let b = TuneSide::new(
        &spec.b_label,
        db,
        &spec.b,
        (applied_b, restored_b),
        rb,
        &opts_b,
    );
    let (deltas, verdicts, warnings) = judge((&spec.a_label, &spec.b_label), &a.report, &b.report);
    Ok(TuneResult {
        driver,
        knob: Some(spec.clone()),
        change: None,
        a,
        b,
        deltas,
        verdicts,
        warnings,
    })
}

/// TCP segments the client's and the server's namespace sent per request/response (none
/// when bulk ran too: its segments would be counted with them; none for udp and icmp).
pub(crate) fn segments(r: &DriverReport, o: &CompareOptions) -> Option<(f64, f64)> {
    if o.bulk.is_some() || o.proto() != crate::harness::Proto::Tcp {
        return None;
    }
    let c = r.context.as_ref()?;
    let runs = (r.round_detail.len() * (1 + usize::from(o.untraced))) as f64;
    let requests = runs * (o.rr.requests + o.rr.warmup) as f64;
    (requests > 0.0).then(|| {
        (
            c.client_counters.out_segs as f64 / requests,
            c.server_counters.out_segs as f64 / requests,
        )
    })
}

/// The figures of both sides (`ab`'s, paired: one interleaved run), their deltas, and one
/// line per figure that is a result plus the brief one naming the headline figures.
pub(crate) fn judge(
    (a_label, b_label): (&str, &str),
    a: &DriverReport,
    b: &DriverReport,
) -> (Deltas, Vec<String>, Vec<String>) {
    let figs = ab::figures(a, b, true);
    let d = ab::deltas(a_label, b_label, &figs);
    let mut lines = vec![brief((a_label, b_label), &d)];
    // The brief line has bulk and the untraced RTT p50 already.
    let results = d
        .rtt
        .iter()
        .filter(|x| x.name != "RTT p50")
        .chain(&d.hops_p50)
        .chain(&d.one_way)
        .chain(&d.passes)
        .filter(|x| !x.within_noise && x.delta != 0.0);
    lines.extend(results.map(|x| format!("{a_label} vs {b_label}: {} {}", x.name, x.summary())));
    let warnings = ab::context_warnings(
        &ab::Side {
            label: a_label,
            header: None,
            driver: a,
        },
        &ab::Side {
            label: b_label,
            header: None,
            driver: b,
        },
    );
    (d, lines, warnings)
}

/// "gro=on vs gro=off: bulk +1.2 Gbit/s (+18%), spread 0.2; RTT p50 +0.4 µs (+2%), spread
/// 0.9: within noise" — bulk (when it ran) and the untraced RTT p50.
fn brief((a_label, b_label): (&str, &str), d: &Deltas) -> String {
    let parts: Vec<String> = d
        .bulk
        .iter()
        .chain(d.rtt.iter().filter(|x| x.name == "RTT p50").take(1))
        .map(|x| format!("{} {}", x.name, x.summary()))
        .collect();
    format!("{a_label} vs {b_label}: {}", parts.join("; "))
}
