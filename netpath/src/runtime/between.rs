//! `compare --between A B`: the path between two running containers netpath did not start,
//! whatever runs them (each name resolved by the [`Node`]).
//!
//! The harness's client runs in A's namespace and its server in B's, as threads of netpath (so
//! the tracer follows them like the lab's), bound to B's address on a network both share.
//! Nothing is created in Docker or on the host, and nothing is left behind.

use std::net::{Ipv4Addr, SocketAddrV4, TcpListener};

use anyhow::{Context, Result, bail};

use super::{Node, Runtime, host_netns};
use crate::docker::{ContainerNet, hold_paths_in};
use crate::driver::Driver;
use crate::lab::new_run_id;
use crate::path::{Keep, NetPath};
use crate::sys::netns::Netns;

/// The path between two containers (which tears nothing down), and the driver their shared
/// path is an instance of.
pub struct Between {
    pub path: NetPath,
    /// `A→B (driver via network)`, the row's name in reports.
    pub label: String,
}

/// `compare --between CLIENT SERVER`, whatever runs them: the path between them on a network
/// both are on (the server's address there), or loopback when both share the host's namespace.
pub fn between(node: &mut Node, client: &str, server: &str) -> Result<Between> {
    let c = node.resolve(client)?;
    let s = node.resolve(server)?;
    let docker = c.record.runtime == Runtime::Docker && s.record.runtime == Runtime::Docker;
    let host = if docker {
        let e = node.engine()?;
        Netns::at(&e.host_netns_name, &e.host_netns)?
    } else {
        host_netns()?
    };
    between_nets(&host, &c.net, &s.net, (client, server))
}

/// [`between`] two resolved containers (Docker's or any runtime's) whose runtime's host
/// namespace is `host`; `names` as the user gave them, for messages.
pub fn between_nets(
    host: &Netns,
    c: &ContainerNet,
    s: &ContainerNet,
    names: (&str, &str),
) -> Result<Between> {
    let (client, server) = names;
    let (driver, ip, via) = if c.host_network && s.host_network {
        (Driver::Host, Ipv4Addr::LOCALHOST, "host".to_string())
    } else {
        let net = s
            .networks
            .iter()
            .filter(|n| n.ip.is_some())
            .find(|n| c.networks.iter().any(|m| m.network_id == n.network_id))
            .with_context(|| {
                // Docker's containers have its sandbox key; a pod's network is its bridge.
                if c.sandbox_key.is_some() {
                    format!(
                        "containers {client} and {server} share no Docker network with an \
                         IPv4 address: connect them first (docker network connect NETWORK \
                         {client})"
                    )
                } else {
                    format!(
                        "containers {client} and {server} share no bridge with an IPv4 \
                         address: put them on one network"
                    )
                }
            })?;
        (
            // A network whose interface names no driver is taken for a bridge.
            s.driver(Some(&net.name)).unwrap_or(Driver::Bridge),
            net.ip.expect("filtered"),
            net.name.clone(),
        )
    };
    let host_used = c.host_network && s.host_network;
    let (held, devices) = hold_paths_in(host, &[c, s], host_used)?;
    if devices.is_empty() {
        bail!("no network device found on the path {client} → {server}");
    }
    let ns = |cn: &ContainerNet| {
        let name = cn.netns_name();
        held.iter()
            .find(|h| h.ns.name == name)
            .map(|h| h.ns.clone())
            .with_context(|| format!("namespace of container {}", cn.name))
    };
    let (client_ns, server_ns) = (ns(c)?, ns(s)?);
    // A port free on the server's address now; the harness binds it right after.
    let port = server_ns.run(|| {
        let l = TcpListener::bind((ip, 0))
            .with_context(|| format!("cannot bind {ip} in container {server}"))?;
        Ok(l.local_addr()?.port())
    })?;
    let addr = SocketAddrV4::new(ip, port);
    let mut path = NetPath::new(driver, &new_run_id()?, client_ns, server_ns, addr);
    path.devices = devices;
    path.keep = Keep::held(held);
    Ok(Between {
        label: format!("{}→{} ({} via {via})", c.name, s.name, driver.name()),
        path,
    })
}
