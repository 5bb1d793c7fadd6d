//! `netpath bench`: netpath's own cost, as ratios from one run.

use std::time::Duration;

use anyhow::{Result, bail};
use clap::builder::{PossibleValue, TypedValueParser};

use super::bounds;
use crate::driver::Driver;
use crate::harness::Proto;
use crate::lab;
use crate::render::{self, OutputArgs};

/// Benchmark netpath itself, as ratios from one run.
///
/// Harness vs sockperf and iperf3, traced vs untraced latency and throughput, kernel cost per
/// round trip, memory.
#[derive(clap::Args)]
#[command(after_help = EXAMPLES)]
pub struct BenchArgs {
    /// Interleaved rounds (per driver; figures are medians over rounds; 1-100).
    #[arg(long, default_value_t = 3, value_parser = bounds::rounds())]
    pub rounds: usize,
    /// Each sockperf, iperf3 and bulk run, in whole seconds, e.g. 3s (1s to 10m).
    #[arg(long, value_name = "DURATION", default_value = "3s", alias = "secs", value_parser = bounds::duration(Duration::from_secs(1), bounds::PHASE))]
    pub duration: Duration,
    /// Measured requests per run (1-1000000).
    #[arg(long, short = 'n', default_value_t = bounds::REQUESTS, value_parser = bounds::requests())]
    pub requests: u64,
    /// Drivers, comma-separated (default: bridge,host).
    #[arg(long, short = 'd', value_name = "DRIVER", value_delimiter = ',')]
    pub driver: Vec<Driver>,
    /// Instead: the stability section, five `compare -d host,bridge,overlay --rounds 3`
    /// runs alternating an idle machine and a busy loop on one CPU, and their ratios.
    #[arg(long)]
    pub stability: bool,
    /// Also write the report as Markdown to this file (`cargo xtask bench` writes
    /// BENCHMARKS.md at the repository root).
    #[arg(long)]
    pub markdown: Option<std::path::PathBuf>,
    /// One-way journeys of a traced run counting every loss, on the first driver (0: none).
    #[arg(long, default_value_t = 0, value_parser = bounds::journeys())]
    pub journeys: u64,
    /// What else ran on the machine meanwhile, printed in the Markdown report.
    #[arg(long, default_value = "")]
    pub note: String,
    /// Also: do the hop tables add up to the untraced RTT once netpath's own time is taken
    /// out (host, bridge, overlay, macvlan, published-nat), and does `validate` recover
    /// injected delays (bridge, overlay)? TCP only; `cargo xtask bench` asks for it.
    #[arg(long)]
    pub proof: bool,
    /// Also the "serve left on" section: redis-server and redis-benchmark in two containers,
    /// throughput and p50 with serve off, following another container, following the server;
    /// 5 × --requests GETs per run.
    #[arg(long)]
    pub serve_left_on: bool,
    /// Instead: only the "serve left on" section (its Markdown on stdout and to --markdown).
    #[arg(long, conflicts_with = "stability")]
    pub only_serve_left_on: bool,
    /// What the request/response runs send (sockperf's and netpath's; bench takes one): tcp
    /// or udp (sockperf's default mode; the TCP-only bulk and journey runs are skipped).
    /// sockperf has no ICMP mode.
    #[arg(long, default_value = "tcp", value_delimiter = ',', value_parser = SockperfProto)]
    pub proto: Vec<Proto>,
    #[command(flatten)]
    pub output: OutputArgs,
}

impl super::Command for BenchArgs {
    fn run(self) -> Result<()> {
        let a = self;
        super::require_root()?;
        let proto = super::one("bench", "--proto", &a.proto, Proto::Tcp)?;
        if proto == Proto::Icmp {
            bail!("{}", crate::bench::ICMP_REFUSED);
        }
        if a.stability && proto != Proto::Tcp {
            bail!(
                "bench --stability measures compare's TCP ratios and has no --proto; drop \
             --proto {proto} (or --stability)"
            );
        }
        a.output.check_files("bench", false)?;
        lab::install_signal_cleanup();
        crate::sys::btf::require()?;
        if a.stability {
            let r = crate::bench::stability::run(a.requests.min(10_000), a.output.live())?;
            return render::bench::emit_stability(&a.output, &r);
        }
        if a.only_serve_left_on {
            let gets = a.requests * crate::bench::serve_on::GETS_PER_REQUEST;
            let o = crate::bench::serve_on::run(a.rounds, gets)?;
            let mut s = String::new();
            render::markdown::serve_on(&mut s, &o);
            if let Some(path) = &a.markdown {
                std::fs::write(path, &s)
                    .map_err(|e| anyhow::anyhow!("writing {}: {e}", path.display()))?;
            }
            return a.output.emit_plain(&s, &serde_json::to_string_pretty(&o)?);
        }
        let mut opts = crate::bench::BenchOptions {
            rounds: a.rounds,
            secs: a.duration.as_secs().max(1),
            requests: a.requests,
            journeys: a.journeys,
            note: a.note,
            proto,
            proof: a.proof,
            serve_on: a.serve_left_on,
            ..Default::default()
        };
        if !a.driver.is_empty() {
            opts.drivers = a.driver;
        }
        let r = crate::bench::run(&opts)?;
        if let Some(path) = &a.markdown {
            std::fs::write(path, render::markdown::markdown(&r))
                .map_err(|e| anyhow::anyhow!("writing {}: {e}", path.display()))?;
            if !a.output.quiet {
                eprintln!("bench: wrote {}", path.display());
            }
        }
        a.output.emit(Some(r.backend.name()), &r)
    }
}

/// `bench --proto`: the protocols sockperf has (tcp, udp), each listed; icmp refused with why.
#[derive(Clone)]
struct SockperfProto;

impl TypedValueParser for SockperfProto {
    type Value = Proto;

    fn parse_ref(
        &self,
        cmd: &clap::Command,
        arg: Option<&clap::Arg>,
        value: &std::ffi::OsStr,
    ) -> Result<Proto, clap::Error> {
        let p = clap::value_parser!(Proto).parse_ref(cmd, arg, value)?;
        if p == Proto::Icmp {
            return Err(clap::Error::raw(
                clap::error::ErrorKind::InvalidValue,
                format!("{}\n", crate::bench::ICMP_REFUSED),
            )
            .with_cmd(cmd));
        }
        Ok(p)
    }

    fn possible_values(&self) -> Option<Box<dyn Iterator<Item = PossibleValue> + '_>> {
        Some(Box::new(
            [Proto::Tcp, Proto::Udp]
                .into_iter()
                .map(|p| PossibleValue::new(p.name())),
        ))
    }
}

/// `bench --help` ends with these.
const EXAMPLES: &str = "EXAMPLES:
    netpath bench --rounds 5                         netpath's own cost, as ratios against sockperf and iperf3
    netpath bench -d bridge --proto udp --duration 2s
    netpath bench --stability                        do compare's ratios hold still, idle vs a busy loop?
    netpath bench --markdown BENCHMARKS.md --note \"idle machine\"";
