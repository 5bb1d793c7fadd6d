//! `netpath compare`: request/response traffic per driver, traced and untraced, latency per hop.

use anyhow::Result;

use super::args::{DOCKER, OUTPUT, TRAFFIC, TrafficArgs};
use crate::driver::Driver;
use crate::harness::Proto;
use crate::lab;
use crate::measure::compare;
use crate::render::{self, OutputArgs};


/// Run request/response traffic per driver, traced and untraced, and attribute latency to hops.
#[derive(clap::Args)]
#[command(after_help = EXAMPLES, mut_arg("output", |a| a.alias("report").alias("svg")))]
pub struct CompareArgs {
    /// Drivers, comma-separated (default: all of them).
    #[arg(long, short = 'd', value_name = "DRIVER", value_delimiter = ',')]
    pub driver: Vec<Driver>,
    #[command(flatten)]
    pub traffic: TrafficArgs,
    /// What the request/response runs send: tcp (one connection), udp (one datagram each
    /// way, like sockperf's default) or icmp (echo request and reply); several,
    /// comma-separated (tcp,udp,icmp), interleave in the same rounds, a row each. Bulk and
    /// burst phases are TCP only.
    #[arg(long, value_enum, value_delimiter = ',', default_value = "tcp", help_heading = TRAFFIC)]
    pub proto: Vec<Proto>,
    /// Measure real Docker networks and containers (a daemon must answer) instead of the lab.
    #[arg(long, help_heading = DOCKER)]
    pub docker: bool,
    /// With --docker: also measure the lab's version of each driver, side by side.
    #[arg(long, help_heading = DOCKER)]
    pub lab: bool,
    /// Measure between two running containers instead (client in the first, server in the
    /// second, on a network they share): Docker's or any runtime's, named by id, name or
    /// namespace/pod[/container]; nothing is created.
    #[arg(long, num_args = 2, value_names = ["CLIENT", "SERVER"], help_heading = DOCKER, conflicts_with_all = ["docker", "driver"])]
    pub between: Vec<String>,
    /// Emulate the wire between two nodes: netem delays every packet a node sends on the
    /// overlay's underlay link (the egress drivers' uplink) by this much (e.g. 50us, 2ms),
    /// so cross-node drivers can be compared with same-node ones (default: none). Needs a kernel with netem (sch_netem).
    #[arg(long, value_name = "DURATION", value_parser = lab::netem::parse_wire_duration, help_heading = TRAFFIC, conflicts_with_all = ["docker", "between"])]
    pub underlay_delay: Option<std::time::Duration>,
    /// With --underlay-delay: jitter around that delay (uniform, e.g. 10us).
    #[arg(long, value_name = "DURATION", value_parser = lab::netem::parse_wire_duration, help_heading = TRAFFIC, requires = "underlay_delay")]
    pub underlay_jitter: Option<std::time::Duration>,
    /// Measure every driver against this one (default: host for bridge, bridge for every
    /// other driver); it must be among those measured.
    #[arg(long, value_name = "DRIVER", help_heading = OUTPUT)]
    pub reference: Option<String>,
    /// Every line of each driver's block (the hops netpath can see, raw and own-time columns,
    /// passes, every counter, machine and placement per driver) and the table of several
    /// with per-round ratios.
    #[arg(long, short = 'v', help_heading = OUTPUT)]
    pub verbose: bool,
    /// Also write the journeys as a Perfetto trace to FILE (or -o FILE.perfetto-trace;
    /// ui.perfetto.dev), 16 sampled a driver: a track per CPU and followed thread, each hop a
    /// slice, each journey a flow.
    #[arg(long, value_name = "FILE", help_heading = OUTPUT)]
    pub perfetto: Option<std::path::PathBuf>,
    #[command(flatten, next_help_heading = OUTPUT)]
    pub output: OutputArgs,
}

impl super::Command for CompareArgs {
    fn run(self) -> Result<()> {
        let mut a = self;
        super::require_root()?;
        let text = a.output.live();
        let drivers = if a.driver.is_empty() {
            Driver::ALL.to_vec()
        } else {
            a.driver
        };
        let underlay = a.underlay_delay.map(|delay| lab::netem::WireDelay {
            delay,
            jitter: a.underlay_jitter.unwrap_or_default(),
        });
        let between = !a.between.is_empty();
        if let (Some(r), false) = (&a.reference, between || a.docker)
            && !drivers.iter().any(|d| d.name() == r)
        {
            anyhow::bail!("--reference {r} is not among the drivers measured (-d): add it there");
        }
        // A placement this machine cannot give is said before anything is loaded or built.
        let mut opts = a.traffic.options(drivers, underlay)?;
        opts.set_protos(&a.proto)?;
        let exports = render::export::asked(None, a.perfetto.clone(), &mut a.output.output)?;
        if !exports.is_empty() {
            opts.keep_timelines = opts.keep_timelines.max(PERFETTO_JOURNEYS);
        }
        a.output.check_files("compare", true)?;
        let backend = super::traced_run(a.traffic.tracing.backend.backend, text)?;
        // A missing daemon is said before anything else is printed.
        let engine = a.docker.then(crate::docker::Engine::connect).transpose()?;
        let node = between.then(crate::runtime::Node::connect).transpose()?;
        if text {
            render::compare::backend_line(&mut std::io::stdout().lock(), backend, a.verbose)?;
        }
        // Text shows each driver as it is measured (runs are long); JSON waits for the end.
        let mut text_sink = render::compare::TextSink::new(a.verbose, opts.drivers.len());
        let sink: &mut dyn crate::record::Sink = if text {
            &mut text_sink
        } else {
            &mut crate::record::Quiet
        };
        let drivers = match (node, &engine, a.between.as_slice()) {
            (Some(mut n), _, [client, server]) => {
                compare::run_between(backend, &opts, &mut n, client, server, sink)?
            }
            (_, Some(e), _) => compare::run_docker(backend, &opts, e, a.lab, sink)?,
            _ => compare::run(backend, &opts, sink)?,
        };
        let summary = crate::measure::answer::summarise(&drivers, a.reference.as_deref());
        let out = render::compare::CompareOutput {
            backend,
            drivers,
            summary,
            verbose: a.verbose,
        };
        a.output.emit(Some(backend.name()), &out)?;
        let runs: Vec<_> = (out.drivers.iter())
            .map(|d| (d.driver.as_str(), d.timelines.as_slice()))
            .collect();
        for l in render::export::write(&exports, &runs)? {
            if a.output.live() {
                println!("{l}");
            }
        }
        Ok(())
    }
}

/// Journeys a driver keeps for `--perfetto` (the JSON keeps them too).
const PERFETTO_JOURNEYS: usize = 16;

/// `compare --help` ends with these.
const EXAMPLES: &str = "EXAMPLES:
    netpath compare                                  every driver on the embedded netns lab
    netpath compare -d bridge,host --rounds 5 --bulk 0 --burst 0
    netpath compare -d bridge --wait block --cpus same   what an application sees, one CPU
    netpath compare -d bridge --proto tcp,udp,icmp   three protocols interleaved, a row each
    netpath compare -d bridge,overlay --underlay-delay 50us   same node vs cross node
    netpath compare -d bridge -n 50000 --json > bridge.json
    netpath compare -d bridge,host -o run.html -o run.json   the HTML report and the JSON, text shown
    netpath compare -q -o run.json                   only the answer on the terminal, the JSON saved
    netpath compare -d bridge,overlay -o run.perfetto-trace   journeys across CPUs (ui.perfetto.dev)
    netpath compare --docker --lab -d bridge         a Docker network next to its lab version
    netpath compare --between web db                 between two running containers
    netpath compare --between shop/web-0 shop/db-0   between two pods (Docker or containerd)";
