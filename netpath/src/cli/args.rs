//! `compare`'s traffic, mode and tracing flags, shared by every command that measures drivers
//! in interleaved rounds (`compare`, `diff -d A --vs B`), so they take the same flags with the
//! same bounds and defaults, and turn them into the same `CompareOptions`.
use anyhow::Result;

use crate::{
    cli::bounds,
    driver::Driver,
    harness::{self, Cpus, Proto, RrConfig, WaitMode, runmode::RunMode},
    lab::netem::WireDelay,
    measure::compare::CompareOptions,
    probe::backend::BackendChoice,
    probe::tracer::TracerOptions,
};

#[derive(Clone, Debug, PartialEq, clap::Args)]
pub struct TrafficArgs {
    /// Rounds: each visits every driver in turn (untraced and traced runs alternating,
    /// order reversed every other round); medians, spread and per-round ratios (1-100).
    #[arg(long, default_value_t = 3, value_parser = bounds::int(bounds::ROUNDS))]
    pub rounds: usize,
    /// Seconds of bulk transfer per round (0: no bulk; at most 600).
    #[arg(long, default_value_t = 2.0, value_parser = bounds::float(bounds::PHASE_SECS))]
    pub bulk_secs: f64,
    /// Parallel bulk streams (1-256).
    #[arg(long, default_value_t = 1, value_parser = bounds::int(bounds::STREAMS))]
    pub streams: usize,
    /// Open-loop request rate for the burst phases, then twice it (0: no burst; at most
    /// 100000 per second).
    #[arg(long, default_value_t = 2000.0, value_parser = bounds::float(bounds::BURST_RATE))]
    pub burst: f64,
    /// Seconds per burst phase (more than 0, at most 600).
    #[arg(long, default_value_t = 1.0, value_parser = bounds::phase_secs_nonzero)]
    pub burst_secs: f64,
    /// Measured requests per run (1-1000000).
    #[arg(long, short = 'n', default_value_t = 10_000, value_parser = bounds::int(bounds::REQUESTS))]
    pub requests: u64,
    /// Unmeasured warm-up requests (0-100000).
    #[arg(long, default_value_t = 1_000, value_parser = bounds::int(bounds::WARMUP))]
    pub warmup: u64,
    /// Request payload in bytes (1 to 1048576).
    #[arg(long, default_value_t = 1024, value_parser = bounds::int(bounds::PAYLOAD))]
    pub req_size: usize,
    /// Response payload in bytes (1 to 1048576).
    #[arg(long, default_value_t = 1024, value_parser = bounds::int(bounds::PAYLOAD))]
    pub resp_size: usize,
    #[command(flatten)]
    pub mode: RunModeArgs,
    /// Skip the untraced run (no probe-effect figure).
    #[arg(long)]
    pub no_untraced: bool,
    /// Keep the full timeline of one packet in N (0: none, 1: every packet; at most 1000000).
    #[arg(long, default_value_t = 64, value_parser = bounds::int(bounds::SAMPLE_EVERY))]
    pub sample_every: u32,
    #[arg(long, value_enum, default_value_t = BackendChoice::Auto)]
    pub backend: BackendChoice,
    /// Attach TC ingress/egress packet counters to every lab device as a cross-check.
    #[arg(long)]
    pub tc_counters: bool,
    /// Report each kernel program's run count and mean cost (BPF run-time stats).
    #[arg(long)]
    pub prog_stats: bool,
}

/// `--wait` and `--cpus`, shared by every command that runs request/response traffic.
#[derive(Clone, Debug, PartialEq, clap::Args)]
pub struct RunModeArgs {
    /// How receivers wait: block (what an application sees), spin (non-blocking receives in a
    /// loop: the data path without the scheduler), busy-poll (SO_BUSY_POLL on netpath's own
    /// sockets). Default: hop tables and ratios from spin, plus a block RTT line with its wakeup.
    #[arg(long, value_enum)]
    pub wait: Option<WaitMode>,
    /// Where client and server threads run: same (one CPU), split (two CPUs), auto (the
    /// scheduler decides), N (both on CPU N) or N,M (client on N, server on M).
    #[arg(long, default_value = "split")]
    pub cpus: Cpus,
}

impl RunModeArgs {
    /// Checked against this machine's CPUs before anything is built.
    pub fn resolve(&self) -> Result<RunMode> {
        Ok(RunMode {
            wait: self.wait.unwrap_or_default(),
            block_line: self.wait.is_none(),
            cpus: self.cpus,
            pin: self.cpus.resolve()?,
        })
    }
}

/// The flags alone, to read their defaults.
#[derive(clap::Parser)]
struct Defaults {
    #[command(flatten)]
    traffic: TrafficArgs,
}

impl TrafficArgs {
    /// No flag was given a value other than its default (a command reading saved results
    /// refuses flags it would ignore).
    pub fn is_default(&self) -> bool {
        use clap::Parser as _;
        Defaults::try_parse_from(["netpath"]).is_ok_and(|d| &d.traffic == self)
    }

    /// The options of a run over `drivers`; the placement is checked against this machine's
    /// CPUs here, before anything is loaded or built.
    pub fn options(
        &self,
        drivers: Vec<Driver>,
        underlay: Option<WireDelay>,
    ) -> Result<CompareOptions> {
        let mode = self.mode.resolve()?;
        let secs = |s: f64| std::time::Duration::from_secs_f64(s.max(0.0));
        Ok(CompareOptions {
            drivers,
            protos: vec![Proto::Tcp],
            rounds: self.rounds,
            bulk: (self.bulk_secs > 0.0).then(|| harness::BulkConfig {
                streams: self.streams.max(1),
                duration: secs(self.bulk_secs),
                ..Default::default()
            }),
            burst: (self.burst > 0.0).then(|| {
                (
                    harness::BurstConfig {
                        rate: self.burst,
                        duration: secs(self.burst_secs),
                        req_size: self.req_size,
                        resp_size: self.resp_size,
                        ..Default::default()
                    },
                    vec![1.0, 2.0],
                )
            }),
            rr: RrConfig {
                requests: self.requests,
                warmup: self.warmup,
                req_size: self.req_size,
                resp_size: self.resp_size,
                ..RrConfig::default()
            },
            untraced: !self.no_untraced,
            tracer: TracerOptions {
                sample_every: self.sample_every,
                prog_stats: self.prog_stats,
                ..TracerOptions::default()
            },
            tc_counters: self.tc_counters,
            keep_timelines: 4,
            underlay,
            mode,
        })
    }
}
