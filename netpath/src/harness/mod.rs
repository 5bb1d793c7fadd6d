//! Traffic harness: request/response over plain blocking sockets in the lab namespaces (TCP,
//! UDP, ICMP echo; one receiver loop for every wait mode), bulk and burst phases, and the
//! counters read around them. `run_rr` dispatches on the protocol.

pub mod bulk;
pub mod burst;
mod conns;
pub mod context;
pub mod dgram;
pub mod icmp;
pub mod proto;
pub mod rr;
mod server;
pub mod speed;
pub mod supported;
pub mod tcp;
pub mod wait;

use anyhow::{Result, bail};

pub use crate::options::{Cpus, Pin};
pub use bulk::{BulkConfig, BulkResult, StreamResult, run_bulk, run_bulk_to, tcp_info};
pub use burst::{
    BurstConfig, BurstResult, run_burst, run_burst_phases, run_burst_to, scheduled_requests,
};
pub use context::{DevContext, NetCounters, device_context, read_counters};
pub use proto::Proto;
pub use rr::{NoPhases, Phases, RrConfig, RrLoad, RrResult};
pub use tcp::{echo, echo_with};
pub use wait::WaitMode;

use crate::path::NetPath;

/// Runs the ping-pong from `lab.client_ns` to `lab.connect_to`, served on `lab.server_bind`
/// in `lab.server_ns` (ICMP: answered by the target's kernel), in `cfg.proto`.
pub fn run_rr(lab: &NetPath, cfg: &RrConfig, phases: &dyn Phases) -> Result<RrResult> {
    if cfg.load.req_size == 0 || cfg.load.resp_size == 0 {
        bail!("request and response sizes must be at least 1 byte");
    }
    if lab.server_bind.ip().is_unspecified() {
        bail!("refusing to bind the lab server to a wildcard address");
    }
    supported::check_sizes(cfg.proto, cfg.load.req_size, cfg.load.resp_size)?;
    let run = &rr::Run::new(lab, cfg, phases);
    match cfg.proto {
        Proto::Tcp => tcp::run_tcp(run),
        Proto::Udp => dgram::run_udp(run),
        Proto::Icmp => icmp::run_icmp(run),
    }
}
