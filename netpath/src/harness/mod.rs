//! Traffic harness: request/response over plain blocking sockets in the lab namespaces.

pub mod bulk;
pub mod burst;
mod conns;
pub mod context;
pub mod rr;

pub use bulk::{BulkConfig, BulkResult, StreamResult, run_bulk, run_bulk_to, tcp_info};
pub use burst::{
    BurstConfig, BurstResult, run_burst, run_burst_phases, run_burst_to, scheduled_requests,
};
pub use context::{DevContext, NetCounters, device_context, read_counters};
pub use rr::{NoPhases, Phases, RrConfig, RrResult, run_rr};
