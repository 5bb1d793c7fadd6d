//! `netpath serve`'s metrics in the Prometheus text format (prometheus-client). Labels are
//! bounded: hop, direction (in, out), peer kind, driver, and Kubernetes' namespace, pod and
//! container (of what is followed, removed when it stops), drop reason; never addresses, ports
//! or tuples. Latency histograms sit on the kernel's bucket bounds (`prom_hist`).
use std::collections::{BTreeMap, BTreeSet};

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, linear_buckets};
use prometheus_client::registry::{Registry, Unit};

use super::prom_hist::{KernelHistogram, bounds_ns};

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

/// Whose traffic a series is: Kubernetes' `namespace`, `pod` and `container` ("" where
/// none: a Docker container outside pods has only its name).
#[derive(Clone, Debug, Default, Hash, PartialEq, Eq, PartialOrd, Ord, EncodeLabelSet)]
pub struct Owner {
    pub namespace: String,
    pub pod: String,
    pub container: String,
}

/// Which way a journey went and whom with: `direction` relative to the container (`in`,
/// `out`), `peer` the kind of its other end (`PEERS`).
#[derive(Clone, Debug, Hash, PartialEq, Eq, PartialOrd, Ord, EncodeLabelSet)]
pub struct Way {
    pub direction: String,
    pub peer: String,
}

/// Kinds of a journey's other end: the container itself (loopback), another container of the
/// node, the node, anything else, or not known.
pub const PEERS: &[&str] = &["local", "container", "host", "remote", "unknown"];

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PathLabels {
    #[prometheus(flatten)]
    pub way: Way,
    pub driver: String,
    #[prometheus(flatten)]
    pub owner: Owner,
}

/// A hop's series carry its path's labels after the hop's name.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct HopLabels {
    pub hop: String,
    #[prometheus(flatten)]
    pub path: PathLabels,
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

/// Latency on the kernel's bucket bounds, 64 ns to 33.5 ms at steps of 2^⅓ (`prom_hist`): a
/// hop takes a fraction of a µs to a few, a wakeup tens, a wire delay milliseconds.
fn latency() -> KernelHistogram {
    static BOUNDS: std::sync::OnceLock<std::sync::Arc<Vec<u64>>> = std::sync::OnceLock::new();
    KernelHistogram::new(
        BOUNDS
            .get_or_init(|| std::sync::Arc::new(bounds_ns()))
            .clone(),
    )
}

fn per_packet() -> Histogram {
    Histogram::new(linear_buckets(1.0, 1.0, 8))
}

type HistFamily<L> = Family<L, Histogram, fn() -> Histogram>;
type LatencyFamily<L> = Family<L, KernelHistogram, fn() -> KernelHistogram>;

pub struct Metrics {
    pub registry: Registry,
    pub hop: LatencyFamily<HopLabels>,
    pub one_way: LatencyFamily<PathLabels>,
    pub passes: HistFamily<PathLabels>,
    pub softirqs: HistFamily<PathLabels>,
    pub drops: Family<DropLabels, Counter>,
    pub lost: Family<NameLabel, Counter>,
    pub journeys: Family<NameLabel, Counter>,
    pub prog_seconds: Family<ProgLabel, Counter<f64, std::sync::atomic::AtomicU64>>,
    pub prog_runs: Family<ProgLabel, Counter>,
    pub containers: Gauge,
    pub devices: Gauge,
    /// Whether packets' softirq runs are observed: not in `serve`'s light profile, whose
    /// programs do not count them (the family then has no series).
    pub softirq_runs: bool,
    /// Label sets in use per owner, so its series go when it stops (bounded memory under
    /// container churn).
    hop_sets: BTreeMap<Owner, BTreeSet<(String, Way, String)>>,
    path_sets: BTreeMap<Owner, BTreeSet<(Way, String)>>,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

/// Registers each row `name, unit, metric, help;` (unit `-`: none) on the registry, so the
/// exposition's names and help texts stand in one table rather than a call each.
macro_rules! register {
    ($r:expr; $($name:literal, $unit:tt, $metric:expr, $help:literal;)*) => {{
        let r: &mut Registry = $r;
        $(register!(@one r, $name, $unit, $metric, $help);)*
    }};
    (@one $r:ident, $name:literal, -, $metric:expr, $help:literal) => {
        $r.register($name, $help, $metric.clone())
    };
    (@one $r:ident, $name:literal, $unit:ident, $metric:expr, $help:literal) => {
        $r.register_with_unit($name, $help, Unit::$unit, $metric.clone())
    };
}

impl Metrics {
    pub fn new() -> Metrics {
        let mut registry = Registry::default();
        let m = Metrics {
            hop: Family::new_with_constructor(latency as fn() -> KernelHistogram),
            one_way: Family::new_with_constructor(latency as fn() -> KernelHistogram),
            passes: Family::new_with_constructor(per_packet as fn() -> Histogram),
            softirqs: Family::new_with_constructor(per_packet as fn() -> Histogram),
            drops: Family::default(),
            lost: Family::default(),
            journeys: Family::default(),
            prog_seconds: Family::default(),
            prog_runs: Family::default(),
            containers: Gauge::default(),
            devices: Gauge::default(),
            softirq_runs: true,
            registry: Registry::default(),
            hop_sets: BTreeMap::new(),
            path_sets: BTreeMap::new(),
        };
        // One row a metric: name, unit (`-` for a plain count), the family, its help.
        register! { &mut registry;
            "netpath_hop_latency", Seconds, m.hop, "Time a packet spent in one hop of its path (one crossing), of the journeys followed (one in --sample; a quantile's rank is off by about ±1/√(samples in the window)); bounds are the kernel's buckets, steps of about 2^(1/6)";
            "netpath_one_way_latency", Seconds, m.one_way, "A packet's time from its first watched point to the receiving socket, of the journeys followed (one in --sample)";
            "netpath_receive_passes", -, m.passes, "Receive passes (netif_receive_skb) per packet";
            "netpath_softirq_runs", -, m.softirqs, "NET_RX softirq runs a packet's receive passes took";
            "netpath_drops", -, m.drops, "Packets the kernel freed on a followed path, by reason and hop";
            "netpath_lost_events", -, m.lost, "Events netpath lost or could not match, by counter (ringbuf_lost, skb_map_full, …)";
            "netpath_journeys", -, m.journeys, "Journeys the kernel programs started, completed and sampled";
            "netpath_bpf_program_run", Seconds, m.prog_seconds, "Run time of netpath's kernel programs (bpf_stats)";
            "netpath_bpf_program_runs", -, m.prog_runs, "Runs of netpath's kernel programs (bpf_stats)";
            "netpath_watched_containers", -, m.containers, "Containers followed";
            "netpath_watched_devices", -, m.devices, "Devices the probes watch";
        }
        Metrics { registry, ..m }
    }

    pub fn observe_hop(&mut self, l: HopLabels, ns: u64) {
        let p = &l.path;
        self.hop_sets.entry(p.owner.clone()).or_default().insert((
            l.hop.clone(),
            p.way.clone(),
            p.driver.clone(),
        ));
        self.hop.get_or_create(&l).observe_ns(ns);
    }

    pub fn observe_path(&mut self, l: PathLabels, one_way_ns: u64, passes: u16, softirqs: u16) {
        self.path_sets
            .entry(l.owner.clone())
            .or_default()
            .insert((l.way.clone(), l.driver.clone()));
        self.one_way.get_or_create(&l).observe_ns(one_way_ns);
        self.passes.get_or_create(&l).observe(passes as f64);
        if self.softirq_runs {
            self.softirqs.get_or_create(&l).observe(softirqs as f64);
        }
    }

    /// Removes every series of a container (or pod) that stopped.
    pub fn forget_container(&mut self, owner: &Owner) {
        for (hop, way, driver) in self.hop_sets.remove(owner).unwrap_or_default() {
            let path = PathLabels {
                way,
                driver,
                owner: owner.clone(),
            };
            self.hop.remove(&HopLabels { hop, path });
        }
        for (way, driver) in self.path_sets.remove(owner).unwrap_or_default() {
            let l = PathLabels {
                way,
                driver,
                owner: owner.clone(),
            };
            self.one_way.remove(&l);
            self.passes.remove(&l);
            self.softirqs.remove(&l);
        }
    }

    pub fn containers_with_series(&self) -> Vec<Owner> {
        let mut c: BTreeSet<Owner> = self.hop_sets.keys().cloned().collect();
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

#[cfg(test)]
mod tests {
    use super::*;

    fn way() -> Way {
        Way {
            direction: "in".into(),
            peer: "container".into(),
        }
    }

    /// Every series name a scrape can carry, with one of each kind observed.
    fn emitted() -> BTreeSet<String> {
        let mut m = Metrics::new();
        let owner = Owner {
            namespace: "shop".into(),
            pod: "web-0".into(),
            container: "web".into(),
        };
        let path = PathLabels {
            way: way(),
            driver: "bridge".into(),
            owner,
        };
        let hop = HopLabels {
            hop: "veth".into(),
            path: path.clone(),
        };
        m.observe_hop(hop, 2000);
        m.observe_path(path, 20_000, 2, 1);
        let drop = DropLabels {
            reason: "NETFILTER_DROP".into(),
            hop: "bridge".into(),
        };
        m.drops.get_or_create(&drop).inc();
        let name = NameLabel {
            name: "ringbuf_lost".into(),
        };
        m.lost.get_or_create(&name).inc();
        m.journeys.get_or_create(&name).inc();
        let prog = ProgLabel {
            program: "tp_net_dev_queue".into(),
        };
        m.prog_runs.get_or_create(&prog).inc();
        m.prog_seconds.get_or_create(&prog).inc_by(1e-6);
        m.encode_classic()
            .lines()
            .filter(|l| !l.starts_with('#') && !l.is_empty())
            .map(|l| l.split(['{', ' ']).next().unwrap_or("").to_string())
            .collect()
    }

    #[test]
    fn a_gone_pods_series_go_and_only_its() {
        let mut m = Metrics::new();
        let owner = |pod: &str| Owner {
            namespace: "shop".into(),
            pod: pod.into(),
            container: "agent".into(),
        };
        for pod in ["web-0", "web-1"] {
            let path = PathLabels {
                way: way(),
                driver: "bridge".into(),
                owner: owner(pod),
            };
            let hop = HopLabels {
                hop: "bridge".into(),
                path: path.clone(),
            };
            m.observe_hop(hop, 1000);
            m.observe_path(path, 10_000, 1, 1);
        }
        let text = m.encode_classic();
        assert!(text.contains(
            "netpath_hop_latency_seconds_count{hop=\"bridge\",direction=\"in\",peer=\"container\",driver=\"bridge\",namespace=\"shop\",pod=\"web-0\",container=\"agent\"} 1"
        ), "{text}");
        m.forget_container(&owner("web-0"));
        let text = m.encode_classic();
        assert!(!text.contains("pod=\"web-0\""), "{text}");
        assert!(text.contains("pod=\"web-1\""), "{text}");
        assert_eq!(m.containers_with_series(), vec![owner("web-1")]);
    }

    #[test]
    fn every_listed_metric_is_emitted() {
        let names = emitted();
        for m in METRICS {
            assert!(
                names.iter().any(|n| n.starts_with(m)),
                "{m} not in {names:?}"
            );
        }
    }

    #[test]
    fn grafana_queries_name_only_emitted_metrics() {
        let names = emitted();
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../deploy/grafana/netpath-dashboard.json"
        );
        let dash: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
        let mut exprs: Vec<String> = dash["panels"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|p| p["targets"].as_array().cloned().unwrap_or_default())
            .filter_map(|t| t["expr"].as_str().map(str::to_string))
            .collect();
        let panels_with_queries = exprs.len();
        exprs.extend(
            dash["templating"]["list"]
                .as_array()
                .unwrap()
                .iter()
                .filter_map(|v| v["query"].as_str())
                .filter(|q| q.contains("netpath_"))
                .map(str::to_string),
        );
        assert!(panels_with_queries >= 9, "{panels_with_queries}");
        // Every panel says its unit; the variables narrow by driver, node and owner.
        for p in dash["panels"].as_array().unwrap() {
            let unit = p["fieldConfig"]["defaults"]["unit"].as_str().unwrap_or("");
            assert!(!unit.is_empty(), "panel {} has no unit", p["title"]);
        }
        let vars: Vec<&str> = dash["templating"]["list"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|v| v["name"].as_str())
            .collect();
        for v in ["driver", "node", "namespace", "pod", "container", "hop"] {
            assert!(vars.contains(&v), "no ${v} variable: {vars:?}");
        }
        let mut used = BTreeSet::new();
        for e in &exprs {
            let mut rest = e.as_str();
            let mut found = false;
            while let Some(i) = rest.find("netpath_") {
                let tail = &rest[i..];
                let end = tail
                    .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                    .unwrap_or(tail.len());
                let name = &tail[..end];
                assert!(
                    names.contains(name),
                    "`{name}` in `{e}` is not emitted: {names:?}"
                );
                used.insert(name.to_string());
                found = true;
                rest = &tail[end..];
            }
            assert!(found, "query names no netpath metric: {e}");
        }
        // The dashboard shows the hop histograms, lost events and netpath's own cost.
        for needed in [
            "netpath_hop_latency_seconds_bucket",
            "netpath_lost_events_total",
            "netpath_bpf_program_run_seconds_total",
        ] {
            assert!(used.contains(needed), "the dashboard never shows {needed}");
        }
    }
}
