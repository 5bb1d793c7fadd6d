//! `host` driver, like `docker run --network host`: client and server share one network
//! stack (one namespace standing in for the host) and talk over its loopback. No veth.

use std::net::{Ipv4Addr, SocketAddrV4};

use anyhow::Result;
use netpath_common::DevKind;

use super::{Driver, LAB_PORT, Lab, LabNamespaces, device, nl::Nl, quiet_ipv6};

pub(super) fn build(run_id: &str) -> Result<Lab> {
    let mut nss = LabNamespaces::new(run_id);
    let ns = nss.create("host")?;
    let lo = ns.run(|| {
        quiet_ipv6();
        Nl::new()?.lo_up()?;
        // Re-read after bringing it up (flags, MTU).
        Nl::new()?.require_link("lo")
    })?;
    let addr = SocketAddrV4::new(Ipv4Addr::LOCALHOST, LAB_PORT);
    Ok(Lab {
        driver: Driver::Host,
        run_id: run_id.to_string(),
        client_ns: ns.clone(),
        server_ns: ns.clone(),
        server_bind: addr,
        connect_to: addr,
        devices: vec![device(&ns, &lo, DevKind::Loopback)],
        node_ns: Some(ns),
        published: None,
        subnet: None,
        nft_table: None,
        proxy_pid: None,
        nss,
    })
}
