//! How a command shows its result: the one `--format` flag group (with `--json` as its alias)
//! every printing subcommand flattens, and `emit`, which writes a result to standard output in
//! that format (the formats: `formats/`).
use std::io::Write;

use anyhow::Result;

pub use super::formats::{Format, Render};

/// `--format` and its alias `--json`: defined once, flattened into every subcommand that prints
/// a result.
#[derive(Clone, Copy, Debug, Default, clap::Args)]
pub struct OutputArgs {
    /// How to print the result: text for people, json for programs (with a versioned header).
    #[arg(long, value_enum, default_value_t = Format::Text)]
    pub format: Format,
    /// Alias of --format json.
    #[arg(long, conflicts_with = "format")]
    pub json: bool,
}

impl OutputArgs {
    pub fn format(&self) -> Format {
        if self.json { Format::Json } else { self.format }
    }

    pub fn is_json(&self) -> bool {
        self.format() == Format::Json
    }

    /// Text mode: progress bars and the lines printed while a run goes on.
    pub fn is_text(&self) -> bool {
        self.format() == Format::Text
    }
}

/// A command-line error in one line: what was wrong and the accepted values, without clap's
/// usage block.
pub fn clap_line(e: &clap::Error) -> String {
    let msg = e.to_string();
    let parts: Vec<&str> = msg
        .lines()
        .map(str::trim)
        .filter(|l| {
            !l.is_empty() && !l.starts_with("Usage:") && !l.starts_with("For more information")
        })
        .collect();
    parts.join(" ").trim_start_matches("error: ").to_string()
}

/// Prints `r` in `format` on standard output.
pub fn emit<T: Render>(format: Format, backend: Option<&str>, r: &T) -> Result<()> {
    let mut out = std::io::stdout().lock();
    format.write(&mut out, backend, r)?;
    out.flush()?;
    Ok(())
}
