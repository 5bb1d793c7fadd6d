//! Traffic harness: request/response over plain blocking sockets in the lab namespaces.

pub mod rr;

pub use rr::{NoPhases, Phases, RrConfig, RrResult, run_rr};
