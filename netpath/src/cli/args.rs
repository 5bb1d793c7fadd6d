//! The flag groups commands share: `compare`'s traffic, placement and tracing flags (also
//! `diff -d A --vs B`'s, turned into the same `CompareOptions`), `--wait`/`--cpus` (also
//! `tune`'s), `--backend`, and the help headings they are shown under.
use std::time::Duration;

use anyhow::Result;

use crate::sys::runmode::RunMode;
use crate::{
    cli::bounds,
    driver::Driver,
    harness::{self, Cpus, Proto, RrLoad, WaitMode},
    lab::netem::WireDelay,
    measure::compare::CompareOptions,
    probe::backend::BackendChoice,
    probe::tracer::TracerOptions,
};

/// The help headings flags are grouped under.
pub const TRAFFIC: &str = "Traffic";
pub const PLACEMENT: &str = "Placement";
pub const TRACING: &str = "Tracing";
pub const DOCKER: &str = "Docker";
pub const OUTPUT: &str = "Output";

#[derive(Clone, Debug, PartialEq, clap::Args)]
#[command(next_help_heading = TRAFFIC)]
pub struct TrafficArgs {
    /// Interleaved rounds (each visits every driver in turn, untraced and traced runs
    /// alternating, order reversed every other round; medians, spread and per-round ratios;
    /// 1-100).
    #[arg(long, default_value_t = 5, value_parser = bounds::rounds())]
    pub rounds: usize,
    /// Bulk transfer per round, after the request/response rounds, e.g. 2s or 500ms (0: no
    /// bulk; at most 10m).
    #[arg(long, value_name = "DURATION", default_value = "1s", value_parser = bounds::phase(), alias = "bulk-secs")]
    pub bulk: Duration,
    /// Parallel bulk streams (1-256).
    #[arg(long, default_value_t = 1, value_parser = bounds::streams())]
    pub streams: usize,
    /// Open-loop request rate for the burst phases, then twice it (0: no burst; at most
    /// 100000 per second).
    #[arg(long, default_value_t = 2000.0, value_parser = bounds::float(bounds::BURST_RATE))]
    pub burst: f64,
    /// Each burst phase, e.g. 1s (more than 0, at most 10m).
    #[arg(long, value_name = "DURATION", default_value = "1s", value_parser = bounds::phase_nonzero(), alias = "burst-secs")]
    pub burst_duration: Duration,
    /// Measured requests per run (1-1000000).
    #[arg(long, short = 'n', default_value_t = bounds::REQUESTS, value_parser = bounds::requests())]
    pub requests: u64,
    /// Unmeasured warm-up requests (0-100000).
    #[arg(long, default_value_t = 1_000, value_parser = bounds::warmup())]
    pub warmup: u64,
    /// Request payload in bytes (1 to 1048576).
    #[arg(long, default_value_t = 1024, value_parser = bounds::payload())]
    pub req_size: usize,
    /// Response payload in bytes (1 to 1048576).
    #[arg(long, default_value_t = 1024, value_parser = bounds::payload())]
    pub resp_size: usize,
    #[command(flatten)]
    pub mode: RunModeArgs,
    #[command(flatten)]
    pub tracing: TracingArgs,
}

/// What is traced and how: the flags every measuring command shares.
#[derive(Clone, Debug, PartialEq, clap::Args)]
#[command(next_help_heading = TRACING)]
pub struct TracingArgs {
    /// Skip the untraced run (no probe-effect figure).
    #[arg(long)]
    pub no_untraced: bool,
    /// Sample one journey in N (its full timeline kept; 0: none, 1: every one; at most
    /// 1000000).
    #[arg(long, value_name = "N", default_value_t = 64, value_parser = bounds::sample_every())]
    pub sample_every: u32,
    #[command(flatten)]
    pub backend: BackendArg,
    /// Attach TC ingress/egress packet counters to every lab device as a cross-check.
    #[arg(long)]
    pub tc_counters: bool,
    #[arg(long, help = PARTS_HELP)]
    pub parts: bool,
    #[arg(long, help = PROG_STATS_HELP)]
    pub prog_stats: bool,
}

/// `--parts`: one text wherever it is (here, `tune`, `trace`).
pub const PARTS_HELP: &str = "Split hops into their netfilter parts: programs linked before and after the base chains \
     of each hook in each namespace of the path time each table's chains and conntrack on the \
     followed packets, and each transmit's qdisc (named from netlink) from queue to driver; \
     shown under their hops and in timelines; tune and diff rank their differences (kernel 6.4+; \
     before, function probes on nft_do_chain, conntrack and NAT with --backend kprobe or fentry)";

/// `--prog-stats`: one text wherever it is (here and `serve`).
pub const PROG_STATS_HELP: &str = "Each kernel program's run count and mean cost (the kernel's BPF statistics, turned on \
     for the run: two clock reads more per run of every BPF program on the machine; serve \
     exports them as netpath_bpf_program_*)";

/// `--backend`, one description for every command that loads the probes.
#[derive(Clone, Copy, Debug, PartialEq, clap::Args)]
pub struct BackendArg {
    /// Which probes to attach: auto (the best this kernel allows, see `netpath doctor`),
    /// tracepoint (portable), kprobe or fentry (function probes, where the kernel has them).
    #[arg(long, value_enum, default_value_t = BackendChoice::Auto)]
    pub backend: BackendChoice,
}

/// `--wait` and `--cpus`, shared by every command that runs request/response traffic.
#[derive(Clone, Debug, PartialEq, clap::Args)]
#[command(next_help_heading = PLACEMENT)]
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
    /// How CPUs may idle while netpath measures: poll keeps them out of idle states (CPU
    /// latency QoS held at 0 µs, as latency-tuned hosts do: a blocked receiver wakes on a warm
    /// CPU); deep lets them idle as this machine does (a blocking wakeup then pays the CPU's
    /// idle exit, tens of µs on a virtual CPU). Released when netpath exits, however it exits.
    #[arg(long, value_enum, default_value_t = crate::sys::pmqos::Idle::Poll)]
    pub idle: crate::sys::pmqos::Idle,
}

impl RunModeArgs {
    /// Checked against this machine's CPUs before anything is built.
    pub fn resolve(&self) -> Result<RunMode> {
        Ok(RunMode {
            wait: self.wait.unwrap_or_default(),
            also_block: self.wait.is_none(),
            cpus: self.cpus,
            pin: self.cpus.resolve()?,
            idle: self.idle,
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
        Ok(CompareOptions {
            drivers,
            protos: vec![Proto::Tcp],
            rounds: self.rounds,
            bulk: (!self.bulk.is_zero()).then(|| harness::BulkConfig {
                streams: self.streams.max(1),
                duration: self.bulk,
                ..Default::default()
            }),
            burst: (self.burst > 0.0).then(|| {
                (
                    harness::BurstConfig {
                        rate: self.burst,
                        duration: self.burst_duration,
                        req_size: self.req_size,
                        resp_size: self.resp_size,
                        ..Default::default()
                    },
                    vec![1.0, 2.0],
                )
            }),
            rr: RrLoad {
                requests: self.requests,
                warmup: self.warmup,
                req_size: self.req_size,
                resp_size: self.resp_size,
                ..RrLoad::default()
            },
            untraced: !self.tracing.no_untraced,
            tracer: TracerOptions {
                sample_every: self.tracing.sample_every,
                prog_stats: self.tracing.prog_stats,
                ..TracerOptions::default()
            },
            tc_counters: self.tracing.tc_counters,
            parts: self.tracing.parts,
            keep_timelines: 4,
            underlay,
            mode,
        })
    }
}
