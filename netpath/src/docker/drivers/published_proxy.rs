//! `published-proxy` on Docker: a port published through Docker's own docker-proxy.
//!
//! The server's port is published on `127.0.0.1:P`; the client runs on the Docker host.

use anyhow::{Result, bail};

use super::{Build, free_port_here};
use crate::path::NetPath;
use crate::sys::proxy::proxy_processes;

pub(super) fn build(b: &mut Build<'_>) -> Result<NetPath> {
    let port = free_port_here()?;
    let mut p = super::bridge::published(b, port)?;
    p.proxy_pid = Some(wait_proxy_pid(port)?);
    Ok(p)
}

/// The docker-proxy process serving `127.0.0.1:port` (Docker starts it before the
/// container start returns; give it a moment anyway).
fn wait_proxy_pid(port: u16) -> Result<u32> {
    for _ in 0..50 {
        if let Some(p) = proxy_processes()
            .into_iter()
            .find(|p| p.host_port == port && p.host_ip == "127.0.0.1")
        {
            return Ok(p.pid);
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    bail!(
        "no docker-proxy serving 127.0.0.1:{port} (is the daemon running with --userland-proxy=false?)"
    )
}
