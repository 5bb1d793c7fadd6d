//! How a command shows its result: the one flag group every printing subcommand flattens
//! (`--format` with its alias `--json`, `-o/--output FILE`, `-q/--quiet`; docs/cli.md), and
//! `OutputArgs::emit`, which prints a result on standard output and writes it to each file
//! asked, each in its format (the formats: `formats/`).
use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{Context as _, Result, bail};

pub use super::formats::{Format, Render};

/// The help of `-o/--output`: one text wherever the flag is (`netpath completions` has it
/// alone).
pub const OUTPUT_HELP: &str = "Also write the result to FILE, in the format its extension names (.json; .html \
     and .svg: compare's and report's HTML report and charts; anything else: text) or, for \
     another extension, --format's; repeat for several";

/// `--format` and its alias `--json`, `-o` and `-q`: defined once, flattened into every
/// subcommand that prints a result.
#[derive(Clone, Debug, Default, clap::Args)]
pub struct OutputArgs {
    /// How to print the result: text for people, json for programs (with a versioned header)
    /// (default: text).
    #[arg(long, value_enum)]
    pub format: Option<Format>,
    /// Alias of --format json.
    #[arg(long, conflicts_with = "format")]
    pub json: bool,
    #[arg(long, short = 'o', value_name = "FILE", help = OUTPUT_HELP)]
    pub output: Vec<PathBuf>,
    /// Print only the answer, or nothing where the exit status is the answer (doctor,
    /// cleanup): no progress, no lines while the run goes on. JSON is printed whole; errors
    /// still say what went wrong.
    #[arg(long, short = 'q')]
    pub quiet: bool,
}

/// What a file named with -o holds, from its extension.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FileFormat {
    Text,
    Json,
    /// compare's HTML report.
    Html,
    /// compare's charts, one SVG document.
    Svg,
}

impl FileFormat {
    /// The extension a file of this format is named with.
    pub fn extension(self) -> &'static str {
        match self {
            FileFormat::Text => "txt",
            FileFormat::Json => "json",
            FileFormat::Html => "html",
            FileFormat::Svg => "svg",
        }
    }
}

impl OutputArgs {
    /// The format of standard output: --format, or --json, or text.
    pub fn format(&self) -> Format {
        if self.json {
            Format::Json
        } else {
            self.format.unwrap_or_default()
        }
    }

    /// --format or --json was given.
    pub fn format_given(&self) -> bool {
        self.json || self.format.is_some()
    }

    pub fn is_json(&self) -> bool {
        self.format() == Format::Json
    }

    /// Text on standard output.
    pub fn is_text(&self) -> bool {
        self.format() == Format::Text
    }

    /// Progress bars and the lines printed while a run goes on: text, not quiet.
    pub fn live(&self) -> bool {
        self.is_text() && !self.quiet
    }

    /// The format `path` is written in: its extension's, else --format's.
    pub fn file_format(&self, path: &Path) -> FileFormat {
        let ext = path
            .extension()
            .map(|e| e.to_string_lossy().to_ascii_lowercase());
        match ext.as_deref() {
            Some("json") => FileFormat::Json,
            Some("html" | "htm") => FileFormat::Html,
            Some("svg") => FileFormat::Svg,
            _ if self.format() == Format::Json => FileFormat::Json,
            _ => FileFormat::Text,
        }
    }

    /// Before a long run: every -o file can be written (its directory exists, it is no
    /// directory) in a format this command has (`pages`: the HTML report and its charts).
    pub fn check_files(&self, command: &str, pages: bool) -> Result<()> {
        for p in &self.output {
            super::check_output_path("-o", p)?;
            let f = self.file_format(p);
            if !pages && matches!(f, FileFormat::Html | FileFormat::Svg) {
                bail!(
                    "-o {}: {command} writes text or JSON (.html and .svg are compare's and report's)",
                    p.display()
                );
            }
        }
        Ok(())
    }

    /// Prints `r` on standard output (only its answer with -q) and writes it to each -o file.
    pub fn emit<T: Render>(&self, backend: Option<&str>, r: &T) -> Result<()> {
        let mut out = std::io::stdout().lock();
        match (self.format(), self.quiet) {
            (Format::Text, true) => r.answer(&mut out)?,
            (f, _) => f.write(&mut out, backend, r)?,
        }
        out.flush()?;
        self.write_files(backend, r)
    }

    /// A result without a header (bench's sections), given as its text and its JSON: printed
    /// and written like `emit`'s.
    pub fn emit_plain(&self, text: &str, json: &str) -> Result<()> {
        let mut out = std::io::stdout().lock();
        match self.format() {
            Format::Json => writeln!(out, "{json}")?,
            Format::Text => write!(out, "{text}")?,
        }
        out.flush()?;
        for p in &self.output {
            let body = match self.file_format(p) {
                FileFormat::Json => format!("{json}\n"),
                _ => text.to_string(),
            };
            std::fs::write(p, body).with_context(|| format!("writing {}", p.display()))?;
        }
        Ok(())
    }

    /// Writes `r` to each -o file, in its format.
    pub fn write_files<T: Render>(&self, backend: Option<&str>, r: &T) -> Result<()> {
        for p in &self.output {
            let bytes = file_bytes(self.file_format(p), backend, r)?;
            std::fs::write(p, bytes).with_context(|| format!("writing {}", p.display()))?;
        }
        Ok(())
    }
}

/// `r` as a file of format `f`.
pub fn file_bytes<T: Render>(f: FileFormat, backend: Option<&str>, r: &T) -> Result<Vec<u8>> {
    let mut buf = Vec::new();
    match f {
        FileFormat::Text => r.full_text(&mut buf)?,
        FileFormat::Json => Format::Json.write(&mut buf, backend, r)?,
        FileFormat::Html | FileFormat::Svg => match r.page(backend, f) {
            Some(page) => buf = page?.into_bytes(),
            None => bail!("{} writes no HTML report or charts", T::KIND),
        },
    }
    Ok(buf)
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_files_format_is_its_extensions_else_formats() {
        let text = OutputArgs::default();
        let json = OutputArgs {
            json: true,
            ..OutputArgs::default()
        };
        for (o, name, want) in [
            (&text, "run.json", FileFormat::Json),
            (&text, "run.HTML", FileFormat::Html),
            (&text, "run.svg", FileFormat::Svg),
            (&text, "run.txt", FileFormat::Text),
            (&text, "run", FileFormat::Text),
            (&json, "run.out", FileFormat::Json),
            (&json, "run.html", FileFormat::Html),
        ] {
            assert_eq!(o.file_format(Path::new(name)), want, "{name}");
        }
    }
}
