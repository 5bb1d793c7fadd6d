//! Renderers of every command's results: `--format` and the dispatch to a format (`output`),
//! the text of each command (`text` for compare's run record, `trace`, `doctor`, `inspect`,
//! `bench`, `diff`, `tune`), the HTML report with its SVG charts, and the Prometheus
//! exposition of `serve`. They read the records (`report::DriverReport` and friends, each
//! command's result, the versioned JSON header in `report::header`); no record imports a
//! renderer, so a saved JSON renders the same as a live run.
pub mod answer;
pub mod bench;
pub mod block;
pub mod compare;
pub mod diff;
pub mod doctor;
pub mod export;
pub mod formats;
pub mod html;
pub mod inspect;
pub mod journey_svg;
pub mod markdown;
pub mod output;
pub mod pcapng;
pub mod perfetto;
pub mod progress;
pub mod prom;
pub mod prom_hist;
pub mod schema;
pub mod svg;
pub mod table;
pub mod trace;
pub mod tune;
pub mod validate;

pub use crate::record::view::CompareView;
pub use output::{Format, OutputArgs, Render, emit};

/// Writes the report files a compare run asked for (`--report`, `--svg`).
pub fn write_reports(
    view: &CompareView,
    html_out: Option<&std::path::Path>,
    svg_out: Option<&std::path::Path>,
) -> anyhow::Result<()> {
    use anyhow::Context as _;
    if let Some(p) = html_out {
        std::fs::write(p, html::page(view)?).with_context(|| format!("writing {}", p.display()))?;
    }
    if let Some(p) = svg_out {
        std::fs::write(p, svg::document(view)?)
            .with_context(|| format!("writing {}", p.display()))?;
    }
    Ok(())
}

/// An output file's directory must exist: checked before a long run, not after it.
pub fn check_output_path(flag: &str, p: &std::path::Path) -> anyhow::Result<()> {
    let dir = match p.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => std::path::Path::new("."),
    };
    if !dir.is_dir() {
        anyhow::bail!(
            "{flag} {}: directory {} does not exist; create it or pick another path",
            p.display(),
            dir.display()
        );
    }
    if p.is_dir() {
        anyhow::bail!("{flag} {}: is a directory; give a file name", p.display());
    }
    Ok(())
}

/// `netpath … | head`: the reader going away ends the output, it is no crash. The panic std
/// raises on the failed print still unwinds (through the lab cleanup's hook, which chains
/// this one, so a live lab is still removed); only its message is not printed.
pub fn quiet_broken_pipe() {
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let p = info.payload();
        let msg = p
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| p.downcast_ref::<&str>().copied())
            .unwrap_or("");
        if !(msg.starts_with("failed printing to stdout") && msg.contains("Broken pipe")) {
            default(info);
        }
    }));
}
