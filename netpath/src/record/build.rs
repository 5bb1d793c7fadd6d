//! Builds the run record: `build` from one traced run (its tracer, result, maps and samples),
//! `DriverReport::set_rounds` from the untraced rounds around it. The only places a
//! `DriverReport` is assembled.
use std::collections::BTreeMap;

use netpath_common::{Dir, DropRecord, Hop, Point, SkbState, hist, hop::slot};

use super::own;
use super::timeline::device_name;
use super::*;
use crate::{
    harness::{self, RrConfig},
    path::{Device, NetPath},
    probe::tracer::Tracer,
    sys::machine::Placement,
};

/// One traced request/response run: everything its report is built from.
pub struct TracedRun<'a> {
    pub label: &'a str,
    /// The tracer that watched it: backend, missing tracepoints, function probes, uncounted
    /// losses, drop reason names.
    pub tracer: &'a Tracer,
    pub rr: &'a RrConfig,
    pub result: &'a RrResult,
    pub snap: &'a Snapshot,
    pub samples: &'a [SkbState],
    pub drops: &'a [DropRecord],
    pub devices: &'a [Device],
    pub keep_timelines: usize,
    /// Kernel-measured program costs (`--prog-stats`; empty without).
    pub prog_costs: Vec<ProgCost>,
}

/// The `q`th percentile of a kernel histogram, in µs: within the bucket that holds it,
/// interpolated linearly by rank (a bucket is up to 1/16 of its value wide; its midpoint alone
/// would move a p50 in steps of that width).
pub(super) fn percentile_us(h: &[u64], q: f64) -> f64 {
    let total: u64 = h.iter().sum();
    if total == 0 {
        return 0.0;
    }
    let rank = ((q / 100.0) * total as f64).max(1.0);
    let mut below = 0.0;
    for (b, &c) in h.iter().enumerate() {
        if c == 0 {
            continue;
        }
        if below + c as f64 >= rank {
            let (lo, hi) = hist::bounds(b as u32);
            let within = (rank - below) / c as f64;
            return (lo as f64 + within * (hi - lo) as f64) / 1000.0;
        }
        below += c as f64;
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

fn distribution(s: &Snapshot, dir: Dir, hop: Hop, run_ns: f64) -> Option<Distribution> {
    let i = slot(dir as u32, hop as u32) as usize;
    let st = s.stats[i];
    if st.count == 0 {
        return None;
    }
    // A journey's own time is its hops' (per journey: per crossing times crossings per
    // journey); the turnaround slot counts its own directly.
    let own_ns = if hop == Hop::OneWay && dir != Dir::Turnaround {
        table_hops()
            .iter()
            .map(|h| {
                let hs = &s.stats[slot(dir as u32, *h as u32) as usize];
                let crossing = own::own_per_crossing_ns(hs, run_ns);
                crossing.min(hs.sum_ns as f64 / hs.count.max(1) as f64) * hs.count as f64
                    / st.count as f64
            })
            .sum()
    } else {
        own::own_per_crossing_ns(&st, run_ns).min(st.sum_ns as f64 / st.count as f64)
    };
    let own_us = own_ns / 1000.0;
    let mean_us = st.sum_ns as f64 / st.count as f64 / 1000.0;
    let p50_us = percentile_us(&s.hist[i], 50.0);
    Some(Distribution {
        count: st.count,
        mean_us,
        p50_us,
        p99_us: percentile_us(&s.hist[i], 99.0),
        own_us,
        compensated_mean_us: mean_us - own_us,
        compensated_p50_us: (p50_us - own_us).max(0.0),
    })
}

/// netpath's own µs per round trip in the client's gap, where its own time was measured.
fn edges_own_us(s: &Snapshot, run_ns: f64) -> Option<f64> {
    let (dir, hop) = netpath_common::CLIENT_GAP;
    let st = s.stats[slot(dir as u32, hop as u32) as usize];
    (st.own_count > 0).then(|| own::own_per_crossing_ns(&st, run_ns) / 1000.0)
}

/// Per direction: the one-way distribution and each hop's row, in path order.
fn hop_rows(snap: &Snapshot, run_ns: f64) -> (BTreeMap<&'static str, Distribution>, Vec<HopRow>) {
    let mut one_way = BTreeMap::new();
    let mut hops = Vec::new();
    for dir in [Dir::Request, Dir::Response] {
        let ow = distribution(snap, dir, Hop::OneWay, run_ns);
        let completed = ow.as_ref().map(|d| d.count).unwrap_or(0);
        let ow_comp = ow.as_ref().map(|d| d.compensated_mean_us).unwrap_or(0.0);
        if let Some(d) = ow {
            one_way.insert(dir.name(), d);
        }
        for hop in &table_hops() {
            let i = slot(dir as u32, *hop as u32) as usize;
            let st = snap.stats[i];
            if st.count == 0 {
                continue;
            }
            let per = |ns: f64, n: u64| if n > 0 { ns / n as f64 / 1000.0 } else { 0.0 };
            // netpath's own time is inside the hop: never more than the hop (the runs' cost is
            // an estimate and can exceed a small hop's).
            let own_crossing =
                own::own_per_crossing_ns(&st, run_ns).min(st.sum_ns as f64 / st.count as f64);
            let per_packet = per(st.sum_ns as f64, completed);
            let own_us = per(own_crossing * st.count as f64, completed);
            let p50_us = percentile_us(&snap.hist[i], 50.0);
            hops.push(HopRow {
                at: HopFigures {
                    hop: hop.name(),
                    dir: dir.name(),
                    crossings: st.count,
                    per_packet_us: per_packet,
                    mean_us: per(st.sum_ns as f64, st.count),
                    p50_us,
                    p99_us: percentile_us(&snap.hist[i], 99.0),
                    own_us,
                    stall_us: 0.0,
                },
                share_pct: if ow_comp > 0.0 {
                    (per_packet - own_us) / ow_comp * 100.0
                } else {
                    0.0
                },
                compensated_us: per_packet - own_us,
                compensated_p50_us: (p50_us - own_crossing / 1000.0).max(0.0),
            });
        }
    }
    (one_way, hops)
}

/// Packets per (receive passes, softirq runs) pair, per direction.
fn pass_rows(snap: &Snapshot) -> Vec<PassRow> {
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
    passes
}

fn drop_rows(
    drops: &[DropRecord],
    devices: &[Device],
    reasons: &BTreeMap<u32, String>,
) -> Vec<DropRow> {
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
    drop_rows
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
        .collect()
}

fn device_rows(snap: &Snapshot, devices: &[Device]) -> Vec<DeviceRow> {
    let tc_count = |ifindex: u32, egress: bool| {
        snap.tc
            .iter()
            .filter(|((i, e), _)| *i == ifindex && *e == egress)
            .map(|(_, (p, _))| *p)
            .sum()
    };
    devices
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
        .collect()
}

/// The tails the stall rule reads (`stalls`): the traced RTT, the journeys the check sums,
/// every hop.
fn tails(snap: &Snapshot, result: &RrResult) -> super::stalls::Tails {
    let tail = |dir: Dir, hop: Hop| {
        let i = slot(dir as u32, hop as u32) as usize;
        let h = &snap.hist[i];
        (!h.is_empty() && snap.stats[i].count > 0)
            .then(|| super::stalls::Tail::of(h, percentile_us(h, 50.0) * 1000.0))
    };
    let journeys = [Dir::Request, Dir::Response, Dir::Turnaround]
        .into_iter()
        .filter_map(|d| tail(d, Hop::OneWay))
        .collect();
    let hops = [Dir::Request, Dir::Response]
        .into_iter()
        .flat_map(|d| table_hops().into_iter().map(move |h| (d, h)))
        .filter_map(|(d, h)| tail(d, h).map(|t| (h.name(), d.name(), t)))
        .collect();
    super::stalls::Tails {
        rtt: Some(result.hist.clone()),
        journeys,
        hops,
    }
}

/// Sampled journeys the hop rows' path order is taken from.
const PATH_SAMPLES: usize = 64;

/// The record of one traced run (untraced figures and rounds: `set_rounds`).
pub fn build(t: &TracedRun) -> DriverReport {
    let (snap, devices) = (t.snap, t.devices);
    let traced_s = RttSummary::from_rr(t.result);
    let run_cost = t.tracer.run_cost;
    let (one_way, mut hops) = hop_rows(snap, run_cost.ns);
    // The packet's order, from the journeys sampled (more than are kept).
    let ordering: Vec<_> = t
        .samples
        .iter()
        .take(PATH_SAMPLES.max(t.keep_timelines))
        .map(|s| super::timeline(s, devices))
        .collect();
    super::timeline::sort_by_path(&mut hops, &ordering);
    let turnaround = distribution(snap, Dir::Turnaround, Hop::OneWay, run_cost.ns);
    let attributed = one_way.values().map(|d| d.mean_us).sum::<f64>()
        + turnaround.as_ref().map(|d| d.mean_us).unwrap_or(0.0);
    let backend = t.tracer.backend;
    DriverReport {
        rtt_cdf: rtt_cdf(t.result),
        driver: t.label.to_string(),
        backend: backend.name(),
        hops_visible: backend.visible_hops().iter().map(|h| h.name()).collect(),
        missing_tracepoints: t.tracer.missing.clone(),
        function_probes: t.tracer.fn_probes.clone(),
        uncounted: t.tracer.uncounted.clone(),
        probe_effect_mean_pct: None,
        probe_effect_p50_pct: None,
        probe_effect_below_noise: false,
        rtt_mean_us: traced_s.mean_us,
        unattributed_us: traced_s.mean_us - attributed,
        edges_own_us: edges_own_us(snap, run_cost.ns),
        attributed_pct: if traced_s.mean_us > 0.0 {
            attributed / traced_s.mean_us * 100.0
        } else {
            0.0
        },
        attributed_us: attributed,
        run_cost,
        consistency: None,
        traced: traced_s,
        untraced: None,
        hops,
        one_way,
        turnaround,
        lost: lost_counters(snap),
        passes: pass_rows(snap),
        drops: drop_rows(t.drops, devices, &t.tracer.drop_reasons),
        devices: device_rows(snap, devices),
        timelines: ordering.into_iter().take(t.keep_timelines).collect(),
        prog_costs: t.prog_costs.clone(),
        rounds: Vec::new(),
        rr: None,
        bulk: None,
        burst: Vec::new(),
        context: None,
        proto: t.rr.proto,
        wait: t.rr.wait,
        cpus: Default::default(),
        busy_poll_napi: t.result.napi_ids,
        placement: Some(Placement::of(t.samples)),
        machine: None,
        block: None,
        round_detail: Vec::new(),
        stalls: None,
        parts: Vec::new(),
        parts_via: String::new(),
        tails: tails(snap, t.result),
    }
}

impl DriverReport {
    /// The untraced rounds around this (the picked round's) traced run: the probe effect
    /// against the untraced run of the same round, and medians and spread over the rounds.
    /// `untraced`: each round's untraced twin of its traced run (the check's and the probe
    /// effect's); `sweep`: each round's untraced run taken beside the other paths' (the
    /// rounds' figures and ratios), or none (then the twins are).
    pub fn set_rounds(&mut self, untraced: &[RrResult], sweep: &[RrResult], pick: usize) {
        let of = if sweep.is_empty() { untraced } else { sweep };
        let rounds: Vec<RttSummary> = of.iter().map(RttSummary::from_rr).collect();
        if let Some(u) = untraced.get(pick) {
            let u = RttSummary::from_rr(u);
            let pct = |a: f64, b: f64| if b > 0.0 { (a / b - 1.0) * 100.0 } else { 0.0 };
            self.probe_effect_mean_pct = Some(pct(self.traced.mean_us, u.mean_us));
            self.probe_effect_p50_pct = Some(pct(self.traced.p50_us, u.p50_us));
            self.untraced = Some(u);
        }
        // The rounds' spread first: the check reads the noise of the untraced mean from it.
        self.rr = RrRounds::of(&rounds);
        let stalls = untraced
            .get(pick)
            .map(|u| super::stalls::of_round(&self.tails, &u.hist));
        self.consistency = own::consistency(self, self.run_cost.ns, stalls.as_ref());
        self.stalls = stalls;
        if let Some(s) = &self.stalls {
            self.hops.iter_mut().for_each(|h| h.at.set_stall(s));
        }
        self.probe_effect_below_noise = self
            .rr
            .as_ref()
            .is_some_and(|rr| self.traced.p50_us < rr.p50_us.min);
        self.rounds = rounds;
    }
}

/// Bulk throughput over rounds.
pub fn bulk_rounds(bulk: &[harness::BulkResult]) -> Option<BulkRounds> {
    let first = bulk.first()?;
    Some(BulkRounds {
        streams: first.per_stream.len(),
        gbit_per_s: Spread::of(bulk.iter().map(|b| b.gbit_per_s).collect()),
        retransmits: Spread::of(bulk.iter().map(|b| b.retransmits as f64).collect()),
        per_round: bulk.iter().flat_map(|b| b.per_stream.clone()).collect(),
    })
}

/// MTUs, device settings and the TCP counters' change over the whole measurement.
pub fn run_context(
    lab: &NetPath,
    before: (harness::NetCounters, harness::NetCounters),
    after: (harness::NetCounters, harness::NetCounters),
) -> RunContext {
    let devices = harness::device_context(lab).unwrap_or_default();
    let mtu_in = |ns: &str| {
        lab.devices
            .iter()
            .filter(|d| d.netns == ns && d.kind != netpath_common::DevKind::Loopback)
            .map(|d| d.mtu)
            .next()
            .or_else(|| lab.devices.iter().find(|d| d.netns == ns).map(|d| d.mtu))
            .unwrap_or(0)
    };
    RunContext {
        client_mtu: mtu_in(&lab.client_ns.name),
        server_mtu: mtu_in(&lab.server_ns.name),
        devices,
        client_counters: after.0.delta(&before.0),
        server_counters: after.1.delta(&before.1),
        wire: None,
    }
}

pub fn costs(
    before: &[(String, u64, u64)],
    after: &[(String, u64, u64)],
    rtts: u64,
) -> Vec<ProgCost> {
    let mut out: Vec<ProgCost> = after
        .iter()
        .filter_map(|(name, runs, ns)| {
            let (_, r0, n0) = before.iter().find(|(n, _, _)| n == name)?;
            let runs = runs.saturating_sub(*r0);
            (runs > 0).then(|| ProgCost {
                program: name.clone(),
                runs,
                avg_ns: ns.saturating_sub(*n0) as f64 / runs as f64,
                runs_per_rtt: runs as f64 / rtts.max(1) as f64,
            })
        })
        .collect();
    out.sort_by(|a, b| a.program.cmp(&b.program));
    out
}
