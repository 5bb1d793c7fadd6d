//! `none` driver, like `docker run --network none`: one isolated namespace with nothing
//! but its loopback. The only path Docker leaves such a container is lo, so the client
//! and the server both run inside it (there is no host side at all).
//!
//! ```text
//!  np<id>-ctr
//!  client ── lo 127.0.0.1 ── server
//! ```

use std::net::{Ipv4Addr, SocketAddrV4};

use anyhow::{Context, Result};
use netpath_common::DevKind;

use super::{Driver, LAB_PORT, Lab, LabNamespaces, device, nl::Nl, quiet_ipv6};

pub(super) fn build(run_id: &str) -> Result<Lab> {
    let mut nss = LabNamespaces::new(run_id);
    let ns = nss.create("ctr")?;
    let lo = ns
        .run(|| {
            quiet_ipv6();
            Nl::new()?.lo_up()?;
            // Re-read after bringing it up (flags, MTU).
            Nl::new()?.require_link("lo")
        })
        .with_context(|| format!("setting up lo in {}", ns.name))?;
    let addr = SocketAddrV4::new(Ipv4Addr::LOCALHOST, LAB_PORT);
    Ok(Lab {
        driver: Driver::None,
        run_id: run_id.to_string(),
        client_ns: ns.clone(),
        server_ns: ns.clone(),
        server_bind: addr,
        connect_to: addr,
        devices: vec![device(&ns, &lo, DevKind::Loopback)],
        // No Docker host in the picture: the container's namespace is all there is.
        node_ns: None,
        published: None,
        subnet: None,
        nft_table: None,
        proxy_pid: None,
        nss,
    })
}
