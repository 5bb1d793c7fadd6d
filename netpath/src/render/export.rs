//! Files a run's sampled journeys are written to besides its `--format` output, for the
//! viewers people already use: pcap-ng (Wireshark, tshark) and Perfetto. Each has its flag
//! (`--pcapng FILE`, `--perfetto FILE`); [`Export::by_extension`] picks one from a file name,
//! for a general `-o FILE`.
use std::path::{Path, PathBuf};

use anyhow::Result;

use crate::record::Timeline;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Export {
    Pcapng,
    Perfetto,
}

impl Export {
    /// The export a file name asks for: `.pcapng`; `.perfetto-trace`, `.pftrace` or
    /// `.perfetto`. None for any other (the caller's own formats, or an error).
    pub fn by_extension(p: &Path) -> Option<Export> {
        let name = p.file_name()?.to_str()?.to_ascii_lowercase();
        if name.ends_with(".pcapng") {
            Some(Export::Pcapng)
        } else if [".perfetto-trace", ".pftrace", ".perfetto"]
            .iter()
            .any(|e| name.ends_with(e))
        {
            Some(Export::Perfetto)
        } else {
            None
        }
    }

    /// The flag that asks for it.
    pub fn flag(self) -> &'static str {
        match self {
            Export::Pcapng => "--pcapng",
            Export::Perfetto => "--perfetto",
        }
    }
}

/// The exports a command was asked for: each flag's file, and each `-o` file whose extension
/// names one (taken out of `outputs`: the result's own formats are written from what is
/// left), checked (its directory must exist).
pub fn asked(
    pcapng: Option<PathBuf>,
    perfetto: Option<PathBuf>,
    outputs: &mut Vec<PathBuf>,
) -> Result<Vec<(Export, PathBuf)>> {
    let mut v: Vec<(Export, PathBuf)> = [(Export::Pcapng, pcapng), (Export::Perfetto, perfetto)]
        .into_iter()
        .filter_map(|(e, p)| p.map(|p| (e, p)))
        .collect();
    outputs.retain(|p| match Export::by_extension(p) {
        Some(e) => {
            v.push((e, p.clone()));
            false
        }
        None => true,
    });
    for (e, p) in &v {
        super::check_output_path(e.flag(), p)?;
    }
    Ok(v)
}

/// Writes each asked export of the runs (`(label, timelines)`: a driver's or the containers'
/// sampled journeys); returns a line per file for people.
pub fn write(asked: &[(Export, PathBuf)], runs: &[(&str, &[Timeline])]) -> Result<Vec<String>> {
    let n: usize = runs.iter().map(|(_, t)| t.len()).sum();
    let mut lines = Vec::new();
    for (e, p) in asked {
        match e {
            Export::Pcapng => {
                let runs: Vec<_> = (runs.iter())
                    .map(|&(label, timelines)| super::pcapng::Run { label, timelines })
                    .collect();
                let offset = crate::record::header::read_clock().monotonic_to_utc_offset_ns;
                super::pcapng::write_file(p, &runs, offset)?;
                lines.push(format!(
                    "wrote {n} packets with their hops to {} (pcap-ng)",
                    p.display()
                ));
            }
            Export::Perfetto => {
                let runs: Vec<_> = (runs.iter())
                    .map(|&(label, timelines)| super::perfetto::Run { label, timelines })
                    .collect();
                super::perfetto::write_file(p, &runs)?;
                lines.push(format!(
                    "wrote {n} journeys to {} (Perfetto: open it in ui.perfetto.dev)",
                    p.display()
                ));
            }
        }
    }
    Ok(lines)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_extension_picks_the_export() {
        let by = |s: &str| Export::by_extension(Path::new(s));
        assert_eq!(by("/tmp/x.pcapng"), Some(Export::Pcapng));
        assert_eq!(by("run.PCAPNG"), Some(Export::Pcapng));
        assert_eq!(by("run.perfetto-trace"), Some(Export::Perfetto));
        assert_eq!(by("run.pftrace"), Some(Export::Perfetto));
        assert_eq!(by("run.pcap"), None);
        assert_eq!(by("run.html"), None);
    }
}
