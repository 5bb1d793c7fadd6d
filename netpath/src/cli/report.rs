//! `netpath report`: a saved `compare --json` rendered as the HTML report and SVG charts.

use anyhow::{Result, bail};

/// Render a saved `netpath compare --json` output as the HTML report (and SVG charts).
#[derive(clap::Args)]
#[command(after_help = EXAMPLES)]
pub struct ReportArgs {
    /// The JSON file `netpath compare --json` wrote.
    pub input: std::path::PathBuf,
    /// The HTML file to write.
    #[arg(long, short = 'o', value_name = "FILE")]
    pub output: Option<std::path::PathBuf>,
    /// The charts as one SVG file.
    #[arg(long, value_name = "FILE")]
    pub svg: Option<std::path::PathBuf>,
}

impl super::Command for ReportArgs {
    /// Reads a file and writes others: needs no privilege.
    fn run(self) -> Result<()> {
        let a = &self;
        let (output, svg) = (a.output.as_deref(), a.svg.as_deref());
        if output.is_none() && svg.is_none() {
            bail!("netpath report: nothing to write; give -o out.html and/or --svg out.svg");
        }
        for (flag, p) in [("-o", output), ("--svg", svg)] {
            if let Some(p) = p {
                crate::render::check_output_path(flag, p)?;
            }
        }
        let view = crate::render::CompareView::from_file(&a.input)?;
        crate::render::write_reports(&view, output, svg)
    }
}

/// `report --help` ends with these.
const EXAMPLES: &str = "EXAMPLES:
    netpath report bridge.json -o bridge.html        the HTML report of a saved compare --json
    netpath report bridge.json --svg bridge.svg      its charts alone";
