//! `netpath diff`: one driver against another, noise-aware. From two saved `compare --json`
//! files (two machines, two kernels: unpaired), two drivers of one file (one interleaved run:
//! paired), or measured live (`-d overlay --vs bridge`: a compare of the two, interleaved,
//! paired). The figures and context lines are `ab`'s, the arithmetic `delta`'s; this picks the
//! sides and names them.
use std::path::{Path, PathBuf};

use anyhow::{Result, bail};
use serde::Serialize;

use crate::harness::{Cpus, WaitMode};
use crate::measure::ab::{self, Deltas, Side};
use crate::measure::compare::CompareOptions;
use crate::probe::backend::Backend;
use crate::record::DriverReport;
use crate::record::header::Header;
use crate::record::saved::SavedRun;
use crate::sys::machine::{MachineState, Placement};

/// One side as the output names it.
#[derive(Clone, Debug, Serialize, schemars::JsonSchema)]
pub struct SideInfo {
    pub label: String,
    pub driver: String,
    /// The file it was read from (none: measured by this run).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub file: Option<String>,
    pub backend: String,
    pub kernel: Option<String>,
    /// Untraced rounds (traced ones when the run had no untraced runs).
    pub rounds: usize,
    /// Wait mode, placement asked and observed, machine state: what every figure depends on
    /// (one line, then each as the compare output has it).
    pub conditions: String,
    pub wait: WaitMode,
    pub cpus: Cpus,
    pub placement: Option<Placement>,
    pub machine: Option<MachineState>,
}

#[derive(Clone, Debug, Serialize, schemars::JsonSchema)]
pub struct DiffResult {
    pub a: SideInfo,
    pub b: SideInfo,
    #[serde(flatten)]
    pub deltas: Deltas,
    /// How the noise was taken, and figures whose noise is unknown.
    pub notes: Vec<String>,
    /// What differed between the two sides' conditions.
    pub warnings: Vec<String>,
}

struct Loaded {
    path: PathBuf,
    view: SavedRun,
}

impl Loaded {
    fn name(&self) -> String {
        self.path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| self.path.display().to_string())
    }

    fn names(&self) -> String {
        let v: Vec<&str> = self
            .view
            .drivers
            .iter()
            .map(|d| d.driver.as_str())
            .collect();
        v.join(", ")
    }

    fn find(&self, driver: &str, flag: &str) -> Result<&DriverReport> {
        match self.view.drivers.iter().find(|d| d.driver == driver) {
            Some(d) => Ok(d),
            None => bail!(
                "{} has no driver {driver} (it has {}): pick one of those with {flag}",
                self.path.display(),
                self.names()
            ),
        }
    }
}

/// Which driver of each file: `--driver X --vs Y`, `--driver X` in both, the one driver the
/// two share, or each file's only driver.
fn pick<'a>(
    a: &'a Loaded,
    b: &'a Loaded,
    driver: Option<&str>,
    vs: Option<&str>,
) -> Result<(&'a DriverReport, &'a DriverReport)> {
    match (driver, vs) {
        (Some(x), Some(y)) => Ok((a.find(x, "--driver")?, b.find(y, "--vs")?)),
        (Some(x), None) => Ok((a.find(x, "--driver")?, b.find(x, "--driver")?)),
        (None, Some(_)) => bail!("--vs names B's driver: give A's with --driver too"),
        (None, None) => {
            let common: Vec<&DriverReport> = a
                .view
                .drivers
                .iter()
                .filter(|d| b.view.drivers.iter().any(|e| e.driver == d.driver))
                .collect();
            match (common.as_slice(), &a.view.drivers[..], &b.view.drivers[..]) {
                ([d], _, _) => Ok((d, b.find(&d.driver, "--driver")?)),
                ([], [x], [y]) => Ok((x, y)),
                ([], _, _) => bail!(
                    "{} ({}) and {} ({}) have no driver in common: pick A's with --driver and B's with --vs",
                    a.path.display(),
                    a.names(),
                    b.path.display(),
                    b.names()
                ),
                (many, _, _) => {
                    let v: Vec<&str> = many.iter().map(|d| d.driver.as_str()).collect();
                    bail!(
                        "{} and {} share drivers {}: pick one with --driver",
                        a.path.display(),
                        b.path.display(),
                        v.join(", ")
                    )
                }
            }
        }
    }
}

fn info(label: &str, d: &DriverReport, run: &SavedRun, file: Option<&Loaded>) -> SideInfo {
    let header = run.header.as_ref();
    SideInfo {
        label: label.to_string(),
        driver: d.driver.clone(),
        file: file.map(|f| f.path.display().to_string()),
        backend: if d.backend.is_empty() {
            run.backend
                .map(|b| b.name().to_string())
                .unwrap_or_default()
        } else {
            d.backend.to_string()
        },
        kernel: header.map(|h| h.kernel.clone()),
        rounds: if d.rounds.is_empty() {
            d.round_detail.len().max(1)
        } else {
            d.rounds.len()
        },
        conditions: ab::conditions(d),
        wait: d.wait,
        cpus: d.cpus,
        placement: d.placement.clone(),
        machine: d.machine.clone(),
    }
}

/// The diff of two sides (`a` against `b`).
fn diff_sides(
    a: (SideInfo, &DriverReport),
    b: (SideInfo, &DriverReport),
    ha: Option<&crate::record::header::Header>,
    hb: Option<&crate::record::header::Header>,
    paired: bool,
) -> DiffResult {
    let figs = ab::figures(a.1, b.1, paired);
    let deltas = ab::deltas(&a.0.label, &b.0.label, &figs);
    let mut notes = Vec::new();
    if deltas.paired && a.0.rounds == b.0.rounds {
        notes.push(format!(
            "paired: {} interleaved rounds of one run; each delta is the median of the per-round deltas, its noise their range",
            a.0.rounds
        ));
    } else {
        notes.push(
            "unpaired (two runs): each delta is the difference of the medians, its noise the sum of the two sides' half-ranges over rounds".to_string(),
        );
    }
    for (s, per_round) in [(&a.0, figs.hops_per_round.0), (&b.0, figs.hops_per_round.1)] {
        if !per_round {
            notes.push(format!(
                "{}: no per-round hop tables (saved by an older netpath, or one round): its hop figures have one value, their noise is unknown",
                s.label
            ));
        }
    }
    let warnings = ab::context_warnings(
        &Side {
            label: &a.0.label,
            header: ha,
            driver: a.1,
        },
        &Side {
            label: &b.0.label,
            header: hb,
            driver: b.1,
        },
    );
    DiffResult {
        a: a.0,
        b: b.0,
        deltas,
        notes,
        warnings,
    }
}

/// `netpath diff A.json [B.json]`: needs no privilege.
pub fn from_files(files: &[PathBuf], driver: Option<&str>, vs: Option<&str>) -> Result<DiffResult> {
    let load = |p: &Path| -> Result<Loaded> {
        Ok(Loaded {
            path: p.to_path_buf(),
            view: SavedRun::read_for(p, "diff", "compares two drivers of")?,
        })
    };
    match files {
        [one] => {
            let f = load(one)?;
            let (Some(x), Some(y)) = (driver, vs) else {
                bail!(
                    "one file: say which two of its drivers to diff, --driver X --vs Y (it has {}), or give a second file",
                    f.names()
                );
            };
            let (da, db) = (f.find(x, "--driver")?, f.find(y, "--vs")?);
            let h = f.view.header.as_ref();
            Ok(diff_sides(
                (info(x, da, &f.view, Some(&f)), da),
                (info(y, db, &f.view, Some(&f)), db),
                h,
                h,
                true,
            ))
        }
        [a, b] => {
            let (fa, fb) = (load(a)?, load(b)?);
            let (da, db) = pick(&fa, &fb, driver, vs)?;
            let (mut na, mut nb) = (fa.name(), fb.name());
            if na == nb {
                (na, nb) = (a.display().to_string(), b.display().to_string());
            }
            let la = format!("{} ({na})", da.driver);
            let lb = format!("{} ({nb})", db.driver);
            Ok(diff_sides(
                (info(&la, da, &fa.view, Some(&fa)), da),
                (info(&lb, db, &fb.view, Some(&fb)), db),
                fa.view.header.as_ref(),
                fb.view.header.as_ref(),
                false,
            ))
        }
        _ => bail!(
            "diff takes two saved `compare --json` files (or one with --driver X --vs Y), or none with -d A --vs B to measure live; got {}",
            files.len()
        ),
    }
}

/// `netpath diff -d A --vs B`: both measured in one interleaved run (a compare of the two),
/// then diffed paired. `opts.drivers` is [A, B].
pub fn live(backend: Backend, opts: &CompareOptions) -> Result<DiffResult> {
    let drivers = crate::measure::compare::run(backend, opts, &mut crate::record::Quiet)?;
    let view = SavedRun {
        header: Some(Header::new("compare", Some(backend.name()))),
        backend: Some(backend),
        drivers,
    };
    let [da, db] = &view.drivers[..] else {
        bail!("diff needs both drivers measured, and only one was (see the line above)");
    };
    let h = view.header.as_ref();
    Ok(diff_sides(
        (info(&da.driver, da, &view, None), da),
        (info(&db.driver, db, &view, None), db),
        h,
        h,
        true,
    ))
}
