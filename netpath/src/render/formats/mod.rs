//! The output formats, registered one line each in `formats!` below (the line declares the
//! writer's file too): a new format is its file here and one line. `Render` is what every
//! result gives them: its JSON `kind`, its serde form, and its text.

use std::io::Write;

use anyhow::Result;
use serde::Serialize;

/// A result every format can show: the `kind` its JSON header names, and its text. Its
/// JSON Schema is derived from the type (`render::schema`).
pub trait Render: Serialize + schemars::JsonSchema {
    const KIND: &'static str;
    /// What standard output gets at the end of a text run.
    fn text(&self, w: &mut dyn Write) -> std::io::Result<()>;
    /// What `-q` prints: the answer alone (nothing where the exit status says it).
    fn answer(&self, w: &mut dyn Write) -> std::io::Result<()> {
        self.text(w)
    }
    /// A text file (`-o run.txt`): everything the run printed, also the lines it printed
    /// while it went on.
    fn full_text(&self, w: &mut dyn Write) -> std::io::Result<()> {
        self.text(w)
    }
    /// The HTML report or its SVG charts (`-o run.html`, `-o run.svg`), for results that
    /// have them.
    fn page(
        &self,
        _backend: Option<&str>,
        _f: super::output::FileFormat,
    ) -> Option<anyhow::Result<String>> {
        None
    }
}

/// Declares each format's module and variant (its doc comment is its `--format` help) and the
/// dispatch to the module's `write`.
macro_rules! formats {
    ($($(#[$m:meta])* $name:ident => $module:ident,)*) => {
        $(pub mod $module;)*

        #[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
        pub enum Format {
            $($(#[$m])* $name,)*
        }

        impl Format {
            /// Writes `r` to `w` in this format (`backend`: the probe backend that produced
            /// it, None for outputs that load no programs).
            pub fn write<T: Render>(
                self,
                w: &mut dyn Write,
                backend: Option<&str>,
                r: &T,
            ) -> Result<()> {
                match self {
                    $(Format::$name => $module::write(w, backend, r),)*
                }
            }
        }
    };
}

formats! {
    /// Tables and lines for people.
    #[default]
    Text => text,
    /// One JSON document with the versioned header (the schemas under `schemas/`).
    Json => json,
}
