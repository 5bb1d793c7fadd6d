//! `netpath tune`'s command line: the flags it shares with `compare` (traffic and run mode),
//! the knob, and what it prints.

use anyhow::Result;

use crate::cli::bounds;
use crate::driver::Driver;
use crate::harness::{BulkConfig, Proto, RrLoad};
use crate::measure::compare::CompareOptions;
use crate::probe::tracer::TracerOptions;
use crate::tune::knobs::{self, Knob};
use crate::tune::outside::{Commands, RunIn};

/// The help heading of `--apply` and its companions.
const CHANGE: &str = "Outside change";

/// One driver with a knob at two settings, or one path with an outside change applied and
/// reverted, A against B, interleaved in one run.
///
/// Per figure (RTT, bulk, per hop) the difference, its spread over rounds, and whether it is
/// noise.
#[derive(clap::Args)]
#[command(after_help = EXAMPLES)]
pub struct TuneArgs {
    /// Drivers, comma-separated (tune takes one, whose lab is built twice for a knob, once
    /// per setting, once for --apply; default: bridge).
    #[arg(long, short = 'd', value_name = "DRIVER", value_delimiter = ',')]
    pub driver: Vec<Driver>,
    /// NAME[=A,B]: rps (HEX mask|all|off), gro, tso, gso (on|off), mtu (68-65535), qdisc
    /// (noqueue|pfifo_fast|pfifo|fq|fq_codel), conntrack (notrack|track), proxy (on|off: docker-proxy or DNAT),
    /// nodelay (on|off), wait (block|spin|busy-poll), cpus (same|split|auto|N|N,M; write
    /// A/B when a setting holds a comma). Without values: gro=on,off, mtu=9000,1500,
    /// qdisc=pfifo_fast,noqueue, nodelay=off,on, wait=block,spin, cpus=same,split, … (this
    /// or --apply is required)
    #[arg(long, required_unless_present = "apply", conflicts_with = "apply")]
    pub knob: Option<String>,
    /// A change of your own, side A: this shell command (`sh -c`) runs before A's turns,
    /// whenever the run moves from B to A; the machine is in B's state before the run.
    /// The path's names are in its environment (NP_…, listed below; default: none, --knob).
    #[arg(long, value_name = "CMD", requires = "revert", help_heading = CHANGE)]
    pub apply: Option<String>,
    /// Undoes --apply (side B): runs before B's turns whenever the run moves from A to B, and
    /// whatever ends the run (its end, an error, a failing --apply, Ctrl-C, SIGTERM, a panic)
    /// if the change is in place (required with --apply).
    #[arg(long, value_name = "CMD", requires = "apply", help_heading = CHANGE)]
    pub revert: Option<String>,
    /// The network namespace --apply and --revert run in: host (netpath's own), or the
    /// path's client, server or node.
    #[arg(long, value_enum, default_value = "host", requires = "apply", help_heading = CHANGE)]
    pub commands_in: RunIn,
    /// Measure between two running containers instead (client in the first, server in the
    /// second; Docker's or any runtime's, as `compare --between`; with --apply only).
    #[arg(long, num_args = 2, value_names = ["CLIENT", "SERVER"], requires = "apply", conflicts_with = "driver", help_heading = CHANGE)]
    pub between: Vec<String>,
    /// Interleaved rounds (each measures A and B in turn, order reversed every other round;
    /// 1-100).
    #[arg(long, default_value_t = 3, value_parser = bounds::rounds())]
    pub rounds: usize,
    /// Measured requests per run (1-1000000; default 10000, 200 for nodelay, whose Nagle
    /// side waits for the delayed ACK on every request).
    #[arg(long, short = 'n', value_parser = bounds::requests())]
    pub requests: Option<u64>,
    /// Unmeasured warm-up requests (0-100000; default 1000, 10 for nodelay).
    #[arg(long, value_parser = bounds::warmup())]
    pub warmup: Option<u64>,
    /// What the request/response runs send (both sides'; tune takes one): tcp, udp (one
    /// datagram each way) or icmp (echo request and reply). Bulk is TCP only: with udp or
    /// icmp none runs.
    #[arg(long, value_enum, value_delimiter = ',', default_value = "tcp")]
    pub proto: Vec<Proto>,
    /// Bulk transfer per round, after the request/response rounds, e.g. 2s, per side (0:
    /// none; default 2s, 0 for nodelay; at most 10m).
    #[arg(long, value_name = "DURATION", alias = "bulk-secs", value_parser = bounds::phase())]
    pub bulk: Option<std::time::Duration>,
    #[command(flatten)]
    pub mode: crate::cli::args::RunModeArgs,
    /// Sample one journey in N (its full timeline kept; 0: none, 1: every one; at most
    /// 1000000).
    #[arg(long, value_name = "N", default_value_t = 64, value_parser = bounds::sample_every(), help_heading = super::args::TRACING)]
    pub sample_every: u32,
    #[arg(long, help = super::args::PARTS_HELP, help_heading = super::args::TRACING)]
    pub parts: bool,
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
        let driver = super::one("tune", "-d", &args.driver, Driver::Bridge)?;
        let proto = super::one("tune", "--proto", &args.proto, Proto::Tcp)?;
        args.output.check_files("tune", false)?;
        let Some(knob) = &args.knob else {
            return run_change(&args, driver, proto);
        };
        let spec = knobs::parse(knob)?;
        knobs::check_driver(&spec, driver)?;
        knobs::check_proto(&spec, driver, proto)?;
        knobs::check_kernel(&spec)?;
        let opts = options(&args, proto, spec.knob == Knob::Nodelay)?;
        let text = args.output.live();
        let backend = super::traced_run(args.backend.backend, text)?;
        if text {
            crate::render::tune::start_line(backend, &spec, driver, proto);
        }
        let mut on_applied = |label: &str, ap: &crate::tune::devices::Applied| {
            if text {
                crate::render::tune::applied(label, ap);
            }
        };
        let r = crate::tune::run(backend, driver, &spec, &opts, &mut on_applied)?;
        args.output.emit(Some(backend.name()), &r)
    }
}

/// `--apply CMD --revert CMD`: one path, the lab's or between two containers, A with the
/// change in place and B without.
fn run_change(args: &TuneArgs, driver: Driver, proto: Proto) -> Result<()> {
    let (Some(apply), Some(revert)) = (&args.apply, &args.revert) else {
        anyhow::bail!("tune needs --knob NAME, or --apply CMD with --revert CMD");
    };
    for (flag, c) in [("--apply", apply), ("--revert", revert)] {
        if c.trim().is_empty() {
            anyhow::bail!("{flag}: the command is empty");
        }
    }
    let cmds = Commands {
        apply: apply.clone(),
        revert: revert.clone(),
        run_in: args.commands_in,
    };
    if args.between.is_empty() {
        crate::harness::supported::check(driver, proto)?;
    }
    let opts = options(args, proto, false)?;
    let backend = super::traced_run(args.backend.backend, args.output.live())?;
    let built = match args.between.as_slice() {
        [client, server] => {
            // Resolved before any program is loaded: a typo fails first.
            let mut node = crate::runtime::Node::connect()?;
            let b = crate::runtime::between(&mut node, client, server)?;
            crate::harness::supported::check_docker(b.path.driver, proto)?;
            let tracer = crate::probe::tracer::Tracer::load(backend, &opts.tracer())?;
            (tracer, (b.path, b.label))
        }
        _ => {
            let tracer = crate::probe::tracer::Tracer::load(backend, &opts.tracer())?;
            (tracer, (crate::lab::build(driver)?, driver.name().to_string()))
        }
    };
    if args.output.live() {
        crate::render::tune::change_line(backend, &cmds, &built.1.1, proto);
    }
    let r = crate::tune::change::run(built.0, built.1, &cmds, &opts)?;
    args.output.emit(Some(backend.name()), &r)
}

/// The run's options from the flags; `nagle` (the nodelay knob) changes the defaults.
fn options(args: &TuneArgs, proto: Proto, nagle: bool) -> Result<CompareOptions> {
    let mode = args.mode.resolve()?;
    let requests = args
        .requests
        .unwrap_or(if nagle { 200 } else { bounds::REQUESTS });
        let warmup = args.warmup.unwrap_or(if nagle { 10 } else { 1_000 });
        let bulk = args
            .bulk
            .unwrap_or(std::time::Duration::from_secs(if nagle { 0 } else { 2 }));
        let mut opts = CompareOptions {
            drivers: args.driver.clone(),
            protos: Vec::new(),
            rr: RrLoad {
                requests,
                warmup,
                ..RrLoad::default()
            },
            untraced: true,
            tracer: TracerOptions {
                sample_every: args.sample_every,
                ..TracerOptions::default()
            },
            tc_counters: false,
            parts: args.parts,
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
        opts.set_protos(&[proto])?;
        Ok(opts)
}

/// `tune --help` ends with these.
const EXAMPLES: &str = "EXAMPLES:
    netpath tune -d bridge --knob gro --rounds 5     veth GRO on vs off, interleaved, with the noise
    netpath tune -d bridge --knob nodelay            Nagle and the delayed ACK on a two-write request
    netpath tune -d bridge --knob wait=block,spin    the receiver's wakeup, A/B
    netpath tune -d overlay --knob mtu=9000,1500 --bulk 5s
    netpath tune -d bridge --apply 'ip netns exec $NP_NODE_NS iptables -I FORWARD -p udp --dport 9 -j DROP' \\
                           --revert 'ip netns exec $NP_NODE_NS iptables -D FORWARD -p udp --dport 9 -j DROP'
                                                     a firewall rule on the node, A/B interleaved
    netpath tune --between web db --commands-in client \\
                 --apply 'tc qdisc add dev eth0 root fq' --revert 'tc qdisc del dev eth0 root'
                                                     fq on the client container's eth0, A/B

ENVIRONMENT OF --apply AND --revert (the path's names; a variable a path lacks is unset):
    NP_RUN_ID, NP_DRIVER              the run id (lab: np<id>- names) and the driver
    NP_CLIENT_NS, NP_SERVER_NS, NP_NODE_NS
                                      namespaces for `ip netns exec` (lab paths; NODE stands in
                                      for the Docker host)
    NP_CLIENT_NS_PATH, NP_SERVER_NS_PATH, NP_NODE_NS_PATH
                                      the same as files for `nsenter --net=` (also containers')
    NP_CLIENT_ADDR, NP_SERVER_ADDR, NP_SERVER_PORT
                                      the client's source address, where the server listens
    NP_CONNECT_ADDR, NP_CONNECT_PORT  where the client connects (a published port, a DNAT)
    NP_PUBLISHED, NP_SUBNET           the published ADDR:PORT on the node, the lab's subnet
    NP_NFT_TABLE                      netpath's nft table (family ip) in the node namespace
    NP_DEVICES                        every device of the path, `name@netns`, in path order
    NP_DEVICE_COUNT, NP_DEVICE_<i>, NP_DEVICE_<i>_NS, NP_DEVICE_<i>_KIND
                                      each device (i from 0): name, namespace, kind";
