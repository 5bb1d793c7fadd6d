//! `netpath tune`'s command line: the flags it shares with `compare` (traffic and run mode),
//! the knob, and what it prints.

use anyhow::Result;

use crate::cli::bounds;
use crate::driver::Driver;
use crate::harness::{BulkConfig, Proto, RrConfig};
use crate::measure::compare::CompareOptions;
use crate::probe::backend;
use crate::probe::tracer::TracerOptions;
use crate::tune::knobs::{self, Knob};

/// One driver with a knob at two settings, A against B, interleaved in one run.
///
/// Per figure (RTT, bulk, per hop) the difference, its spread over rounds, and whether it is
/// noise.
#[derive(clap::Args)]
#[command(after_help = EXAMPLES)]
pub struct TuneArgs {
    /// The driver whose lab is built twice, once per setting.
    #[arg(long, short = 'd', default_value = "bridge")]
    pub driver: Driver,
    /// NAME[=A,B]: rps (HEX mask|all|off), gro, tso, gso (on|off), mtu (68-65535), qdisc
    /// (noqueue|pfifo_fast|pfifo|fq|fq_codel), conntrack (notrack|track), proxy (on|off: docker-proxy or DNAT),
    /// nodelay (on|off), wait (block|spin|busy-poll), cpus (same|split|auto|N|N,M; write
    /// A/B when a setting holds a comma). Without values: gro=on,off, mtu=9000,1500,
    /// qdisc=pfifo_fast,noqueue, nodelay=off,on, wait=block,spin, cpus=same,split, …
    #[arg(long)]
    pub knob: String,
    /// Rounds, each measuring A and B in turn (order reversed every other round; 1-100).
    #[arg(long, default_value_t = 3, value_parser = bounds::rounds())]
    pub rounds: usize,
    /// Measured requests per run (1-1000000; default 10000, 200 for nodelay, whose Nagle
    /// side waits for the delayed ACK on every request).
    #[arg(long, short = 'n', value_parser = bounds::requests())]
    pub requests: Option<u64>,
    /// Unmeasured warm-up requests (0-100000; default 1000, 10 for nodelay).
    #[arg(long, value_parser = bounds::warmup())]
    pub warmup: Option<u64>,
    /// What both sides' request/response runs send: tcp, udp (one datagram each way) or icmp
    /// (echo request and reply). Bulk is TCP only: with udp or icmp none runs.
    #[arg(long, value_enum, default_value = "tcp")]
    pub proto: Proto,
    /// Bulk transfer per round and side, e.g. 2s (0: none; default 2s, 0 for nodelay; at
    /// most 10m).
    #[arg(long, value_name = "DURATION", alias = "bulk-secs", value_parser = bounds::phase())]
    pub bulk: Option<std::time::Duration>,
    #[command(flatten)]
    pub mode: crate::cli::args::RunModeArgs,
    /// Keep the full timeline of one packet in N (0: none; at most 1000000).
    #[arg(long, default_value_t = 64, value_parser = bounds::sample_every(), help_heading = super::args::TRACING)]
    pub sample_every: u32,
    #[command(flatten, next_help_heading = super::args::TRACING)]
    pub backend: super::args::BackendArg,
    #[command(flatten, next_help_heading = super::args::OUTPUT)]
    pub output: crate::render::OutputArgs,
}

impl super::Command for TuneArgs {
    /// Everything the user can get wrong is said before anything is built.
    fn run(self) -> Result<()> {
        let args = self;
        super::require_root()?;
        let spec = knobs::parse(&args.knob)?;
        knobs::check_driver(&spec, args.driver)?;
        knobs::check_proto(&spec, args.driver, args.proto)?;
        let mode = args.mode.resolve()?;
        knobs::check_kernel(&spec)?;
        crate::lab::install_signal_cleanup();
        crate::sys::btf::require()?;
        crate::render::progress::enable(args.output.is_text());
        let caps = crate::probe::doctor::probe()?;
        let backend = backend::select(args.backend.backend, &caps)?;
        let nagle = spec.knob == Knob::Nodelay;
        let requests = args.requests.unwrap_or(if nagle { 200 } else { 10_000 });
        let warmup = args.warmup.unwrap_or(if nagle { 10 } else { 1_000 });
        let bulk = args
            .bulk
            .unwrap_or(std::time::Duration::from_secs(if nagle { 0 } else { 2 }));
        let mut opts = CompareOptions {
            drivers: vec![args.driver],
            protos: Vec::new(),
            rr: RrConfig {
                requests,
                warmup,
                ..RrConfig::default()
            },
            untraced: true,
            tracer: TracerOptions {
                sample_every: args.sample_every,
                ..TracerOptions::default()
            },
            tc_counters: false,
            keep_timelines: 2,
            rounds: args.rounds,
            bulk: (!bulk.is_zero()).then(|| BulkConfig {
                duration: bulk,
                ..Default::default()
            }),
            burst: None,
            underlay: None,
            mode,
        };
        opts.set_protos(&[args.proto])?;
        if args.output.is_text() {
            crate::render::tune::start_line(backend, &spec, args.driver, args.proto);
        }
        let text = args.output.is_text();
        let mut on_applied = |label: &str, ap: &crate::tune::devices::Applied| {
            if text {
                crate::render::tune::applied(label, ap);
            }
        };
        let r = crate::tune::run(backend, args.driver, &spec, &opts, &mut on_applied)?;
        crate::render::emit(args.output.format(), Some(backend.name()), &r)
    }
}

/// `tune --help` ends with these.
const EXAMPLES: &str = "EXAMPLES:
    netpath tune -d bridge --knob gro --rounds 5     veth GRO on vs off, interleaved, with the noise
    netpath tune -d bridge --knob nodelay            Nagle and the delayed ACK on a two-write request
    netpath tune -d bridge --knob wait=block,spin    the receiver's wakeup, A/B
    netpath tune -d overlay --knob mtu=9000,1500 --bulk 5s";
