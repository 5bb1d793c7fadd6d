//! Turns a run's aggregates into the per-driver report: RTT, per-hop table, attribution check,
//! lost events, receive passes and softirqs, drops. Printed as a table or serialised as JSON.
use std::collections::BTreeMap;

use netpath_common::{Dir, DropRecord, Hop, Point, SkbState, counter, hist, hop::slot};
use serde::Serialize;

use crate::{backend::Backend, harness::RrResult, path::Device, tracer::Snapshot};

#[derive(Clone, Debug, Serialize)]
pub struct RttSummary {
    pub count: u64,
    pub mean_us: f64,
    pub p50_us: f64,
    pub p95_us: f64,
    pub p99_us: f64,
    pub max_us: f64,
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

#[derive(Clone, Debug, Serialize)]
pub struct HopRow {
    pub hop: &'static str,
    pub dir: &'static str,
    /// Times a packet crossed this hop (a bridge path crosses veth twice per packet).
    pub crossings: u64,
    /// Sum over crossings divided by completed packets: what this hop adds to one packet.
    pub per_packet_us: f64,
    pub mean_us: f64,
    pub p50_us: f64,
    pub p99_us: f64,
    /// Share of the direction's mean one-way time.
    pub share_pct: f64,
}

#[derive(Clone, Debug, Serialize)]
pub struct Distribution {
    pub count: u64,
    pub mean_us: f64,
    pub p50_us: f64,
    pub p99_us: f64,
}

#[derive(Clone, Debug, Serialize)]
pub struct PassRow {
    pub dir: &'static str,
    pub rx_passes: u32,
    pub softirq_runs: u32,
    pub packets: u64,
}

#[derive(Clone, Debug, Serialize)]
pub struct DropRow {
    pub reason: u32,
    pub reason_name: String,
    pub hop: &'static str,
    pub dir: &'static str,
    pub last_point: &'static str,
    pub device: String,
    pub count: u64,
}

#[derive(Clone, Debug, Serialize)]
pub struct DeviceRow {
    pub name: String,
    pub netns: String,
    pub kind: &'static str,
    pub ifindex: u32,
    pub mtu: u32,
    pub tc_ingress_pkts: u64,
    pub tc_egress_pkts: u64,
}

#[derive(Clone, Debug, Serialize)]
pub struct TimelineHop {
    pub point: &'static str,
    pub device: String,
    pub kind: &'static str,
    pub netns: u32,
    pub hop: &'static str,
    pub since_prev_us: f64,
    pub cpu: u16,
}

#[derive(Clone, Debug, Serialize)]
pub struct Timeline {
    pub dir: &'static str,
    pub tuple: String,
    /// Set when the packet's addresses changed on the way (NAT): "before → after".
    pub translated: Option<String>,
    pub total_us: f64,
    pub rx_passes: u16,
    pub softirq_runs: u16,
    pub points: Vec<TimelineHop>,
}

#[derive(Clone, Debug, Serialize)]
pub struct DriverReport {
    pub driver: String,
    pub backend: &'static str,
    pub hops_visible: Vec<&'static str>,
    pub missing_tracepoints: Vec<String>,
    /// Function probes (kprobe/fentry backends) and how each is attached.
    pub function_probes: Vec<crate::tracer::FnProbe>,
    /// Losses this kernel does not count (see `Tracer::uncounted`).
    pub uncounted: Vec<&'static str>,
    pub traced: RttSummary,
    pub untraced: Option<RttSummary>,
    /// Traced vs untraced, percent: positive means tracing made it slower.
    pub probe_effect_mean_pct: Option<f64>,
    pub probe_effect_p50_pct: Option<f64>,
    /// The traced p50 beat every untraced round: probes only add work, so the machine's noise
    /// (or a change of its state between the runs) outweighs the effect here.
    pub probe_effect_below_noise: bool,
    pub hops: Vec<HopRow>,
    pub one_way: BTreeMap<&'static str, Distribution>,
    pub turnaround: Option<Distribution>,
    /// Mean request one-way + mean response one-way + mean server turnaround.
    pub attributed_us: f64,
    pub rtt_mean_us: f64,
    pub unattributed_us: f64,
    pub attributed_pct: f64,
    pub lost: BTreeMap<&'static str, u64>,
    pub passes: Vec<PassRow>,
    pub drops: Vec<DropRow>,
    pub devices: Vec<DeviceRow>,
    pub timelines: Vec<Timeline>,
    /// Kernel-measured cost of each program during the traced run (with `--prog-stats`).
    pub prog_costs: Vec<ProgCost>,
    /// Untraced request/response, one entry per round, and their median and spread.
    pub rounds: Vec<RttSummary>,
    pub rr: Option<RrRounds>,
    /// Bulk throughput, median and spread over rounds.
    pub bulk: Option<BulkRounds>,
    /// Open-loop phases (rate, then a multiple of it), latency corrected for coordinated omission.
    pub burst: Vec<BurstPhase>,
    pub context: Option<RunContext>,
    /// What the request/response runs sent (`--proto`).
    pub proto: crate::harness::Proto,
    /// Wait mode and asked placement of the runs the tables come from.
    pub wait: crate::harness::WaitMode,
    pub cpus: crate::harness::Cpus,
    /// `--wait busy-poll`: the client's and server's sockets' NAPI ids (0: no NAPI, blocking).
    pub busy_poll_napi: Option<(u32, u32)>,
    /// Where client, server and NET_RX softirq ran in the traced run (sampled journeys).
    pub placement: Option<crate::machine::Placement>,
    pub machine: Option<crate::machine::MachineState>,
    /// Default mode: the blocking run beside the spin tables.
    pub block: Option<crate::rounds::BlockLine>,
    /// Per round: p50s, wakeup, data path, mode-change mark.
    pub round_detail: Vec<crate::rounds::RoundRow>,
    /// RTT distribution of the untraced run (the traced one without it) as `[µs, fraction at
    /// or below]`, for the report's CDF chart.
    pub rtt_cdf: Vec<[f64; 2]>,
}

/// Median and range of one figure over rounds.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct Spread {
    pub median: f64,
    pub min: f64,
    pub max: f64,
}

impl Spread {
    pub fn of(mut v: Vec<f64>) -> Spread {
        v.sort_by(f64::total_cmp);
        let n = v.len();
        let median = if n == 0 {
            0.0
        } else if n % 2 == 1 {
            v[n / 2]
        } else {
            (v[n / 2 - 1] + v[n / 2]) / 2.0
        };
        Spread {
            median,
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

#[derive(Clone, Debug, Serialize)]
pub struct RrRounds {
    pub rounds: usize,
    pub req_per_s: Spread,
    pub mean_us: Spread,
    pub p50_us: Spread,
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

#[derive(Clone, Debug, Serialize)]
pub struct BulkRounds {
    pub streams: usize,
    pub gbit_per_s: Spread,
    pub retransmits: Spread,
    pub per_round: Vec<crate::harness::StreamResult>,
}

#[derive(Clone, Debug, Serialize)]
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

#[derive(Clone, Debug, Serialize)]
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

#[derive(Clone, Debug, Serialize)]
pub struct ProgCost {
    pub program: String,
    pub runs: u64,
    pub avg_ns: f64,
    /// Runs per round trip.
    pub runs_per_rtt: f64,
}

/// Every lost or unmatched event counter, as every result reports them.
pub const LOST: [u32; 10] = [
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
];

/// The lost counters, then the bookkeeping ones (journeys started, completed, sampled).
pub fn lost_counters(snap: &Snapshot) -> BTreeMap<&'static str, u64> {
    LOST.iter()
        .chain(&[counter::STARTED, counter::COMPLETED, counter::SAMPLES])
        .map(|&c| (counter::NAMES[c as usize], snap.counters[c as usize]))
        .collect()
}

fn percentile_us(h: &[u64], q: f64) -> f64 {
    let total: u64 = h.iter().sum();
    if total == 0 {
        return 0.0;
    }
    let rank = ((q / 100.0) * total as f64).ceil().max(1.0) as u64;
    let mut acc = 0;
    for (b, c) in h.iter().enumerate() {
        acc += c;
        if acc >= rank {
            return hist::midpoint(b as u32) as f64 / 1000.0;
        }
    }
    0.0
}

/// The per-hop table's rows in path order: the device hops appended to the model later
/// (ipvlan, netkit) beside macvlan, not after `other`; the whole journey has its own line.
fn table_hops() -> Vec<Hop> {
    let mut v: Vec<Hop> = Hop::ALL
        .iter()
        .copied()
        .filter(|h| *h != Hop::OneWay)
        .collect();
    v.sort_by_key(|h| match h {
        Hop::Ipvlan | Hop::Netkit => Hop::Macvlan as u32,
        h => *h as u32,
    });
    v
}

fn distribution(s: &Snapshot, dir: Dir, hop: Hop) -> Option<Distribution> {
    let i = slot(dir as u32, hop as u32) as usize;
    let st = s.stats[i];
    if st.count == 0 {
        return None;
    }
    Some(Distribution {
        count: st.count,
        mean_us: st.sum_ns as f64 / st.count as f64 / 1000.0,
        p50_us: percentile_us(&s.hist[i], 50.0),
        p99_us: percentile_us(&s.hist[i], 99.0),
    })
}

fn device_name(devices: &[Device], netns: u32, ifindex: u32) -> String {
    devices
        .iter()
        .find(|d| d.netns_inum == netns && d.ifindex == ifindex)
        .map(|d| format!("{}@{}", d.name, d.netns))
        .unwrap_or_else(|| {
            if ifindex == 0 {
                String::new()
            } else {
                format!("if{ifindex}@ns{netns}")
            }
        })
}

fn tuple(s: &SkbState) -> String {
    let ip = |a: u32| std::net::Ipv4Addr::from(u32::from_be(a));
    if s.proto != 1 {
        return format!(
            "{}:{} > {}:{}",
            ip(s.saddr),
            u16::from_be(s.sport),
            ip(s.daddr),
            u16::from_be(s.dport)
        );
    }
    // ICMP has no ports: its type, and for echo the identifier and sequence number.
    let what = match s.icmp_type {
        8 | 0 => format!(
            "{} id={} seq={}",
            if s.icmp_type == 8 {
                "echo"
            } else {
                "echo-reply"
            },
            u16::from_be(s.sport),
            u16::from_be(s.icmp_seq)
        ),
        t => format!("type {t} code {}", s.icmp_code),
    };
    format!("{} > {} icmp {what}", ip(s.saddr), ip(s.daddr))
}

/// What the receiving thread's CPU was doing before it ran, and whether it is another CPU than
/// the one that woke it.
fn sched_kind(k: u16) -> &'static str {
    use netpath_common::hop::{SCHED_CROSS, SCHED_IDLE};
    match (k & SCHED_IDLE != 0, k & SCHED_CROSS != 0) {
        (true, false) => "idle",
        (true, true) => "idle,x-cpu",
        (false, false) => "busy",
        (false, true) => "busy,x-cpu",
    }
}

pub fn timeline(s: &SkbState, devices: &[Device]) -> Timeline {
    let n = (s.npoints as usize).min(s.points.len());
    let mut prev = s.first_ts;
    let points = s.points[..n]
        .iter()
        .map(|p| {
            let d = p.ts.saturating_sub(prev);
            prev = p.ts;
            TimelineHop {
                point: Point::from_u16(p.point).map(|p| p.name()).unwrap_or("?"),
                device: device_name(devices, p.netns, p.ifindex),
                kind: if p.point == Point::SchedSwitch as u16 {
                    sched_kind(p.kind)
                } else if p.ifindex == 0 {
                    ""
                } else {
                    netpath_common::DevKind::from_u16(p.kind).name()
                },
                netns: p.netns,
                hop: Hop::from_u32(p.hop as u32).name(),
                since_prev_us: d as f64 / 1000.0,
                cpu: p.cpu,
            }
        })
        .collect();
    let ip = |a: u32| std::net::Ipv4Addr::from(u32::from_be(a));
    // An ICMP echo's "port" is its identifier (what MASQUERADE rewrites).
    let ep = |a: u32, p: u16| match s.proto {
        1 => format!("{} id={}", ip(a), u16::from_be(p)),
        _ => format!("{}:{}", ip(a), u16::from_be(p)),
    };
    let mut translated = Vec::new();
    if s.sock_daddr != 0 && (s.sock_daddr, s.sock_dport) != (s.daddr, s.dport) {
        // Rewritten before the first device: OUTPUT DNAT in the sender's own stack.
        translated.push(format!(
            "dst {} → {} (before the first device)",
            ep(s.sock_daddr, s.sock_dport),
            ep(s.daddr, s.dport)
        ));
    }
    if s.end_saddr != 0 {
        if (s.end_saddr, s.end_sport) != (s.saddr, s.sport) {
            translated.push(format!(
                "src {} → {}",
                ep(s.saddr, s.sport),
                ep(s.end_saddr, s.end_sport)
            ));
        }
        if (s.end_daddr, s.end_dport) != (s.daddr, s.dport) {
            translated.push(format!(
                "dst {} → {}",
                ep(s.daddr, s.dport),
                ep(s.end_daddr, s.end_dport)
            ));
        }
    }
    Timeline {
        translated: (!translated.is_empty()).then(|| translated.join(", ")),
        dir: if s.dir == 1 { "response" } else { "request" },
        tuple: tuple(s),
        total_us: s.last_ts.saturating_sub(s.first_ts) as f64 / 1000.0,
        rx_passes: s.rx_passes,
        softirq_runs: s.softirqs,
        points,
    }
}

#[allow(clippy::too_many_arguments)]
pub fn build(
    driver: &str,
    backend: Backend,
    missing: &[String],
    traced: &RrResult,
    untraced: Option<&RrResult>,
    snap: &Snapshot,
    samples: &[SkbState],
    drops: &[DropRecord],
    devices: &[Device],
    keep_timelines: usize,
    reasons: &BTreeMap<u32, String>,
) -> DriverReport {
    let traced_s = RttSummary::from_rr(traced);
    let untraced_s = untraced.map(RttSummary::from_rr);
    let pct = |a: f64, b: f64| if b > 0.0 { (a / b - 1.0) * 100.0 } else { 0.0 };

    let mut one_way = BTreeMap::new();
    let mut hops = Vec::new();
    for dir in [Dir::Request, Dir::Response] {
        let ow = distribution(snap, dir, Hop::OneWay);
        let completed = ow.as_ref().map(|d| d.count).unwrap_or(0);
        let ow_mean = ow.as_ref().map(|d| d.mean_us).unwrap_or(0.0);
        if let Some(d) = ow {
            one_way.insert(dir.name(), d);
        }
        for hop in &table_hops() {
            let i = slot(dir as u32, *hop as u32) as usize;
            let st = snap.stats[i];
            if st.count == 0 {
                continue;
            }
            let per_packet = if completed > 0 {
                st.sum_ns as f64 / completed as f64 / 1000.0
            } else {
                0.0
            };
            hops.push(HopRow {
                hop: hop.name(),
                dir: dir.name(),
                crossings: st.count,
                per_packet_us: per_packet,
                mean_us: st.sum_ns as f64 / st.count as f64 / 1000.0,
                p50_us: percentile_us(&snap.hist[i], 50.0),
                p99_us: percentile_us(&snap.hist[i], 99.0),
                share_pct: if ow_mean > 0.0 {
                    per_packet / ow_mean * 100.0
                } else {
                    0.0
                },
            });
        }
    }
    let turnaround = distribution(snap, Dir::Turnaround, Hop::OneWay);
    let attributed = one_way.values().map(|d| d.mean_us).sum::<f64>()
        + turnaround.as_ref().map(|d| d.mean_us).unwrap_or(0.0);

    let lost = lost_counters(snap);

    let mut passes = Vec::new();
    for dir in [Dir::Request, Dir::Response] {
        for p in 0..8u32 {
            for r in 0..8u32 {
                let n = snap.passes[(dir as u32 * 64 + p * 8 + r) as usize];
                if n > 0 {
                    passes.push(PassRow {
                        dir: dir.name(),
                        rx_passes: p,
                        softirq_runs: r,
                        packets: n,
                    });
                }
            }
        }
    }

    let mut drop_rows: BTreeMap<(u32, u32, u32, u16, String), u64> = BTreeMap::new();
    for d in drops {
        *drop_rows
            .entry((
                d.reason,
                netpath_common::hop::drop_hop(d.last_point, d.last_kind) as u32,
                d.dir,
                d.last_point,
                device_name(devices, d.netns, d.ifindex),
            ))
            .or_default() += 1;
    }
    let drops = drop_rows
        .into_iter()
        .map(|((reason, hop, dir, lp, device), count)| DropRow {
            reason,
            reason_name: reasons
                .get(&reason)
                .cloned()
                .unwrap_or_else(|| reason.to_string()),
            hop: Hop::from_u32(hop).name(),
            dir: if dir == 1 { "response" } else { "request" },
            last_point: Point::from_u16(lp).map(|p| p.name()).unwrap_or("?"),
            device,
            count,
        })
        .collect();

    let tc_count = |ifindex: u32, egress: bool| {
        snap.tc
            .iter()
            .filter(|((i, e), _)| *i == ifindex && *e == egress)
            .map(|(_, (p, _))| *p)
            .sum()
    };
    let devices_rows = devices
        .iter()
        .map(|d| DeviceRow {
            name: d.name.clone(),
            netns: d.netns.clone(),
            kind: d.kind.name(),
            ifindex: d.ifindex,
            mtu: d.mtu,
            tc_ingress_pkts: tc_count(d.ifindex, false),
            tc_egress_pkts: tc_count(d.ifindex, true),
        })
        .collect();

    DriverReport {
        rtt_cdf: rtt_cdf(untraced.unwrap_or(traced)),
        driver: driver.to_string(),
        backend: backend.name(),
        hops_visible: backend.visible_hops().iter().map(|h| h.name()).collect(),
        missing_tracepoints: missing.to_vec(),
        function_probes: Vec::new(),
        uncounted: Vec::new(),
        probe_effect_mean_pct: untraced_s
            .as_ref()
            .map(|u| pct(traced_s.mean_us, u.mean_us)),
        probe_effect_p50_pct: untraced_s.as_ref().map(|u| pct(traced_s.p50_us, u.p50_us)),
        probe_effect_below_noise: false,
        rtt_mean_us: traced_s.mean_us,
        unattributed_us: traced_s.mean_us - attributed,
        attributed_pct: if traced_s.mean_us > 0.0 {
            attributed / traced_s.mean_us * 100.0
        } else {
            0.0
        },
        attributed_us: attributed,
        traced: traced_s,
        untraced: untraced_s,
        hops,
        one_way,
        turnaround,
        lost,
        passes,
        drops,
        devices: devices_rows,
        timelines: samples
            .iter()
            .take(keep_timelines)
            .map(|s| timeline(s, devices))
            .collect(),
        prog_costs: Vec::new(),
        rounds: Vec::new(),
        rr: None,
        bulk: None,
        burst: Vec::new(),
        context: None,
        proto: Default::default(),
        wait: Default::default(),
        cpus: Default::default(),
        busy_poll_napi: None,
        placement: None,
        machine: None,
        block: None,
        round_detail: Vec::new(),
    }
}

pub fn print(r: &DriverReport) {
    println!("== driver {}  (backend {})", r.driver, r.backend);
    crate::rounds::print_mode(r);
    if !r.function_probes.is_empty() {
        let f: Vec<String> = r
            .function_probes
            .iter()
            .map(|p| format!("{} ({})", p.function, p.mechanism))
            .collect();
        println!("   function probes: {}", f.join(", "));
    }
    if !r.missing_tracepoints.is_empty() {
        println!(
            "   this kernel lacks {}: neighbouring hops merge",
            r.missing_tracepoints.join(", ")
        );
    }
    let rtt = |label: &str, s: &RttSummary| {
        println!(
            "   RTT {label:<9} n={:<7} mean {:>8.1} µs  p50 {:>8.1}  p95 {:>8.1}  p99 {:>8.1}  max {:>9.1}  {:>8.0} req/s",
            s.count, s.mean_us, s.p50_us, s.p95_us, s.p99_us, s.max_us, s.req_per_s
        )
    };
    if let Some(rr) = &r.rr {
        println!(
            "   RR untraced, median of {} round(s): {:.0} req/s  p50 {:.1} µs [{:.1}–{:.1}]  p95 {:.1}  p99 {:.1} µs [{:.1}–{:.1}]",
            rr.rounds,
            rr.req_per_s.median,
            rr.p50_us.median,
            rr.p50_us.min,
            rr.p50_us.max,
            rr.p95_us.median,
            rr.p99_us.median,
            rr.p99_us.min,
            rr.p99_us.max
        );
    }
    if let Some(b) = &r.bulk {
        println!(
            "   bulk {} stream(s): {:.2} Gbit/s [{:.2}–{:.2}]  retransmits {:.0}",
            b.streams,
            b.gbit_per_s.median,
            b.gbit_per_s.min,
            b.gbit_per_s.max,
            b.retransmits.median
        );
    }
    for b in &r.burst {
        println!(
            "   burst ×{} {:.0} req/s: sent {}/{} done {}  p50 {:.1} µs  p99 {:.1} µs (uncorrected {:.1})  max {:.1}",
            b.multiplier,
            b.rate,
            b.sent,
            b.scheduled,
            b.completed,
            b.p50_us,
            b.p99_us,
            b.p99_uncorrected_us,
            b.max_us
        );
    }
    if let Some(c) = &r.context {
        let rps: Vec<String> = c
            .devices
            .iter()
            .filter(|d| {
                d.rps_cpus
                    .iter()
                    .any(|m| !m.trim_start_matches(['0', ','].as_ref()).is_empty())
            })
            .map(|d| format!("{}@{}={}", d.name, d.netns, d.rps_cpus.join("/")))
            .collect();
        println!(
            "   context: MTU client {} server {}; client TCP retrans {} (spurious by DSACK {}) ofo {} sack-reorder {}; server retrans {} ofo {}; RPS {}",
            c.client_mtu,
            c.server_mtu,
            c.client_counters.retrans_segs,
            c.client_counters.tcp_dsack_recv,
            c.client_counters.tcp_ofo_queue,
            c.client_counters.tcp_sack_reorder,
            c.server_counters.retrans_segs,
            c.server_counters.tcp_ofo_queue,
            if rps.is_empty() {
                "off everywhere".to_string()
            } else {
                rps.join(" ")
            }
        );
        if let Some(w) = &c.wire {
            println!("   wire: {w}");
        }
    }
    rtt("traced", &r.traced);
    if let Some(u) = &r.untraced {
        rtt("untraced", u);
        println!(
            "   probe effect: mean {:+.1}%  p50 {:+.1}%{}",
            r.probe_effect_mean_pct.unwrap_or(0.0),
            r.probe_effect_p50_pct.unwrap_or(0.0),
            if r.probe_effect_below_noise {
                "  (traced p50 below every untraced round: noise or a change of the machine's \
                 state between runs outweighs it; not a result)"
            } else {
                ""
            }
        );
    }
    println!(
        "   {:<15} {:<9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>6}",
        "hop", "dir", "crossings", "per-pkt", "mean", "p50", "p99", "share"
    );
    for h in &r.hops {
        println!(
            "   {:<15} {:<9} {:>9} {:>7.2}µs {:>7.2}µs {:>7.2}µs {:>7.2}µs {:>5.1}%",
            h.hop, h.dir, h.crossings, h.per_packet_us, h.mean_us, h.p50_us, h.p99_us, h.share_pct
        );
    }
    for (dir, d) in &r.one_way {
        println!(
            "   one-way {dir:<9} n={:<7} mean {:>7.2} µs  p50 {:>7.2}  p99 {:>7.2}",
            d.count, d.mean_us, d.p50_us, d.p99_us
        );
    }
    if let Some(t) = &r.turnaround {
        println!(
            "   server turnaround n={:<7} mean {:>7.2} µs  p50 {:>7.2}  p99 {:>7.2}",
            t.count, t.mean_us, t.p50_us, t.p99_us
        );
    }
    println!(
        "   attribution: request + response + turnaround = {:.2} µs vs RTT mean {:.2} µs ({:.1}%), unattributed {:.2} µs",
        r.attributed_us, r.rtt_mean_us, r.attributed_pct, r.unattributed_us
    );
    let passes: Vec<String> = r
        .passes
        .iter()
        .map(|p| {
            format!(
                "{} {} pass/{} softirq ×{}",
                p.dir, p.rx_passes, p.softirq_runs, p.packets
            )
        })
        .collect();
    if !passes.is_empty() {
        println!(
            "   receive passes/softirq runs per packet: {}",
            passes.join(", ")
        );
    }
    for d in &r.drops {
        println!(
            "   DROP reason {} in hop {} ({} after {} on {}) ×{}",
            d.reason_name, d.hop, d.dir, d.last_point, d.device, d.count
        );
    }
    for c in &r.prog_costs {
        println!(
            "   program {:<24} runs {:>9} ({:>5.1}/RTT)  avg {:>6.0} ns",
            c.program, c.runs, c.runs_per_rtt, c.avg_ns
        );
    }
    let lost: Vec<String> = r.lost.iter().map(|(k, v)| format!("{k} {v}")).collect();
    println!("   events: {}", lost.join(", "));
    for u in &r.uncounted {
        println!("   not counted by this kernel: {u}");
    }
}

/// Ratio of two medians, flagged when either side's spread over rounds is larger than the
/// difference the ratio claims.
#[derive(Clone, Debug, Serialize)]
pub struct Claim {
    pub name: String,
    pub ratio: f64,
    pub noisy: bool,
}

fn claim(name: &str, a: Option<Spread>, b: Option<Spread>) -> Option<Claim> {
    let (a, b) = (a?, b?);
    if b.median <= 0.0 {
        return None;
    }
    let ratio = a.median / b.median;
    let noisy = a.rel().max(b.rel()) > (ratio - 1.0).abs();
    Some(Claim {
        name: name.to_string(),
        ratio,
        noisy,
    })
}

/// The ratios users argue about, from one run. p50 ratios are taken per round (between runs
/// that were neighbours in time) and their median is the ratio, their spread the noise.
pub fn claims(reports: &[DriverReport]) -> Vec<Claim> {
    let find = |d: &str| reports.iter().find(|r| r.driver == d);
    let p50 = |a: &str, b: &str| {
        let name = format!("{a}/{b} p50");
        match crate::rounds::ratio(reports, a, b) {
            Some(r) if r.per_round.len() > 1 => Some(Claim {
                name,
                ratio: r.spread.median,
                noisy: r.spread.rel() > (r.spread.median - 1.0).abs(),
            }),
            _ => claim(
                &name,
                find(a).and_then(|r| r.rr.as_ref().map(|x| x.p50_us)),
                find(b).and_then(|r| r.rr.as_ref().map(|x| x.p50_us)),
            ),
        }
    };
    let p99 = |d: &str| find(d).and_then(|r| r.rr.as_ref().map(|x| x.p99_us));
    let gbit = |d: &str| find(d).and_then(|r| r.bulk.as_ref().map(|x| x.gbit_per_s));
    [
        p50("bridge", "host"),
        p50("overlay", "bridge"),
        claim("overlay/bridge p99", p99("overlay"), p99("bridge")),
        p50("published-proxy", "bridge"),
        p50("published-nat", "bridge"),
        p50("macvlan", "bridge"),
        claim("bridge/host Gbit/s", gbit("bridge"), gbit("host")),
        claim("overlay/bridge Gbit/s", gbit("overlay"), gbit("bridge")),
    ]
    .into_iter()
    .flatten()
    .collect()
}

pub fn print_summary(reports: &[DriverReport]) {
    print_table(reports);
    println!("   ratios per round between neighbouring runs (untraced p50):");
    crate::rounds::print_ratios(reports);
    if let Some(m) = reports.last().and_then(|r| r.machine.as_ref()) {
        println!("   {}", m.line());
    }
}

fn print_table(reports: &[DriverReport]) {
    let mut protos: Vec<&str> = Vec::new();
    for r in reports {
        if !protos.contains(&r.proto.name()) {
            protos.push(r.proto.name());
        }
    }
    let mode = reports
        .first()
        .map(|r| {
            format!(
                "{}, wait {}, cpus {}",
                protos.join(","),
                r.wait.name(),
                r.cpus
            )
        })
        .unwrap_or_default();
    println!("== summary ({mode}; untraced medians; traced figures are in each driver's block)");
    println!(
        "   {:<16} {:>9} {:>8} {:>8} {:>8} {:>9} {:>8} {:>6} {:>11}",
        "driver", "req/s", "p50 µs", "p95 µs", "p99 µs", "Gbit/s", "retrans", "MTU", "attributed"
    );
    for r in reports {
        let (rps, p50, p95, p99) =
            r.rr.as_ref()
                .map(|x| {
                    (
                        x.req_per_s.median,
                        x.p50_us.median,
                        x.p95_us.median,
                        x.p99_us.median,
                    )
                })
                .unwrap_or((
                    r.traced.req_per_s,
                    r.traced.p50_us,
                    r.traced.p95_us,
                    r.traced.p99_us,
                ));
        let (g, rt) = r
            .bulk
            .as_ref()
            .map(|b| {
                (
                    format!("{:.2}", b.gbit_per_s.median),
                    format!("{:.0}", b.retransmits.median),
                )
            })
            .unwrap_or(("-".into(), "-".into()));
        let mtu = r
            .context
            .as_ref()
            .map(|c| c.client_mtu.to_string())
            .unwrap_or("-".into());
        println!(
            "   {:<16} {:>9.0} {:>8.1} {:>8.1} {:>8.1} {:>9} {:>8} {:>6} {:>10.1}%",
            r.driver, rps, p50, p95, p99, g, rt, mtu, r.attributed_pct
        );
    }
    for c in claims(reports) {
        println!(
            "   {:<28} {:>6.2}×{}",
            c.name,
            c.ratio,
            if c.noisy {
                "   (spread of the per-round ratios exceeds the difference: not a result)"
            } else {
                ""
            }
        );
    }
}
