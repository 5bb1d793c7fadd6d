//! `netpath serve`'s metrics in the Prometheus text format (prometheus-client). Labels are
//! bounded: hop, direction, driver and container (the containers being followed, removed when
//! they stop), drop reason; never addresses, ports or tuples.
use std::collections::{BTreeMap, BTreeSet};

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets, linear_buckets};
use prometheus_client::registry::{Registry, Unit};

/// Every metric name the exporter emits (the Grafana dashboard's test checks against it).
pub const METRICS: &[&str] = &[
    "netpath_hop_latency_seconds",
    "netpath_one_way_latency_seconds",
    "netpath_receive_passes",
    "netpath_softirq_runs",
    "netpath_drops_total",
    "netpath_lost_events_total",
    "netpath_journeys_total",
    "netpath_bpf_program_run_seconds_total",
    "netpath_bpf_program_runs_total",
    "netpath_watched_containers",
    "netpath_watched_devices",
];

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct HopLabels {
    pub hop: String,
    pub direction: String,
    pub driver: String,
    pub container: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PathLabels {
    pub direction: String,
    pub driver: String,
    pub container: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct DropLabels {
    pub reason: String,
    pub hop: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct NameLabel {
    pub name: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ProgLabel {
    pub program: String,
}

/// Seconds from 2^-20 (≈ 1 µs) to 2^3 in powers of two: a hop takes about a µs, a wakeup
/// tens, a wire delay milliseconds.
fn latency() -> Histogram {
    Histogram::new(exponential_buckets(2f64.powi(-20), 2.0, 24))
}

fn per_packet() -> Histogram {
    Histogram::new(linear_buckets(1.0, 1.0, 8))
}

type HistFamily<L> = Family<L, Histogram, fn() -> Histogram>;

pub struct Metrics {
    pub registry: Registry,
    pub hop: HistFamily<HopLabels>,
    pub one_way: HistFamily<PathLabels>,
    pub passes: HistFamily<PathLabels>,
    pub softirqs: HistFamily<PathLabels>,
    pub drops: Family<DropLabels, Counter>,
    pub lost: Family<NameLabel, Counter>,
    pub journeys: Family<NameLabel, Counter>,
    pub prog_seconds: Family<ProgLabel, Counter<f64, std::sync::atomic::AtomicU64>>,
    pub prog_runs: Family<ProgLabel, Counter>,
    pub containers: Gauge,
    pub devices: Gauge,
    /// Label sets in use per container, so its series go when it stops (bounded memory
    /// under container churn).
    hop_sets: BTreeMap<String, BTreeSet<(String, String, String)>>,
    path_sets: BTreeMap<String, BTreeSet<(String, String)>>,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    pub fn new() -> Metrics {
        let mut registry = Registry::default();
        let m = Metrics {
            hop: Family::new_with_constructor(latency as fn() -> Histogram),
            one_way: Family::new_with_constructor(latency as fn() -> Histogram),
            passes: Family::new_with_constructor(per_packet as fn() -> Histogram),
            softirqs: Family::new_with_constructor(per_packet as fn() -> Histogram),
            drops: Family::default(),
            lost: Family::default(),
            journeys: Family::default(),
            prog_seconds: Family::default(),
            prog_runs: Family::default(),
            containers: Gauge::default(),
            devices: Gauge::default(),
            registry: Registry::default(),
            hop_sets: BTreeMap::new(),
            path_sets: BTreeMap::new(),
        };
        let r = &mut registry;
        r.register_with_unit(
            "netpath_hop_latency",
            "Time a packet spent in one hop of its path (one crossing)",
            Unit::Seconds,
            m.hop.clone(),
        );
        r.register_with_unit(
            "netpath_one_way_latency",
            "A packet's time from its first watched point to the receiving socket",
            Unit::Seconds,
            m.one_way.clone(),
        );
        r.register(
            "netpath_receive_passes",
            "Receive passes (netif_receive_skb) per packet",
            m.passes.clone(),
        );
        r.register(
            "netpath_softirq_runs",
            "NET_RX softirq runs a packet's receive passes took",
            m.softirqs.clone(),
        );
        r.register(
            "netpath_drops",
            "Packets the kernel freed on a followed path, by reason and hop",
            m.drops.clone(),
        );
        r.register(
            "netpath_lost_events",
            "Events netpath lost or could not match, by counter (ringbuf_lost, skb_map_full, …)",
            m.lost.clone(),
        );
        r.register(
            "netpath_journeys",
            "Journeys the kernel programs started, completed and sampled",
            m.journeys.clone(),
        );
        r.register_with_unit(
            "netpath_bpf_program_run",
            "Run time of netpath's kernel programs (bpf_stats)",
            Unit::Seconds,
            m.prog_seconds.clone(),
        );
        r.register(
            "netpath_bpf_program_runs",
            "Runs of netpath's kernel programs (bpf_stats)",
            m.prog_runs.clone(),
        );
        r.register(
            "netpath_watched_containers",
            "Containers followed",
            m.containers.clone(),
        );
        r.register(
            "netpath_watched_devices",
            "Devices the probes watch",
            m.devices.clone(),
        );
        Metrics { registry, ..m }
    }

    pub fn observe_hop(&mut self, l: HopLabels, seconds: f64) {
        self.hop_sets
            .entry(l.container.clone())
            .or_default()
            .insert((l.hop.clone(), l.direction.clone(), l.driver.clone()));
        self.hop.get_or_create(&l).observe(seconds);
    }

    pub fn observe_path(&mut self, l: PathLabels, one_way_s: f64, passes: u16, softirqs: u16) {
        self.path_sets
            .entry(l.container.clone())
            .or_default()
            .insert((l.direction.clone(), l.driver.clone()));
        self.one_way.get_or_create(&l).observe(one_way_s);
        self.passes.get_or_create(&l).observe(passes as f64);
        self.softirqs.get_or_create(&l).observe(softirqs as f64);
    }

    /// Removes every series of a container that stopped.
    pub fn forget_container(&mut self, container: &str) {
        for (hop, direction, driver) in self.hop_sets.remove(container).unwrap_or_default() {
            self.hop.remove(&HopLabels {
                hop,
                direction,
                driver,
                container: container.to_string(),
            });
        }
        for (direction, driver) in self.path_sets.remove(container).unwrap_or_default() {
            let l = PathLabels {
                direction,
                driver,
                container: container.to_string(),
            };
            self.one_way.remove(&l);
            self.passes.remove(&l);
            self.softirqs.remove(&l);
        }
    }

    pub fn containers_with_series(&self) -> Vec<String> {
        let mut c: BTreeSet<String> = self.hop_sets.keys().cloned().collect();
        c.extend(self.path_sets.keys().cloned());
        c.into_iter().collect()
    }

    /// The OpenMetrics text (what Prometheus asks for).
    pub fn encode(&self) -> String {
        let mut s = String::new();
        // Writing to a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut s, &self.registry);
        s
    }

    /// The classic Prometheus text format (0.0.4), for clients that do not ask for
    /// OpenMetrics (curl, `promtool check metrics`).
    pub fn encode_classic(&self) -> String {
        to_classic(&self.encode())
    }
}

/// OpenMetrics → classic text: a counter family `x` whose samples are `x_total` is described
/// as `x_total` (HELP, TYPE), and the `# UNIT` and `# EOF` lines go. Samples are unchanged.
pub fn to_classic(om: &str) -> String {
    let counters: BTreeSet<&str> = om
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.strip_suffix(" counter"))
        .collect();
    let mut out = String::with_capacity(om.len());
    for l in om.lines() {
        if l.starts_with("# UNIT ") || l == "# EOF" {
            continue;
        }
        let meta = ["# HELP ", "# TYPE "]
            .into_iter()
            .find_map(|p| l.strip_prefix(p).map(|rest| (p, rest)));
        match meta {
            Some((p, rest)) => {
                let (name, tail) = rest.split_once(' ').unwrap_or((rest, ""));
                if counters.contains(name) {
                    out.push_str(&format!("{p}{name}_total {tail}"));
                } else {
                    out.push_str(l);
                }
            }
            None => out.push_str(l),
        }
        out.push('\n');
    }
    out
}

/// Raises a counter to a cumulative value read from the kernel (which only grows while the
/// programs stay loaded).
pub fn raise_to(c: &Counter, total: u64) {
    let now = c.get();
    if total > now {
        c.inc_by(total - now);
    }
}
