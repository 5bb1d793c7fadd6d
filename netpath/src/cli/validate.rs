//! `netpath validate`: the hop tables checked against exactly known delays.

use anyhow::Result;

use super::args::TrafficArgs;
use crate::driver::Driver;
use crate::render::OutputArgs;

/// Check the hop tables against exactly known delays.
///
/// A TC program holds each data packet on one lab device for D µs, every D interleaved in
/// rounds; per driver and D, what the hop the device leads into recovered, the largest change
/// elsewhere, the untraced RTT's.
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
    #[arg(long, value_enum, default_value_t = crate::validate::At::Server)]
    pub at: crate::validate::At,
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
        let mut tracer = crate::probe::tracer::Tracer::load(backend, &compare.tracer())?;
        let o = crate::validate::ValidateOptions {
            drivers,
            delays_us: a.delays,
            at: a.at,
            compare,
        };
        let out = crate::validate::run(&mut tracer, &o)?;
        a.output.emit(Some(backend.name()), &out)
    }
}

/// `validate --help` ends with these.
const EXAMPLES: &str = "EXAMPLES:
    netpath validate                                 bridge and overlay, delays 0 to 10 µs
    netpath validate -d bridge --delays 0,20 --rounds 5";
