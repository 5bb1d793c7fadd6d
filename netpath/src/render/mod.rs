//! Renderers of a run's results, beside the text tables of `report`: the versioned JSON header
//! every command's JSON starts with, the HTML report with its SVG charts, and the Prometheus
//! exposition of `serve`. They read the same records (`report::DriverReport` and friends) so a
//! saved JSON renders the same as a live run.
pub mod header;

pub use header::{Header, to_json};
