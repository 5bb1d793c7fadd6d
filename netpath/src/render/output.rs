//! How a command shows its result: the one `--format text|json` flag group (with `--json` as
//! its alias) every printing subcommand flattens, and `emit`, which sends a result to the
//! renderer of that format.
use std::io::Write;

use anyhow::Result;
use serde::Serialize;

/// The output formats, one line each: the variant (its doc comment is its `--format` help)
/// and the function that writes a result in it. A new format is its file in `formats/` and one
/// line here.
macro_rules! formats {
    ($($(#[$m:meta])* $name:ident => $write:path,)*) => {
        #[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
        pub enum Format {
            $($(#[$m])* $name,)*
        }

        impl Format {
            /// Writes `r` to `w` in this format (`backend`: the probe backend that produced it,
            /// None for outputs that load no programs).
            pub fn write<T: Render>(self, w: &mut dyn Write, backend: Option<&str>, r: &T) -> Result<()> {
                match self {
                    $(Format::$name => $write(w, backend, r),)*
                }
            }
        }
    };
}

formats! {
    /// Tables and lines for people.
    #[default]
    Text => super::formats::text::write,
    /// One JSON document with the versioned header (the schemas under `schemas/`).
    Json => super::formats::json::write,
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

/// A result every format can show: the `kind` its JSON header names, and its text.
pub trait Render: Serialize {
    const KIND: &'static str;
    fn text(&self, w: &mut dyn Write) -> std::io::Result<()>;
}

/// Prints `r` in `format` on standard output.
pub fn emit<T: Render>(format: Format, backend: Option<&str>, r: &T) -> Result<()> {
    let mut out = std::io::stdout().lock();
    format.write(&mut out, backend, r)?;
    out.flush()?;
    Ok(())
}
