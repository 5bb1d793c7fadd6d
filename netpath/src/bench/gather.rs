//! One driver's bench rounds, gathered: the latency side (sockperf, netpath per wait mode, the
//! naive bpftrace script), the throughput side (iperf3, netpath's bulk three ways) and the
//! kernel cost run after them.

use super::*;

/// The latency side of a driver's rounds: sockperf, netpath's runs per wait mode, and the same
/// under a naive bpftrace script when bpftrace is installed.
pub(super) struct LatencyRounds {
    bpftrace: Option<PathBuf>,
    naive: NaiveTracer,
    naive_ratios: Vec<Ratios>,
    pub(super) sockperf: Vec<Rtt>,
    block: ModeLatency,
    spin: ModeLatency,
}

impl LatencyRounds {
    pub(super) fn new(bpftrace: Option<PathBuf>) -> Self {
        Self {
            naive: NaiveTracer {
                status: if bpftrace.is_some() {
                    "ran".into()
                } else {
                    "not installed".into()
                },
                script: NAIVE_SCRIPT.trim().to_string(),
                runs: Vec::new(),
                median: None,
                vs_untraced: None,
            },
            bpftrace,
            naive_ratios: Vec::new(),
            sockperf: Vec::new(),
            block: ModeLatency::new(WaitMode::Block, Cpus::Auto),
            spin: ModeLatency::new(WaitMode::Spin, Cpus::Split),
        }
    }

    pub(super) fn round(
        &mut self,
        tracer: &mut Tracer,
        lab: &NetPath,
        rr: &RrConfig,
        round: usize,
    ) -> Result<()> {
        self.block.round(tracer, lab, rr, round)?;
        self.spin.round(tracer, lab, rr, round)?;
        if let Some(bin) = &self.bpftrace
            && self.naive.status == "ran"
        {
            match rr_under_bpftrace(bin, lab, rr) {
                Ok(r) => {
                    let r = Rtt::of(&r);
                    self.naive_ratios
                        .push(Ratios::of(&r, self.block.untraced.last().unwrap()));
                    self.naive.runs.push(r);
                }
                Err(e) => self.naive.status = format!("failed: {e:#}"),
            }
        }
        Ok(())
    }

    /// Medians and per-round ratios over the rounds.
    pub(super) fn finish(self) -> (Latency, NaiveTracer) {
        let Self {
            mut naive,
            naive_ratios,
            sockperf: sp,
            mut block,
            mut spin,
            ..
        } = self;
        block.finish();
        spin.finish();
        let (un, tr) = (block.untraced.clone(), block.traced.clone());
        let med = |v: &[Rtt]| Rtt::median(v);
        let vs_sp: Vec<Ratios> = un.iter().zip(&sp).map(|(u, s)| Ratios::of(u, s)).collect();
        let vs_un: Vec<Ratios> = tr.iter().zip(&un).map(|(t, u)| Ratios::of(t, u)).collect();
        if !naive.runs.is_empty() {
            naive.median = Some(med(&naive.runs));
            naive.vs_untraced = Some(Ratios::median(&naive_ratios));
        }
        let diff = median(tr.iter().zip(&un).map(|(t, u)| t.p50_us - u.p50_us));
        let latency = Latency {
            traced_minus_untraced_p50_us: diff,
            netpath_vs_sockperf_rounds: vs_sp.clone(),
            traced_vs_untraced_rounds: vs_un.clone(),
            sockperf_median: med(&sp),
            untraced_median: med(&un),
            traced_median: med(&tr),
            netpath_vs_sockperf: Ratios::median(&vs_sp),
            traced_vs_untraced: Ratios::median(&vs_un),
            hop_events_per_rtt: block.hop_events_per_rtt,
            block,
            spin,
            sockperf: sp,
            untraced: un,
            traced: tr,
        };
        (latency, naive)
    }
}

/// The throughput side of a driver's rounds: iperf3, and netpath's bulk untraced, with the
/// probes attached, and traced.
#[derive(Default)]
pub(super) struct BulkRounds {
    pub(super) iperf3: Vec<Bulk>,
    untraced: Vec<Bulk>,
    attached: Vec<Bulk>,
    traced: Vec<Bulk>,
    /// Whether every traced run found its threads (false once one did not).
    threads_missed: bool,
    events: Vec<u64>,
}

impl BulkRounds {
    /// netpath's three bulk runs of one round, their order rotated per round.
    pub(super) fn round(
        &mut self,
        tracer: &mut Tracer,
        lab: &NetPath,
        bulk: &BulkConfig,
        round: usize,
    ) -> Result<()> {
        let order = modes::rotated::<3>(round);
        let mut got: [Option<Bulk>; 3] = [None; 3];
        for k in order {
            got[k as usize] = Some(match k {
                0 => bulk_of(&harness::run_bulk(lab, bulk).context("untraced bulk")?),
                1 => {
                    tracer.reset()?;
                    tracer.attach()?;
                    let r = harness::run_bulk(lab, bulk);
                    tracer.detach()?;
                    bulk_of(&r.context("bulk with probes attached")?)
                }
                _ => {
                    let (r, found, ev) = bulk_traced(tracer, lab, bulk)?;
                    self.threads_missed |= !found;
                    self.events.push(ev);
                    r
                }
            });
        }
        self.untraced.push(got[0].unwrap());
        self.attached.push(got[1].unwrap());
        self.traced.push(got[2].unwrap());
        Ok(())
    }

    pub(super) fn finish(self) -> Throughput {
        let gbit = |v: &[Bulk]| median(v.iter().map(|b| b.gbit_per_s));
        let ratios = |a: &[Bulk], b: &[Bulk]| -> Vec<f64> {
            a.iter()
                .zip(b)
                .map(|(a, b)| a.gbit_per_s / b.gbit_per_s)
                .collect()
        };
        let ratio = |a: &[Bulk], b: &[Bulk]| median(ratios(a, b).into_iter());
        let (ip, bu, ba, bt) = (&self.iperf3, &self.untraced, &self.attached, &self.traced);
        Throughput {
            iperf3_median_gbit: gbit(ip),
            untraced_median_gbit: gbit(bu),
            attached_median_gbit: gbit(ba),
            traced_median_gbit: gbit(bt),
            netpath_vs_iperf3: ratio(bu, ip),
            attached_vs_untraced: ratio(ba, bu),
            traced_vs_untraced: ratio(bt, bu),
            netpath_vs_iperf3_rounds: ratios(bu, ip),
            attached_vs_untraced_rounds: ratios(ba, bu),
            traced_vs_untraced_rounds: ratios(bt, bu),
            traced_threads_found: !self.threads_missed,
            traced_hop_events: median(self.events.iter().map(|&e| e as f64)),
            traced_hop_events_rounds: self.events,
            iperf3: self.iperf3,
            untraced: self.untraced,
            attached: self.attached,
            traced: self.traced,
        }
    }
}

/// Kernel cost: one traced run with BPF run-time statistics on (the floor program, empty, on
/// net_dev_queue, runs beside the others in it), then the programs' cost on traffic netpath
/// does not follow.
pub(super) fn kernel_cost(
    tracer: &mut Tracer,
    lab: &NetPath,
    rr: &RrConfig,
    latency: &Latency,
    opts: &BenchOptions,
) -> Result<KernelCost> {
    let stats = aya::sys::enable_stats(aya::sys::Stats::RunTime)
        .context("enabling BPF run-time statistics")?;
    let before = tracer.prog_costs();
    let costed = rr_traced(tracer, lab, rr, true);
    let after = tracer.prog_costs();
    drop(stats);
    let (costed, _) = costed?;
    let counters = tracer.snapshot()?.counters;
    let costs = split_floors(prog_costs(&before, &after, costed.count));
    let floor_ns = costs.floor_ns();
    let programs = &costs.programs;
    let ns_per_rtt: f64 = programs.iter().map(|p| p.avg_ns * p.runs_per_rtt).sum();
    let hot = || programs.iter().filter(|p| p.runs_per_rtt >= 1.0);
    let hot_ns_per_event = weighted_ns(hot());
    let hot_over_floors_ns = costs.over_floors_ns(hot());
    progress(
        opts,
        &format!("{}: program costs on traffic not followed", lab.driver),
    );
    let untracked = untracked_costs(tracer, lab, rr)?;
    Ok(KernelCost {
        rtt: Rtt::of(&costed),
        requests: rr.requests,
        round_trips: costed.count,
        journeys_sent: 2 * costed.count,
        journeys_completed: counters[netpath_common::counter::COMPLETED as usize],
        losses: crate::record::losses(&counters),
        share_of_untraced_p50: ns_per_rtt / 1000.0 / latency.untraced_median.p50_us,
        share_of_untraced_mean: ns_per_rtt / 1000.0 / latency.untraced_median.mean_us,
        ns_per_rtt,
        floor_ns,
        hot_ns_per_event,
        hot_over_floors_ns,
        untracked_ns_per_run: weighted_ns(untracked.programs.iter()),
        untracked_floor_ns: untracked.floor_ns(),
        untracked_over_floors_ns: untracked.over_floors_ns(untracked.programs.iter()),
        programs: costs.programs,
        floors: costs.floors,
        untracked_programs: untracked.programs,
        untracked_floors: untracked.floors,
    })
}
