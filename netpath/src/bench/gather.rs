//! One driver's bench rounds, gathered: the latency side (sockperf, netpath per wait mode, the
//! naive bpftrace script), the throughput side (iperf3, netpath's bulk three ways) and the
//! kernel cost run after them.

use super::*;

/// The latency side of a driver's rounds: sockperf, netpath's runs per wait mode, and the same
/// under a naive bpftrace script when bpftrace is installed.
pub(super) struct LatencyRounds {
    bpftrace: Option<PathBuf>,
    naive: NaiveTracer,
    naive_runs: Rounds<Rtt>,
    naive_ratios: Rounds<Ratios>,
    pub(super) sockperf: Rounds<Rtt>,
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
                runs: None,
                vs_untraced: None,
            },
            bpftrace,
            naive_runs: Rounds::default(),
            naive_ratios: Rounds::default(),
            sockperf: Rounds::default(),
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
                    self.naive_runs.push(r);
                }
                Err(e) => self.naive.status = format!("failed: {e:#}"),
            }
        }
        Ok(())
    }

    /// The per-round ratios over the rounds.
    pub(super) fn finish(self) -> (Latency, NaiveTracer) {
        let Self {
            mut naive,
            naive_runs,
            naive_ratios,
            sockperf,
            mut block,
            mut spin,
            ..
        } = self;
        block.finish();
        spin.finish();
        if !naive_runs.rounds.is_empty() {
            naive.runs = Some(naive_runs);
            naive.vs_untraced = Some(naive_ratios);
        }
        let diff = Rounds::pairwise(&block.traced, &block.untraced, |t, u| t.p50_us - u.p50_us);
        let latency = Latency {
            traced_minus_untraced_p50_us: diff.median,
            netpath_vs_sockperf: block.untraced.vs(&sockperf),
            sockperf,
            block,
            spin,
        };
        (latency, naive)
    }
}

/// The throughput side of a driver's rounds: iperf3, and netpath's bulk untraced, with the
/// probes attached, and traced.
#[derive(Default)]
pub(super) struct BulkRounds {
    pub(super) iperf3: Rounds<Bulk>,
    untraced: Rounds<Bulk>,
    attached: Rounds<Bulk>,
    traced: Rounds<Bulk>,
    /// Whether every traced run found its threads (false once one did not).
    threads_missed: bool,
    events: Rounds<f64>,
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
                    self.events.push(ev as f64);
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
        Throughput {
            netpath_vs_iperf3: self.untraced.vs(&self.iperf3),
            attached_vs_untraced: self.attached.vs(&self.untraced),
            traced_vs_untraced: self.traced.vs(&self.untraced),
            traced_threads_found: !self.threads_missed,
            traced_hop_events: self.events,
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
    let runs_per_rtt: f64 = programs.iter().map(|p| p.runs_per_rtt).sum();
    let body_ns_per_rtt = ns_per_rtt - floor_ns * runs_per_rtt;
    let spin = &latency.spin;
    let dispatch_ns_per_rtt = 1000.0 * (spin.empty.median.p50_us - spin.untraced.median.p50_us);
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
        requests: rr.load.requests,
        round_trips: costed.count,
        journeys_sent: 2 * costed.count,
        journeys_completed: counters[netpath_common::counter::COMPLETED as usize],
        losses: crate::record::losses(&counters),
        share_of_untraced_p50: ns_per_rtt / 1000.0 / latency.block.untraced.median.p50_us,
        share_of_untraced_mean: ns_per_rtt / 1000.0 / latency.block.untraced.median.mean_us,
        ns_per_rtt,
        body_ns_per_rtt,
        dispatch_ns_per_rtt,
        cpu_ns_per_rtt: body_ns_per_rtt + dispatch_ns_per_rtt,
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
