//! A saved compare result (`compare --json`, `-o run.json`) read back: its records are the
//! types the run wrote (`DriverReport` and below), fields an older file lacks defaulting, so
//! a saved file and a live run are read, rendered and diffed by the same code.
use anyhow::{Context as _, Result};

use super::header::Header;
use super::{DriverReport, HopFigures};

/// What `diff` reads of a saved compare, or of one just measured: its header (None: a file written
/// before netpath's versioned output) and every driver's record. The answer (`summary`) is
/// `render::compare::CompareOutput`'s, which `render::saved` reads beside this.
#[derive(Debug, serde::Deserialize)]
// The records' `&'static str` names borrow from the file's text, kept for the process's life
// (`read_text_for`: one or two files read per process).
#[serde(bound(deserialize = "'de: 'static"))]
pub struct SavedRun {
    pub header: Option<Header>,
    /// The run's backend, where a driver's record does not name its own (older files).
    pub backend: Option<crate::probe::backend::Backend>,
    pub drivers: Vec<DriverReport>,
}

impl SavedRun {
    /// A saved compare JSON read for `netpath <cmd>`, which `verb`s it: every error one line
    /// naming the file and what to give instead.
    pub fn read_for(path: &std::path::Path, cmd: &str, verb: &str) -> Result<SavedRun> {
        let text = read_text_for(path, cmd, verb)?;
        serde_json::from_str(text)
            .context("not the JSON of `netpath compare --json`")
            .with_context(|| path.display().to_string())
    }
}

/// The text of a saved compare, checked to be one (`SavedRun::read_for`'s errors), kept for
/// the life of the process: the records read from it borrow their names from it.
pub fn read_text_for(path: &std::path::Path, cmd: &str, verb: &str) -> Result<&'static str> {
    let s = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let v: serde_json::Value = serde_json::from_str(&s).with_context(|| {
        format!(
            "{} is not JSON: save `netpath compare --json` output",
            path.display()
        )
    })?;
    if let Some(k) = v.pointer("/header/kind").and_then(|k| k.as_str())
        && k != "compare"
    {
        anyhow::bail!(
            "{} is the output of `netpath {k}`; `netpath {cmd}` {verb} `netpath compare --json`",
            path.display()
        );
    }
    Ok(Box::leak(s.into_boxed_str()))
}

/// Which per-packet figure of each hop a bar chart stacks.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Stat {
    Mean,
    P50,
    P99,
}

impl Stat {
    pub fn name(self) -> &'static str {
        match self {
            Stat::Mean => "mean",
            Stat::P50 => "p50",
            Stat::P99 => "p99",
        }
    }
}

impl HopFigures {
    /// Time this hop adds to one packet, netpath's own time taken out: the per-crossing
    /// figure times the crossings per packet (a bridge path crosses veth twice), less the
    /// own time per packet. For the mean this is the report's own per-packet figure; for the
    /// percentiles it is the per-crossing percentile scaled the same way (percentiles do not
    /// add, so the bar is a guide, the table the figure).
    pub fn per_packet(&self, stat: Stat) -> f64 {
        let raw = match stat {
            Stat::Mean => self.per_packet_us,
            Stat::P50 | Stat::P99 if self.mean_us <= 0.0 => return 0.0,
            Stat::P50 => self.p50_us * self.per_packet_us / self.mean_us,
            Stat::P99 => self.p99_us * self.per_packet_us / self.mean_us,
        };
        (raw - self.own_us).max(0.0)
    }
}

/// Hop names in the order they first appear (request path, then response), for one colour
/// per hop across every chart.
pub fn hop_order(drivers: &[DriverReport]) -> Vec<&'static str> {
    let mut out: Vec<&'static str> = Vec::new();
    for d in drivers {
        for h in &d.hops {
            if !out.contains(&h.at.hop) {
                out.push(h.at.hop);
            }
        }
    }
    out
}
