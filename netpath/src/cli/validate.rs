//! `netpath validate`: the hop tables checked against exactly known delays.

use anyhow::Result;

use super::args::TrafficArgs;
use crate::driver::Driver;
use crate::render::OutputArgs;

/// Check the hop tables against exactly known delays, or the netfilter parts against a known
/// rule set.
///
/// A TC program holds each data packet on one lab device for D µs, every D interleaved in
/// rounds; per driver and D, what the hop the device leads into recovered, the largest change
/// elsewhere, the untraced RTT's. With `--rules`/`--chain`, N rules no packet matches go into
/// a chain of a table of netpath's own instead (and out again), every count against 0 rules
/// in the same rounds, `--parts` on: what the chain's part recovered, against the untraced
/// RTT change, and a verdict.
#[derive(clap::Args)]
#[command(after_help = EXAMPLES)]
pub struct ValidateArgs {
    /// Drivers, comma-separated (default: bridge,overlay).
    #[arg(long, short = 'd', value_name = "DRIVER", value_delimiter = ',')]
    pub driver: Vec<Driver>,
    /// Injected delays in µs, comma-separated (0, the reference, is always measured).
    #[arg(long, value_delimiter = ',', default_value = "0,0.5,1,2,5,10", value_parser = super::bounds::float(super::bounds::DELAY_US))]
    pub delays: Vec<f64>,
    /// Where the delay is injected (on receive).
    #[arg(long, value_enum, default_value_t = crate::validate::At::Server, conflicts_with_all = ["rules", "chain"])]
    pub at: crate::validate::At,
    /// The netfilter case: rule counts, comma-separated (0, the reference, is always
    /// measured; default 400 with `--chain`). No packet of the path matches them.
    #[arg(long, value_name = "N", value_delimiter = ',', conflicts_with = "delays", value_parser = clap::value_parser!(u32).range(0..=crate::validate::rules::MAX_RULES as i64))]
    pub rules: Vec<u32>,
    /// The netfilter case: the chain the rules go in (default client-output with `--rules`).
    #[arg(long, value_enum, conflicts_with = "delays")]
    pub chain: Option<crate::validate::Chain>,
    #[command(flatten)]
    pub traffic: TrafficArgs,
    #[command(flatten, next_help_heading = super::args::OUTPUT)]
    pub output: OutputArgs,
}

impl super::Command for ValidateArgs {
    fn run(self) -> Result<()> {
        let a = self;
        super::require_root()?;
        a.output.check_files("validate", false)?;
        let drivers = if a.driver.is_empty() {
            vec![Driver::Bridge, Driver::Overlay]
        } else {
            a.driver
        };
        let mut compare = a.traffic.options(drivers.clone(), None)?;
        compare.mode.also_block = false;
        let backend = super::traced_run(a.traffic.tracing.backend.backend, a.output.live())?;
        // The netfilter case reads parts (say it before the programs load).
        compare.parts |= a.chain.is_some() || !a.rules.is_empty();
        let mut tracer = crate::probe::tracer::Tracer::load(backend, &compare.tracer())?;
        let o = crate::validate::ValidateOptions {
            drivers,
            delays_us: a.delays,
            at: a.at,
            rules: (a.chain.is_some() || !a.rules.is_empty()).then(|| {
                let chain = a.chain.unwrap_or(crate::validate::Chain::ClientOutput);
                (chain, a.rules.iter().map(|&n| n as usize).collect())
            }),
            compare,
        };
        let out = crate::validate::run(&mut tracer, &o)?;
        a.output.emit(Some(backend.name()), &out)
    }
}

/// `validate --help` ends with these.
const EXAMPLES: &str = "EXAMPLES:
    netpath validate                                 bridge and overlay, delays 0 to 10 µs
    netpath validate -d bridge --delays 0,20 --rounds 5
    netpath validate -d bridge --rules 400 --chain server-input
                                                     400 rules in the server's INPUT, against none
    netpath validate -d bridge --rules 0,0,400 --chain node-forward
                                                     the node's FORWARD (br_netfilter); a second 0 reads the noise";
