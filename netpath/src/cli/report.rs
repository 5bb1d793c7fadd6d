//! `netpath report`: a saved `compare --json` rendered again: the HTML report, its SVG charts,
//! or compare's text.

use std::path::{Path, PathBuf};

use anyhow::Result;

use crate::render::{self, OutputArgs, output::FileFormat};

/// Render a saved `netpath compare --json` output: the HTML report (by default RUN.html in the
/// current directory), its SVG charts, or compare's text.
#[derive(clap::Args)]
#[command(after_help = EXAMPLES, mut_arg("output", |a| a.alias("svg")))]
pub struct ReportArgs {
    /// The JSON file `netpath compare --json` (or `-o run.json`) wrote.
    pub input: PathBuf,
    #[command(flatten)]
    pub output: OutputArgs,
}

impl super::Command for ReportArgs {
    /// Reads a file and writes others: needs no privilege.
    fn run(self) -> Result<()> {
        let a = &self;
        // Nothing asked: the report, named after the run. --format alone prints instead.
        let files = if a.output.output.is_empty() && !a.output.format_given() {
            vec![default_file(&a.input)]
        } else {
            a.output.output.clone()
        };
        let o = OutputArgs {
            output: files.clone(),
            ..a.output.clone()
        };
        o.check_files("report", true)?;
        let saved = render::saved::Saved::read_for(&a.input, "report", "renders")?;
        if a.output.format_given() {
            saved.print(a.output.format(), a.output.quiet)?;
        }
        for p in &files {
            let bytes = saved.file(o.file_format(p))?;
            std::fs::write(p, bytes).map_err(|e| anyhow::anyhow!("writing {}: {e}", p.display()))?;
            if !a.output.quiet {
                eprintln!("wrote {}", p.display());
            }
        }
        Ok(())
    }
}

/// `run.json` → `run.html`, in the current directory.
fn default_file(input: &Path) -> PathBuf {
    let stem = input.file_stem().unwrap_or(input.as_os_str());
    PathBuf::from(stem).with_extension(FileFormat::Html.extension())
}

/// `report --help` ends with these.
const EXAMPLES: &str = "EXAMPLES:
    netpath report bridge.json                       the HTML report of a saved run: bridge.html
    netpath report bridge.json -o out/bridge.html -o bridge.svg   the report and its charts
    netpath report bridge.json --format text         compare's text again, from the saved run";
