//! What the HTML and SVG renderers read of a compare result: deserialised from its JSON, so a
//! live run (serialised first) and a saved file (`netpath report run.json`) render the same.
//! Fields a file lacks (older outputs) default.
use std::collections::BTreeMap;

use anyhow::{Context as _, Result};
use serde::Deserialize;

use super::header::Header;

#[derive(Debug, Deserialize)]
pub struct CompareView {
    pub header: Option<Header>,
    /// The answer (`measure::answer::Summary`), read by the renderer that shows it (older
    /// files: none).
    #[serde(default)]
    pub summary: Option<serde_json::Value>,
    #[serde(default)]
    pub backend: String,
    pub drivers: Vec<DriverView>,
}

#[derive(Debug, Deserialize)]
pub struct DriverView {
    pub driver: String,
    #[serde(default)]
    pub backend: String,
    pub traced: Rtt,
    pub untraced: Option<Rtt>,
    pub probe_effect_mean_pct: Option<f64>,
    pub probe_effect_p50_pct: Option<f64>,
    #[serde(default)]
    pub probe_effect_below_noise: bool,
    #[serde(default)]
    pub hops: Vec<HopView>,
    #[serde(default)]
    pub lost: BTreeMap<String, u64>,
    #[serde(default)]
    pub passes: Vec<PassView>,
    pub rr: Option<RrView>,
    #[serde(default)]
    pub one_way: BTreeMap<String, Rtt>,
    /// Untraced request/response, one entry per round.
    #[serde(default)]
    pub rounds: Vec<Rtt>,
    /// Per round: the traced run in brief (older files: p50s only).
    #[serde(default)]
    pub round_detail: Vec<RoundView>,
    pub bulk: Option<BulkView>,
    #[serde(default)]
    pub rtt_cdf: Vec<[f64; 2]>,
    #[serde(default)]
    pub attributed_pct: f64,
    /// How the harness waited for data, the CPU placement asked and the one observed, and
    /// the machine's state, when the run says so (shown as the JSON has them).
    pub wait: Option<serde_json::Value>,
    /// The traffic's protocol (`tcp`, `udp`, `icmp`; older files: none).
    pub proto: Option<String>,
    pub cpus: Option<serde_json::Value>,
    pub placement: Option<serde_json::Value>,
    pub machine: Option<serde_json::Value>,
    /// Sampled journeys (the report draws one a driver).
    #[serde(default)]
    pub timelines: Vec<TimelineView>,
}

/// A sampled journey as saved (`record::Timeline`); fields a file lacks (older outputs) default.
#[derive(Debug, Deserialize)]
pub struct TimelineView {
    pub dir: String,
    #[serde(default)]
    pub tuple: String,
    pub translated: Option<String>,
    #[serde(default)]
    pub start_ns: u64,
    #[serde(default)]
    pub tid: u32,
    #[serde(default)]
    pub headers: super::Headers,
    #[serde(default)]
    pub total_us: f64,
    #[serde(default)]
    pub rx_passes: u16,
    #[serde(default)]
    pub softirq_runs: u16,
    pub points: Vec<TimelinePointView>,
}

#[derive(Debug, Deserialize)]
pub struct TimelinePointView {
    pub point: String,
    #[serde(default)]
    pub device: String,
    #[serde(default)]
    pub kind: String,
    #[serde(default)]
    pub netns: u32,
    #[serde(default)]
    pub hop: String,
    pub since_prev_us: f64,
    #[serde(default)]
    pub cpu: u16,
}

impl TimelineView {
    /// The journey as the live record has it, its names matched to netpath's own.
    pub fn timeline(&self) -> super::Timeline {
        use super::timeline::static_name;
        super::Timeline {
            dir: static_name(&self.dir),
            tuple: self.tuple.clone(),
            translated: self.translated.clone(),
            start_ns: self.start_ns,
            tid: self.tid,
            headers: self.headers.clone(),
            total_us: self.total_us,
            rx_passes: self.rx_passes,
            softirq_runs: self.softirq_runs,
            points: (self.points.iter())
                .map(|p| super::TimelineHop {
                    point: static_name(&p.point),
                    device: p.device.clone(),
                    kind: static_name(&p.kind),
                    netns: p.netns,
                    hop: static_name(&p.hop),
                    since_prev_us: p.since_prev_us,
                    cpu: p.cpu,
                })
                .collect(),
        }
    }
}

/// One round of a driver (`record::per_round::RoundRow`); fields a file lacks (older outputs) default.
#[derive(Debug, Deserialize)]
pub struct RoundView {
    pub untraced_p50_us: Option<f64>,
    pub traced_p50_us: f64,
    pub traced_p99_us: Option<f64>,
    #[serde(default)]
    pub mode_change: bool,
    #[serde(default)]
    pub one_way_p50_us: BTreeMap<String, f64>,
    #[serde(default)]
    pub hops: Vec<HopView>,
    #[serde(default)]
    pub passes: Vec<RoundPassesView>,
    pub bulk_gbit_per_s: Option<f64>,
}

#[derive(Debug, Deserialize)]
pub struct RoundPassesView {
    pub dir: String,
    pub rx_passes_per_packet: f64,
    pub softirqs_per_packet: f64,
}

#[derive(Debug, Deserialize)]
pub struct BulkView {
    pub streams: usize,
    pub gbit_per_s: SpreadView,
    #[serde(default)]
    pub per_round: Vec<StreamView>,
}

#[derive(Debug, Deserialize)]
pub struct StreamView {
    pub gbit_per_s: f64,
}

#[derive(Debug, Deserialize)]
pub struct Rtt {
    pub count: u64,
    pub p50_us: f64,
    pub p99_us: f64,
    pub mean_us: f64,
}

#[derive(Clone, Debug, Deserialize)]
pub struct HopView {
    pub hop: String,
    pub dir: String,
    pub crossings: u64,
    pub per_packet_us: f64,
    pub mean_us: f64,
    pub p50_us: f64,
    pub p99_us: f64,
    /// netpath's own time per packet (0 in a file written before it was measured).
    #[serde(default)]
    pub own_us: f64,
}

#[derive(Debug, Deserialize)]
pub struct PassView {
    pub dir: String,
    pub rx_passes: u32,
    pub softirq_runs: u32,
}

#[derive(Debug, Deserialize)]
pub struct RrView {
    pub rounds: usize,
    pub p50_us: SpreadView,
    pub p99_us: SpreadView,
}

#[derive(Debug, Deserialize)]
pub struct SpreadView {
    pub median: f64,
    pub min: f64,
    pub max: f64,
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

impl HopView {
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

impl CompareView {
    pub fn from_value(v: serde_json::Value) -> Result<CompareView> {
        serde_json::from_value(v).context("not the JSON of `netpath compare --json`")
    }

    pub fn from_file(path: &std::path::Path) -> Result<CompareView> {
        Self::read_for(path, "report", "renders")
    }

    /// A saved compare JSON read for `netpath <cmd>`, which `verb`s it: every error one line
    /// naming the file and what to give instead.
    pub fn read_for(path: &std::path::Path, cmd: &str, verb: &str) -> Result<CompareView> {
        let v = Self::read_value_for(path, cmd, verb)?;
        Self::from_value(v).with_context(|| path.display().to_string())
    }

    /// The JSON of a saved compare, checked to be one (`read_for`'s errors).
    pub fn read_value_for(
        path: &std::path::Path,
        cmd: &str,
        verb: &str,
    ) -> Result<serde_json::Value> {
        let s =
            std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
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
        Ok(v)
    }

    /// Hop names in the order they first appear (request path, then response), for one
    /// colour per hop across every chart.
    pub fn hop_order(&self) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        for d in &self.drivers {
            for h in &d.hops {
                if !out.contains(&h.hop) {
                    out.push(h.hop.clone());
                }
            }
        }
        out
    }
}
