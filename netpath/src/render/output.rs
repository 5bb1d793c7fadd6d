//! How a command shows its result: the one `--format text|json` flag group (with `--json` as
//! its alias) every printing subcommand flattens, and `emit`, which sends a result to the
//! renderer of that format.
use anyhow::Result;
use serde::Serialize;

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// Tables and lines for people.
    #[default]
    Text,
    /// One JSON document with the versioned header (the schemas under `schemas/`).
    Json,
}

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

/// A result every format can show: the `kind` its JSON header names, and its text renderer.
pub trait Render: Serialize {
    const KIND: &'static str;
    fn text(&self);
}

/// Prints `r` in `format`: its text, or its JSON behind the header (`backend`: the probe
/// backend that produced it, None for outputs that load no programs).
pub fn emit<T: Render>(format: Format, backend: Option<&str>, r: &T) -> Result<()> {
    match format {
        Format::Text => r.text(),
        Format::Json => println!("{}", crate::record::header::to_json(T::KIND, backend, r)?),
    }
    Ok(())
}
