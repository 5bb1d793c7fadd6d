//! `netpath bench`: netpath's own cost, as ratios from one run.

use anyhow::{Result, bail};

use super::bounds;
use crate::driver::Driver;
use crate::harness::Proto;
use crate::lab;
use crate::render::{self, OutputArgs};

/// Benchmark netpath itself, as ratios from one run: harness vs sockperf and iperf3, traced
/// vs untraced latency and throughput, kernel cost per round trip, memory.
#[derive(clap::Args)]
pub struct BenchArgs {
    /// Rounds per driver (figures are medians over rounds; 1-100).
    #[arg(long, default_value_t = 3, value_parser = bounds::int(bounds::ROUNDS))]
    pub rounds: usize,
    /// Seconds per sockperf, iperf3 and bulk run (1-600).
    #[arg(long, default_value_t = 3, value_parser = bounds::int(bounds::BENCH_SECS))]
    pub secs: u64,
    /// Measured requests per request/response run (1-1000000).
    #[arg(long, short = 'n', default_value_t = 20_000, value_parser = bounds::int(bounds::REQUESTS))]
    pub requests: u64,
    /// Drivers, comma-separated (default: bridge,host).
    #[arg(long, short = 'd', value_delimiter = ',')]
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
    #[arg(long, default_value_t = 0)]
    pub journeys: u64,
    /// What else ran on the machine meanwhile, printed in the Markdown report.
    #[arg(long, default_value = "")]
    pub note: String,
    /// Transport of the latency runs, sockperf's and netpath's: tcp or udp (sockperf's default
    /// mode; the TCP-only bulk and journey runs are skipped). sockperf has no ICMP mode.
    #[arg(long, value_enum, default_value_t = Proto::Tcp)]
    pub proto: Proto,
    #[command(flatten)]
    pub output: OutputArgs,
}

impl super::Command for BenchArgs {
    fn run(self) -> Result<()> {
        let a = self;
        super::require_root()?;
        if a.proto == Proto::Icmp {
            bail!("{}", crate::bench::ICMP_REFUSED);
        }
        if a.stability && a.proto != Proto::Tcp {
            bail!(
                "netpath bench --stability measures compare's TCP ratios and has no --proto; drop \
             --proto {} (or --stability)",
                a.proto
            );
        }
        lab::install_signal_cleanup();
        crate::sys::btf::require()?;
        if a.stability {
            let r = crate::bench::stability::run(a.requests.min(10_000), a.output.is_text())?;
            return render::bench::emit_stability(a.output.format(), &r);
        }
        let mut opts = crate::bench::BenchOptions {
            rounds: a.rounds,
            secs: a.secs,
            requests: a.requests,
            journeys: a.journeys,
            note: a.note,
            proto: a.proto,
            ..Default::default()
        };
        if !a.driver.is_empty() {
            opts.drivers = a.driver;
        }
        let r = crate::bench::run(&opts)?;
        if let Some(path) = &a.markdown {
            std::fs::write(path, crate::bench::markdown(&r))
                .map_err(|e| anyhow::anyhow!("writing {}: {e}", path.display()))?;
            eprintln!("bench: wrote {}", path.display());
        }
        render::emit(a.output.format(), Some(r.backend.name()), &r)
    }
}
