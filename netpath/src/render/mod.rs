//! Renderers of every command's results: `--format` and the dispatch to a format (`output`),
//! the text of each command (`text` for compare's run record, `trace`, `doctor`, `inspect`,
//! `bench`, `diff`, `tune`), the HTML report with its SVG charts, and the Prometheus
//! exposition of `serve`. They read the records (`record::DriverReport` and friends, each
//! command's result, the versioned JSON header in `record::header`); no record imports a
//! renderer, so a saved JSON renders the same as a live run.
pub mod answer;
pub mod bench;
pub mod block;
pub mod cleanup;
pub mod compare;
pub mod diff;
pub mod doctor;
pub mod export;
pub mod formats;
pub mod html;
pub mod html_answer;
pub mod inspect;
pub mod journey_svg;
pub mod markdown;
pub mod output;
pub mod pcapng;
pub mod perfetto;
pub mod progress;
pub mod prom;
pub mod prom_hist;
pub mod readme;
pub mod saved;
pub mod schema;
pub mod several;
pub mod svg;
pub mod table;
pub mod trace;
pub mod tune;
pub mod validate;

pub use output::{Format, OutputArgs, Render};

/// What a page shows of a compare run, borrowed from its records as written: the run's
/// header (None: a file written before netpath's versioned output) and its result.
pub struct Run<'a> {
    pub header: Option<&'a crate::record::header::Header>,
    pub summary: &'a crate::measure::answer::Summary,
    pub backend: crate::probe::backend::Backend,
    pub drivers: &'a [crate::record::DriverReport],
}

impl<'a> Run<'a> {
    pub fn of(
        header: Option<&'a crate::record::header::Header>,
        out: &'a compare::CompareOutput,
    ) -> Run<'a> {
        Run {
            header,
            summary: &out.summary,
            backend: out.backend,
            drivers: &out.drivers,
        }
    }

    /// Hop names in the order they first appear, for one colour per hop across every chart.
    pub fn hop_order(&self) -> Vec<&'static str> {
        crate::record::saved::hop_order(self.drivers)
    }
}

/// A compare run as its HTML report or its SVG charts.
pub fn page(view: &Run, f: output::FileFormat) -> anyhow::Result<String> {
    match f {
        output::FileFormat::Html => html::page(view),
        output::FileFormat::Svg => svg::document(view),
        other => anyhow::bail!("{other:?} is no page"),
    }
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
/// this one, so a live lab is still removed); only its message is not printed, and `main`
/// exits 0 (`is_pipe_panic`).
pub fn quiet_broken_pipe() {
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        if !pipe_message(panic_text(info.payload())) {
            default(info);
        }
    }));
}

fn panic_text(p: &(dyn std::any::Any + Send)) -> &str {
    p.downcast_ref::<String>()
        .map(String::as_str)
        .or_else(|| p.downcast_ref::<&str>().copied())
        .unwrap_or("")
}

fn pipe_message(msg: &str) -> bool {
    msg.starts_with("failed printing to stdout") && msg.contains("Broken pipe")
}

/// A panic of `println!` on a closed standard output.
pub fn is_pipe_panic(p: &(dyn std::any::Any + Send)) -> bool {
    pipe_message(panic_text(p))
}

/// An error that is a write to a closed pipe, anywhere in its chain.
pub fn is_broken_pipe(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        c.downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
    })
}
