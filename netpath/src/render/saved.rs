//! A saved compare run (`compare --json`, `-o run.json`) read back for `netpath report`: its
//! record deserialised and rendered as the run rendered it.
use super::compare::{CompareOutput, full_text};

/// A saved run (`compare --json`, `-o run.json`) read back, for `netpath report`: rendered as
/// the run rendered it.
pub struct Saved {
    value: serde_json::Value,
    out: CompareOutput,
}

impl Saved {
    pub fn from_value(value: serde_json::Value) -> anyhow::Result<Saved> {
        use anyhow::Context as _;
        // The record's names are `&'static str` (hops, directions, counters): they borrow
        // from the text read, kept for the life of the process (one run read per process).
        let text: &'static str = Box::leak(value.to_string().into_boxed_str());
        let out = serde_json::from_str(text).context(
            "not the JSON of this netpath's `compare --json` (an older one's renders as HTML only)",
        )?;
        Ok(Saved { value, out })
    }

    /// On standard output: the record as it is, or its text (only the answer with `quiet`).
    pub fn print(&self, f: super::Format, quiet: bool) -> anyhow::Result<()> {
        use std::io::Write as _;
        let mut w = std::io::stdout().lock();
        match (f, quiet) {
            (super::Format::Json, _) => {
                writeln!(w, "{}", serde_json::to_string_pretty(&self.value)?)?
            }
            (super::Format::Text, true) => super::Render::answer(&self.out, &mut w)?,
            (super::Format::Text, false) => super::Render::full_text(&self.out, &mut w)?,
        }
        w.flush()?;
        Ok(())
    }

    /// The text a live run printed (with `verbose`, a `--verbose` run).
    pub fn text(&self, verbose: bool) -> anyhow::Result<String> {
        let mut buf = Vec::new();
        full_text(&mut buf, &self.out, verbose || self.out.verbose)?;
        Ok(String::from_utf8(buf)?)
    }

    /// The text with every driver's short block, however many drivers ran (the default
    /// prints them for up to `compare::BLOCKS_UP_TO`).
    pub fn text_with_blocks(&self) -> anyhow::Result<String> {
        let mut sink = super::compare::TextSink::new(false, 1);
        sink.blocks = true;
        let mut buf = Vec::new();
        super::compare::full_text_with(&mut buf, &self.out, sink)?;
        Ok(String::from_utf8(buf)?)
    }

    /// A file's bytes: the text, the record, the HTML report or its charts.
    pub fn file(&self, f: super::output::FileFormat) -> anyhow::Result<Vec<u8>> {
        use super::output::FileFormat;
        Ok(match f {
            FileFormat::Json => serde_json::to_string_pretty(&self.value)?.into_bytes(),
            FileFormat::Text => {
                let mut buf = Vec::new();
                super::Render::full_text(&self.out, &mut buf)?;
                buf
            }
            FileFormat::Html | FileFormat::Svg => {
                let view = super::CompareView::from_value(self.value.clone())?;
                super::page(&view, f)?.into_bytes()
            }
        })
    }
}
