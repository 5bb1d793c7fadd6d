//! `host` driver, like `docker run --network host`: client and server over one stack's lo.
//!
//! One namespace stands in for the host; client and server share its network stack and talk
//! over its loopback. No veth.

use anyhow::Result;

use crate::driver::Driver;
use crate::path::NetPath;

pub(super) fn build(run_id: &str) -> Result<NetPath> {
    let mut p = super::none::loopback_only(Driver::Host, run_id, "host")?;
    // That namespace is the host's.
    p.node_ns = Some(p.client_ns.clone());
    Ok(p)
}
