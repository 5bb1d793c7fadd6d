//! The run record: per driver, the RTT, per-hop table, attribution check, lost events, receive
//! passes and softirqs, drops, context and machine state, the ratios between drivers. Built in
//! `build` (one traced run) and `DriverReport::set_rounds` (the rounds around it); shown by
//! `render` (text: `render::compare` and `render::block`, or JSON).
use std::collections::BTreeMap;

use netpath_common::counter;
use serde::Serialize;

use crate::{harness::RrResult, probe::tracer::Snapshot};

/// Where a run hands its records as they are made: runs are long, so the text renderer shows
/// each driver's block at once (`render::compare::TextSink`); JSON and the runs whose records
/// only feed a further computation show nothing until the end (`Quiet`).
pub trait Sink {
    /// One driver's record, as soon as it is measured.
    fn driver(&mut self, _r: &DriverReport) {}
    /// Every record of a run of several drivers, at its end.
    fn summary(&mut self, _all: &[DriverReport]) {}
}

/// The sink that shows nothing.
pub struct Quiet;

impl Sink for Quiet {}

#[derive(Clone, Debug, Serialize, serde::Deserialize, schemars::JsonSchema)]
pub struct RttSummary {
    pub count: u64,
    pub mean_us: f64,
    pub p50_us: f64,
    #[serde(default)]
    pub p95_us: f64,
    pub p99_us: f64,
    #[serde(default)]
    pub max_us: f64,
    #[serde(default)]
    pub req_per_s: f64,
}

/// Points of an RTT distribution's CDF: every percent, then the tail in finer steps.
pub fn rtt_cdf(r: &RrResult) -> Vec<[f64; 2]> {
    if r.hist.is_empty() {
        return Vec::new();
    }
    let tail = [0.995, 0.999, 0.9995, 0.9999, 1.0];
    (0..100)
        .map(|p| p as f64 / 100.0)
        .chain(tail)
        .map(|q| [r.hist.value_at_quantile(q) as f64 / 1000.0, q])
        .collect()
}

impl RttSummary {
    pub fn from_rr(r: &RrResult) -> RttSummary {
        let us = |ns: u64| ns as f64 / 1000.0;
        RttSummary {
            count: r.count,
            mean_us: r.mean_ns / 1000.0,
            p50_us: us(r.percentile_ns(50.0)),
            p95_us: us(r.percentile_ns(95.0)),
            p99_us: us(r.percentile_ns(99.0)),
            max_us: us(r.hist.max()),
            req_per_s: r.rps,
        }
    }
}

/// One hop of one direction in a traced run: what it adds to a packet, its distribution per
/// crossing, and netpath's own time in it. A round's hop (`RoundRow::hops`) is this alone.
#[derive(Clone, Debug, Serialize, serde::Deserialize, schemars::JsonSchema)]
pub struct HopFigures {
    pub hop: &'static str,
    #[schemars(schema_with = "schema_parts::dir")]
    pub dir: &'static str,
    /// Times a packet crossed this hop (a bridge path crosses veth twice per packet).
    pub crossings: u64,
    /// Sum over crossings divided by completed packets: what this hop adds to one packet.
    pub per_packet_us: f64,
    pub mean_us: f64,
    pub p50_us: f64,
    pub p99_us: f64,
    /// netpath's own time in this hop, per packet (`report::own`).
    #[serde(default)]
    pub own_us: f64,
    /// What the round's stalls added to this hop per packet (`stalls`): the hop as the
    /// check and the answer read it is `per_packet_us` less `own_us` less this.
    #[serde(default)]
    pub stall_us: f64,
}

impl HopFigures {
    /// Per packet, netpath's own time and the round's stalls taken out.
    pub fn typical_us(&self) -> f64 {
        self.per_packet_us - self.own_us - self.stall_us
    }

    /// Takes `s`'s stall of this hop out (0 where it had none).
    pub fn set_stall(&mut self, s: &stalls::Stalls) {
        self.stall_us = (s.hops.iter())
            .find(|x| x.hop == self.hop && x.dir == self.dir)
            .map_or(0.0, |x| x.mean_added_us);
    }
}

/// A hop of the run's table: its figures, its share and the figures compensated.
#[derive(Clone, Debug, Serialize, serde::Deserialize, schemars::JsonSchema)]
// Its `&'static str` names borrow from the JSON read (`render::saved::Saved`).
#[serde(bound(deserialize = "'de: 'static"))]
pub struct HopRow {
    #[serde(flatten)]
    pub at: HopFigures,
    /// Share of the direction's mean one-way time.
    #[serde(default)]
    pub share_pct: f64,
    /// `per_packet_us` less `own_us`: the hop as it would be untraced.
    #[serde(default)]
    pub compensated_us: f64,
    /// `p50_us` less netpath's own time per crossing (a crossing's own time is close to
    /// constant, so the distribution shifts by it).
    #[serde(default)]
    pub compensated_p50_us: f64,
}

#[derive(Clone, Debug, Serialize, serde::Deserialize, schemars::JsonSchema)]
pub struct Distribution {
    pub count: u64,
    pub mean_us: f64,
    pub p50_us: f64,
    pub p99_us: f64,
    /// netpath's own time per journey (the sum of its hops').
    #[serde(default)]
    pub own_us: f64,
    /// `mean_us` and `p50_us` less `own_us`.
    #[serde(default)]
    pub compensated_mean_us: f64,
    #[serde(default)]
    pub compensated_p50_us: f64,
}

#[derive(Clone, Debug, Serialize, serde::Deserialize, schemars::JsonSchema)]
pub struct PassRow {
    #[schemars(schema_with = "schema_parts::dir")]
    pub dir: &'static str,
    pub rx_passes: u32,
    pub softirq_runs: u32,
    #[serde(default)]
    pub packets: u64,
}

#[derive(Clone, Debug, Serialize, serde::Deserialize, schemars::JsonSchema)]
pub struct DropRow {
    pub reason: u32,
    pub reason_name: String,
    pub hop: &'static str,
    pub dir: &'static str,
    pub last_point: &'static str,
    pub device: String,
    pub count: u64,
}

#[derive(Clone, Debug, Serialize, serde::Deserialize, schemars::JsonSchema)]
pub struct DeviceRow {
    pub name: String,
    pub netns: String,
    pub kind: &'static str,
    pub ifindex: u32,
    pub mtu: u32,
    pub tc_ingress_pkts: u64,
    pub tc_egress_pkts: u64,
}

#[derive(Clone, Debug, Serialize, serde::Deserialize, schemars::JsonSchema)]
pub struct DriverReport {
    pub driver: String,
    #[serde(default)]
    pub backend: &'static str,
    #[serde(default)]
    pub hops_visible: Vec<&'static str>,
    #[serde(default)]
    pub missing_tracepoints: Vec<String>,
    /// Function probes (kprobe/fentry backends) and how each is attached.
    #[serde(default)]
    pub function_probes: Vec<crate::probe::tracer::FnProbe>,
    /// Losses this kernel does not count (see `Tracer::uncounted`).
    #[serde(default)]
    pub uncounted: Vec<&'static str>,
    pub traced: RttSummary,
    pub untraced: Option<RttSummary>,
    /// Traced vs untraced, percent: positive means tracing made it slower.
    pub probe_effect_mean_pct: Option<f64>,
    pub probe_effect_p50_pct: Option<f64>,
    /// The traced p50 beat every untraced round: probes only add work, so the machine's noise
    /// (or a change of its state between the runs) outweighs the effect here.
    #[serde(default)]
    pub probe_effect_below_noise: bool,
    #[serde(default)]
    pub hops: Vec<HopRow>,
    #[schemars(schema_with = "schema_parts::by_dir::<Distribution>")]
    #[serde(default)]
    pub one_way: BTreeMap<&'static str, Distribution>,
    pub turnaround: Option<Distribution>,
    /// Mean request one-way + mean response one-way + mean server turnaround.
    #[serde(default)]
    pub attributed_us: f64,
    #[serde(default)]
    pub rtt_mean_us: f64,
    #[serde(default)]
    pub unattributed_us: f64,
    /// netpath's own time in the client's gap (`netpath_common::CLIENT_GAP`), µs per round
    /// trip: the part of `unattributed_us` that is netpath's (the client's syscall edges lie
    /// outside every hop). None where it was not measured (ICMP; no journey's own time).
    pub edges_own_us: Option<f64>,
    #[serde(default)]
    pub attributed_pct: f64,
    /// The cost of one program run the own times are charged with (`tracer::RunCost`).
    #[serde(default)]
    pub run_cost: crate::probe::tracer::RunCost,
    /// Compensated request + response + turnaround against the untraced RTT (`own.rs`).
    pub consistency: Option<own::Consistency>,
    #[schemars(with = "schema_parts::Lost")]
    #[serde(default)]
    pub lost: BTreeMap<&'static str, u64>,
    #[serde(default)]
    pub passes: Vec<PassRow>,
    #[serde(default)]
    pub drops: Vec<DropRow>,
    #[serde(default)]
    pub devices: Vec<DeviceRow>,
    #[serde(default)]
    pub timelines: Vec<Timeline>,
    /// Kernel-measured cost of each program during the traced run (with `--prog-stats`).
    #[serde(default)]
    pub prog_costs: Vec<ProgCost>,
    /// Untraced request/response, one entry per round, and their median and spread.
    #[serde(default)]
    pub rounds: Vec<RttSummary>,
    pub rr: Option<RrRounds>,
    /// Bulk throughput, median and spread over rounds.
    pub bulk: Option<BulkRounds>,
    /// Open-loop phases (rate, then a multiple of it), latency corrected for coordinated omission.
    #[serde(default)]
    pub burst: Vec<BurstPhase>,
    pub context: Option<RunContext>,
    /// What the request/response runs sent (`--proto`).
    #[serde(default)]
    pub proto: crate::harness::Proto,
    /// Wait mode and asked placement of the runs the tables come from.
    #[serde(default)]
    pub wait: crate::harness::WaitMode,
    #[serde(default)]
    pub cpus: crate::harness::Cpus,
    /// `--wait busy-poll`: the client's and server's sockets' NAPI ids (0: no NAPI, blocking).
    pub busy_poll_napi: Option<(u32, u32)>,
    /// Where client, server and NET_RX softirq ran in the traced run (sampled journeys).
    pub placement: Option<crate::sys::machine::Placement>,
    pub machine: Option<crate::sys::machine::MachineState>,
    /// Default mode: the same path measured blocking in the same rounds (untraced and
    /// traced), its own record: what an application sees. None in the blocking record
    /// itself and when the runs already block.
    pub block: Option<Box<DriverReport>>,
    /// Per round: p50s, wakeup, data path, mode-change mark.
    #[serde(default)]
    pub round_detail: Vec<per_round::RoundRow>,
    /// RTT distribution of the traced run (the one the hops come from) as `[µs, fraction at
    /// or below]`, for the report's CDF chart.
    #[serde(default)]
    pub rtt_cdf: Vec<[f64; 2]>,
    /// Round trips the machine held up in the picked round, untraced and traced, and the hops
    /// they fell in; taken out of the check's means (`stalls`).
    pub stalls: Option<stalls::Stalls>,
    /// Netfilter parts of the traced run (`--parts`; empty without), inside their hops.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub parts: Vec<parts::PartRow>,
    /// How the netfilter parts were measured: netfilter links at their boundaries (6.4+), or
    /// function probes on `nft_do_chain`, conntrack and NAT where the kernel has no netfilter
    /// links (empty: no parts).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub parts_via: String,
    /// What the stall rule reads of the traced run (histogram tails), not written out.
    #[serde(skip)]
    pub tails: stalls::Tails,
}

/// The hops between the socket being woken and the receive returning: `wakeup` and, where
/// the scheduler's tracepoints split it, its parts.
pub const WAKEUP_PARTS: [&str; 5] = [
    "wakeup",
    "idle-exit",
    "runqueue",
    "recv-copy",
    "recv-return",
];

impl DriverReport {
    /// p50 of the whole wakeup in `dir`: each part's p50 weighted by the share of journeys
    /// that crossed it (idle-exit and runqueue are alternatives, never both), summed.
    pub fn wakeup_p50(&self, dir: &str) -> Option<f64> {
        let done = self.one_way.get(dir).map(|d| d.count).filter(|&n| n > 0)? as f64;
        let parts: Vec<f64> = (self.hops.iter())
            .filter(|h| h.at.dir == dir && WAKEUP_PARTS.contains(&h.at.hop))
            .map(|h| h.at.p50_us * (h.at.crossings as f64 / done).min(1.0))
            .collect();
        (!parts.is_empty()).then(|| parts.iter().sum())
    }

    /// Share of the one-way time in `dir` spent in the wakeup and its parts, %.
    pub fn wakeup_share(&self, dir: &str) -> Option<f64> {
        let parts: Vec<f64> = (self.hops.iter())
            .filter(|h| h.at.dir == dir && WAKEUP_PARTS.contains(&h.at.hop))
            .map(|h| h.share_pct)
            .collect();
        (!parts.is_empty()).then(|| parts.iter().sum())
    }

    /// Untraced RTT p50 over the rounds (median), or the traced run's without rounds.
    pub fn p50_us(&self) -> f64 {
        self.rr
            .as_ref()
            .map_or(self.traced.p50_us, |rr| rr.p50_us.median)
    }

    /// This driver's record in wait mode `wait`: itself, or its blocking record.
    pub fn in_mode(&self, wait: crate::harness::WaitMode) -> Option<&DriverReport> {
        if self.wait == wait {
            Some(self)
        } else {
            self.block.as_deref().filter(|b| b.wait == wait)
        }
    }
}

/// Median and range of one figure over rounds.
#[derive(Clone, Copy, Debug, Default, Serialize, serde::Deserialize, schemars::JsonSchema)]
pub struct Spread {
    pub median: f64,
    pub min: f64,
    pub max: f64,
}

impl Spread {
    pub fn of(mut v: Vec<f64>) -> Spread {
        v.sort_by(f64::total_cmp);
        Spread {
            median: crate::sys::stats::median(v.iter().copied()).unwrap_or(0.0),
            min: v.first().copied().unwrap_or(0.0),
            max: v.last().copied().unwrap_or(0.0),
        }
    }

    /// Range relative to the median.
    pub fn rel(&self) -> f64 {
        if self.median > 0.0 {
            (self.max - self.min) / self.median
        } else {
            0.0
        }
    }
}

#[derive(Clone, Debug, Serialize, serde::Deserialize, schemars::JsonSchema)]
pub struct RrRounds {
    pub rounds: usize,
    #[serde(default)]
    pub req_per_s: Spread,
    #[serde(default)]
    pub mean_us: Spread,
    pub p50_us: Spread,
    #[serde(default)]
    pub p95_us: Spread,
    pub p99_us: Spread,
}

impl RrRounds {
    pub fn of(r: &[RttSummary]) -> Option<RrRounds> {
        if r.is_empty() {
            return None;
        }
        let f = |g: fn(&RttSummary) -> f64| Spread::of(r.iter().map(g).collect());
        Some(RrRounds {
            rounds: r.len(),
            req_per_s: f(|s| s.req_per_s),
            mean_us: f(|s| s.mean_us),
            p50_us: f(|s| s.p50_us),
            p95_us: f(|s| s.p95_us),
            p99_us: f(|s| s.p99_us),
        })
    }
}

#[derive(Clone, Debug, Serialize, serde::Deserialize, schemars::JsonSchema)]
pub struct BulkRounds {
    pub streams: usize,
    pub gbit_per_s: Spread,
    #[serde(default)]
    pub retransmits: Spread,
    #[serde(default)]
    pub per_round: Vec<crate::harness::StreamResult>,
}

#[derive(Clone, Debug, Serialize, serde::Deserialize, schemars::JsonSchema)]
pub struct BurstPhase {
    pub multiplier: f64,
    pub rate: f64,
    pub scheduled: u64,
    pub sent: u64,
    pub completed: u64,
    pub achieved_rate: f64,
    /// Latency from the intended send time (corrected for coordinated omission).
    pub p50_us: f64,
    pub p99_us: f64,
    pub max_us: f64,
    /// Latency from the actual send time, for comparison.
    pub p99_uncorrected_us: f64,
}

#[derive(Clone, Debug, Serialize, serde::Deserialize, schemars::JsonSchema)]
pub struct RunContext {
    pub client_mtu: u32,
    pub server_mtu: u32,
    pub devices: Vec<crate::harness::DevContext>,
    /// Deltas over the untraced runs (request/response, bulk, burst), per side.
    pub client_counters: crate::harness::NetCounters,
    pub server_counters: crate::harness::NetCounters,
    /// An emulated wire between the nodes (`compare --underlay-delay`): netem's settings and
    /// the links it is on.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub wire: Option<String>,
}

#[derive(Clone, Debug, Serialize, serde::Deserialize, schemars::JsonSchema)]
pub struct ProgCost {
    pub program: String,
    pub runs: u64,
    pub avg_ns: f64,
    /// Runs per round trip.
    pub runs_per_rtt: f64,
}

/// Every lost or unmatched event counter, as every result reports them.
pub const LOST: [u32; 11] = [
    counter::RINGBUF_LOST,
    counter::SKB_MAP_FULL,
    counter::STALE,
    counter::REUSED,
    counter::RECV_UNMATCHED,
    counter::RELAY_UNMATCHED,
    counter::PROBE_MISSES,
    counter::CONSUMED_EARLY,
    counter::DROPPED,
    counter::TRUNCATED,
    counter::UNREAD,
];

/// Every counter of a journey the kernel could not finish, or of a sample userspace missed,
/// by name, from a snapshot's counters.
pub fn losses(counters: &[u64]) -> BTreeMap<&'static str, u64> {
    LOST.iter()
        .map(|&c| (counter::NAMES[c as usize], counters[c as usize]))
        .collect()
}

/// The lost counters, then the bookkeeping ones (journeys started, completed, sampled).
pub fn lost_counters(snap: &Snapshot) -> BTreeMap<&'static str, u64> {
    LOST.iter()
        .chain(&[counter::STARTED, counter::COMPLETED, counter::SAMPLES])
        .map(|&c| (counter::NAMES[c as usize], snap.counters[c as usize]))
        .collect()
}

mod build;
pub mod header;
pub mod journey;
pub mod own;
pub mod parts;
pub mod per_round;
pub mod saved;
pub(crate) mod schema_parts;
pub mod stalls;
pub(crate) mod timeline;

pub use build::{TracedRun, build, bulk_rounds, costs, run_context};
pub use timeline::{Headers, Timeline, TimelineHop, TimelinePart, timeline};
