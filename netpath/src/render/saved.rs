//! A saved compare run (`compare --json`, `-o run.json`) read back for `netpath report`: its
//! record deserialised and rendered as the run rendered it.
use super::compare::{CompareOutput, full_text};

/// A saved run (`compare --json`, `-o run.json`) read back, for `netpath report`: rendered as
/// the run rendered it.
pub struct Saved {
    /// The file's JSON, printed as it is (`--format json`, `-o x.json`).
    value: serde_json::Value,
    header: Option<crate::record::header::Header>,
    out: CompareOutput,
}

impl Saved {
    /// A saved compare read for `netpath <cmd>` (`record::saved::read_text_for`'s errors).
    pub fn read_for(path: &std::path::Path, cmd: &str, verb: &str) -> anyhow::Result<Saved> {
        use anyhow::Context as _;
        let text = crate::record::saved::read_text_for(path, cmd, verb)?;
        let not_one = || {
            format!(
                "{}: not the JSON of `netpath compare --json`",
                path.display()
            )
        };
        let value = serde_json::from_str(text).with_context(not_one)?;
        let run: crate::record::saved::SavedRun =
            serde_json::from_str(text).with_context(not_one)?;
        let out = serde_json::from_str(text).with_context(not_one)?;
        Ok(Saved {
            value,
            header: run.header,
            out,
        })
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
                super::page(&super::Run::of(self.header.as_ref(), &self.out), f)?.into_bytes()
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The older-format fixtures (no answer, no compensated figures, no protocol…) read as
    /// the records the run writes, and render as text and HTML.
    #[test]
    fn older_saved_files_read_as_the_written_records_and_render() {
        let data = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data");
        for f in [
            "compare-host.json",
            "compare-overlay-bridge.json",
            "compare-vm61.json",
        ] {
            let s = Saved::read_for(&data.join(f), "report", "renders").unwrap();
            assert!(s.header.is_some() && !s.out.drivers.is_empty(), "{f}");
            assert!(
                s.out.summary.rows.is_empty(),
                "{f}: an older file has no answer"
            );
            let html = s.file(crate::render::output::FileFormat::Html).unwrap();
            let html = String::from_utf8(html).unwrap();
            assert!(html.contains("This file holds no answer"), "{f}");
            assert!(html.contains("bridge"), "{f}");
            s.text(false).unwrap();
        }
    }
}
