//! What differed between the two sides' conditions, and each side's conditions in one line:
//! a difference found under different conditions (backend, kernel, wait mode, placement,
//! machine state) may be theirs, not the drivers' or the knob's.
use crate::record::DriverReport;
use crate::record::header::Header;
use crate::sys::machine::Placement;

/// One side of an A/B for its context: its label, the header of the run it came from (None:
/// an older file without one) and its driver's report.
pub struct Side<'a> {
    pub label: &'a str,
    pub header: Option<&'a Header>,
    pub driver: &'a DriverReport,
}

/// The CPU with the most points in one of a placement's maps ("cpu1"), or "unseen".
fn dominant(
    p: &Option<Placement>,
    map: fn(&Placement) -> &std::collections::BTreeMap<u16, u64>,
) -> String {
    (p.as_ref().map(map).into_iter().flatten())
        .max_by_key(|(_, n)| **n)
        .map_or_else(|| "unseen".into(), |(c, _)| format!("cpu{c}"))
}

fn placement(d: &DriverReport) -> String {
    format!(
        "client {}, server {}, NET_RX softirq {}",
        dominant(&d.placement, |p| &p.client),
        dominant(&d.placement, |p| &p.server),
        dominant(&d.placement, |p| &p.softirq)
    )
}

/// A side's conditions in one line: wait mode, placement asked and where most sampled points
/// ran, the machine during the run.
pub fn conditions(d: &DriverReport) -> String {
    format!(
        "wait {}, cpus {}; ran on {}; machine busy {:.0}%, steal {:.1}%, load {}",
        d.wait,
        d.cpus,
        placement(d),
        machine_num(d, |m| m.busy_pct).unwrap_or(0.0),
        machine_num(d, |m| m.steal_pct).unwrap_or(0.0),
        machine_str(d, |m| m.loadavg.clone())
    )
}

type Machine = crate::sys::machine::MachineState;

fn machine_num(d: &DriverReport, f: fn(&Machine) -> f64) -> Option<f64> {
    d.machine.as_ref().map(f)
}

fn machine_str(d: &DriverReport, f: fn(&Machine) -> String) -> String {
    d.machine.as_ref().map_or_else(|| "unknown".into(), f)
}

/// Busy share (percentage points), steal (points) and 1-minute load beyond which two runs'
/// machines are said to have differed: a loaded vCPU changes wakeups by tens of µs.
const BUSY_POINTS: f64 = 15.0;
const STEAL_POINTS: f64 = 5.0;
const LOAD_1MIN: f64 = 1.0;

fn machine_lines(a: &Side, b: &Side, out: &mut Vec<String>) {
    let (da, db) = (a.driver, b.driver);
    let load = |d: &DriverReport| {
        machine_str(d, |m| m.loadavg.clone())
            .split_whitespace()
            .next()
            .and_then(|x| x.parse::<f64>().ok())
    };
    let num = |k: fn(&Machine) -> f64| machine_num(da, k).zip(machine_num(db, k));
    let differs = num(|m| m.busy_pct).is_some_and(|(x, y)| (x - y).abs() > BUSY_POINTS)
        || num(|m| m.steal_pct).is_some_and(|(x, y)| (x - y).abs() > STEAL_POINTS)
        || load(da)
            .zip(load(db))
            .is_some_and(|(x, y)| (x - y).abs() > LOAD_1MIN);
    if differs {
        let f = |d: &DriverReport| {
            format!(
                "busy {:.0}%, steal {:.1}%, load {}",
                machine_num(d, |m| m.busy_pct).unwrap_or(0.0),
                machine_num(d, |m| m.steal_pct).unwrap_or(0.0),
                machine_str(d, |m| m.loadavg.clone())
            )
        };
        out.push(format!(
            "machine state differed: {} {}; {} {}",
            a.label,
            f(da),
            b.label,
            f(db)
        ));
    }
    let idle = |d: &DriverReport| {
        let k: [fn(&Machine) -> String; 4] = [
            |m| m.cpuidle_driver.clone(),
            |m| m.cpuidle_governor.clone(),
            |m| m.deepest_idle_state.clone(),
            |m| m.cmdline.join(" "),
        ];
        k.map(|k| machine_str(d, k)).join(", ")
    };
    if idle(da) != idle(db) {
        out.push(format!(
            "idle configuration differed (cpuidle driver, governor, deepest state, cmdline): {} [{}]; {} [{}]",
            a.label,
            idle(da),
            b.label,
            idle(db)
        ));
    }
}

/// What differed between the two sides' conditions, one line each: a difference found under
/// different conditions may be theirs, not the drivers' or the knob's.
pub fn context_warnings(a: &Side, b: &Side) -> Vec<String> {
    let mut out = Vec::new();
    let mut differ = |what: &str, x: String, y: String| {
        if x != y {
            out.push(format!("{} used {what} {x}, {} {y}", a.label, b.label));
        }
    };
    let backend = |d: &DriverReport| d.backend.to_string();
    differ("backend", backend(a.driver), backend(b.driver));
    let head = |s: &Side, f: fn(&Header) -> String| s.header.map(f).unwrap_or("unknown".into());
    differ(
        "kernel",
        head(a, |h| h.kernel.clone()),
        head(b, |h| h.kernel.clone()),
    );
    differ(
        "netpath",
        head(a, |h| h.netpath_version.clone()),
        head(b, |h| h.netpath_version.clone()),
    );
    differ(
        "wait mode",
        a.driver.wait.to_string(),
        b.driver.wait.to_string(),
    );
    differ(
        "--cpus",
        a.driver.cpus.to_string(),
        b.driver.cpus.to_string(),
    );
    let host = |s: &Side| head(s, |h| h.hostname.clone());
    if host(a) != host(b) {
        out.push(format!(
            "{} ran on host {}, {} on {}",
            a.label,
            host(a),
            b.label,
            host(b)
        ));
    }
    let (pa, pb) = (placement(a.driver), placement(b.driver));
    if pa != pb {
        out.push(format!(
            "placement differed (where most sampled points ran): {} {pa}; {} {pb}",
            a.label, b.label
        ));
    }
    machine_lines(a, b, &mut out);
    for s in [a, b] {
        let changed: Vec<String> = (s.driver.round_detail.iter().enumerate())
            .filter(|(_, r)| r.mode_change)
            .map(|(i, _)| (i + 1).to_string())
            .collect();
        if !changed.is_empty() {
            out.push(format!(
                "{}: round {} was a mode change of the machine (its wakeup moved by more than the data path)",
                s.label,
                changed.join(", ")
            ));
        }
    }
    out
}
