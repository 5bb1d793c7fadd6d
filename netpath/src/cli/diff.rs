//! `netpath diff`: one driver against another, from saved files or measured now.

use anyhow::{Result, bail};

use super::args::TrafficArgs;
use crate::driver::Driver;
use crate::render::OutputArgs;

/// One driver against another, noise-aware: which hops make the difference.
///
/// One sentence, the hops ranked by their share of the difference (each delta with its spread over rounds), and what differed in the two
/// sides' conditions. From two saved `compare --json` files (or two drivers of one), or
/// measured live in one interleaved run (`-d overlay --vs bridge`, needs root).
#[derive(clap::Args)]
#[command(after_help = EXAMPLES)]
pub struct DiffArgs {
    /// Saved `netpath compare --json` outputs: A and B, or one file with -d X --vs Y.
    /// None: measure -d A --vs B now.
    pub files: Vec<std::path::PathBuf>,
    /// Drivers, comma-separated (diff takes one: A's, or the one to pick in both files when
    /// --vs is not given).
    #[arg(long, short = 'd', value_name = "DRIVER", value_delimiter = ',')]
    pub driver: Vec<String>,
    /// B's driver (default: none; with -d A, to measure now or to pick in one saved file).
    #[arg(long, value_name = "DRIVER")]
    pub vs: Option<String>,
    #[command(flatten)]
    pub traffic: TrafficArgs,
    #[command(flatten, next_help_heading = super::args::OUTPUT)]
    pub output: OutputArgs,
}

impl super::Command for DiffArgs {
    fn run(self) -> Result<()> {
        if self.driver.len() > 1 {
            bail!(
                "diff takes one -d, got {}: -d A --vs B",
                self.driver.join(",")
            );
        }
        self.output.check_files("diff", false)?;
        // Saved files are read and need no privilege.
        if !self.files.is_empty() {
            return diff_files(&self);
        }
        super::require_root()?;
        diff_live(self)
    }
}

/// `diff a.json b.json`: reads files.
fn diff_files(a: &DiffArgs) -> Result<()> {
    if !a.traffic.is_default() {
        bail!(
            "diff: the traffic and mode flags (--rounds, -n, --wait, --cpus, --backend …) are for measuring now; saved files were measured already: drop those flags, or the files to measure -d A --vs B"
        );
    }
    let driver = a.driver.first().map(String::as_str);
    let r = crate::measure::diff::from_files(&a.files, driver, a.vs.as_deref())?;
    a.output.emit(None, &r)
}

/// `diff -d A --vs B`: both measured now, interleaved.
fn diff_live(a: DiffArgs) -> Result<()> {
    let (da, db) = live_pair(a.driver.first().map(String::as_str), a.vs.as_deref())?;
    let mut opts = a.traffic.options(vec![da, db], None)?;
    // diff compares the runs its tables come from; compare's extra blocking line
    // would cost a run per driver and say nothing here (`--wait block` diffs that).
    opts.mode.also_block = false;
    let backend = super::traced_run(a.traffic.tracing.backend.backend, a.output.live())?;
    let r = crate::measure::diff::live(backend, &opts)?;
    a.output.emit(Some(backend.name()), &r)
}

/// `diff -d A --vs B`: two different lab drivers.
fn live_pair(a: Option<&str>, b: Option<&str>) -> Result<(Driver, Driver)> {
    let (Some(a), Some(b)) = (a, b) else {
        bail!(
            "diff: give two saved `compare --json` files, or -d A --vs B to measure two drivers now (e.g. -d overlay --vs bridge)"
        );
    };
    let parse = |flag: &str, s: &str| {
        use clap::ValueEnum;
        Driver::from_str(s, false).map_err(|_| {
            let all: Vec<&str> = Driver::ALL.iter().map(|d| d.name()).collect();
            anyhow::anyhow!("{flag} {s}: no such driver; use one of {}", all.join(", "))
        })
    };
    let (a, b) = (parse("-d", a)?, parse("--vs", b)?);
    if a == b {
        bail!("-d and --vs both name {a}: diff two different drivers");
    }
    Ok((a, b))
}

/// `diff --help` ends with these.
const EXAMPLES: &str = "EXAMPLES:
    netpath diff -d overlay --vs bridge              which hops make overlay slower, measured now
    netpath diff -d overlay --vs bridge --rounds 5 --bulk 0 --burst 0
    netpath diff a.json b.json -d bridge             the same driver in two saved runs
    netpath diff run.json -d overlay --vs bridge     two drivers of one saved run";
