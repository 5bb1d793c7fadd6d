//! `none` driver, like `docker run --network none`: one isolated namespace, only its lo.
//!
//! The only path Docker leaves such a container is lo, so the client and the server both
//! run inside it (there is no host side at all).
//!
//! ```text
//!  np<id>-ctr
//!  client ── lo 127.0.0.1 ── server
//! ```

use std::net::{Ipv4Addr, SocketAddrV4};

use anyhow::Result;

use super::{LAB_PORT, LabNamespaces, devices_in, lo_up};
use crate::driver::Driver;
use crate::path::{NetPath, Role};

pub(super) fn build(run_id: &str) -> Result<NetPath> {
    // No Docker host in the picture: the container's namespace is all there is.
    loopback_only(Driver::None, run_id, "ctr")
}

/// Client and server in one fresh namespace `np<id>-<role>`, over its loopback (also the
/// `host` driver's path).
pub(super) fn loopback_only(driver: Driver, run_id: &str, role: &str) -> Result<NetPath> {
    let mut nss = LabNamespaces::new(run_id);
    let ns = nss.create(role)?;
    lo_up(&[&ns])?;
    let addr = SocketAddrV4::new(Ipv4Addr::LOCALHOST, LAB_PORT);
    let mut p = NetPath::new(driver, run_id, ns.clone(), ns.clone(), addr);
    // Read after bringing it up (flags, MTU).
    p.devices = devices_in(&ns, &[("lo", Role::Link)])?;
    p.keep = nss.into_keep();
    Ok(p)
}
