//! `trace --container C --port P` where P is a port C publishes on the Docker host: the
//! traffic a user sends to `127.0.0.1:P` from the host crosses the host's loopback to
//! docker-proxy, which opens its own connection to the container's port (or, with
//! `--userland-proxy=false`, is DNATed straight there). Followed here: the host's `lo`
//! joins the watched devices, the proxy's threads are traced as a relay (its receive on the
//! front connection continues as its send on the back one: the `proxy` hop), and the
//! container's side of the mapping passes the port filter too.

use anyhow::{Context, Result};

use super::Engine;
use super::container::ContainerNet;
use crate::path::{Device, Role};
use crate::sys::netns::Netns;
use crate::sys::nl::links_in;
use crate::sys::proxy::{ProxyProcess, proxy_processes};

/// A published port of a container, as a trace follows it.
pub struct PublishedLeg {
    pub container: String,
    pub host_ip: String,
    pub host_port: u16,
    pub container_port: u16,
    pub proto: String,
    /// docker-proxy processes serving this mapping (none with `--userland-proxy=false`).
    pub proxies: Vec<ProxyProcess>,
    /// `lo` of the Docker host's namespace: the client's leg to the proxy.
    pub host_lo: Device,
    /// Gateway of the container's network: where docker-proxy (or the NAT) reaches the
    /// container from, so the second leg is told from other clients of its port.
    pub gateway: Option<std::net::Ipv4Addr>,
}

/// The mapping of `c` whose host port is `port`, if it publishes one.
pub fn published_leg(engine: &Engine, c: &ContainerNet, port: u16) -> Result<Option<PublishedLeg>> {
    let Some(m) = c.ports.iter().find(|m| m.host_port == port) else {
        return Ok(None);
    };
    let host = Netns::at(&engine.host_netns_name, &engine.host_netns)?;
    let links = links_in(&host)?;
    let lo = links
        .iter()
        .find(|l| l.loopback)
        .with_context(|| format!("no loopback device in {}", host.name))?;
    let host_lo =
        Device::of((&host.name, host.inum), lo, Role::Link).context("the Docker host's lo")?;
    let ip = c.ip().map(|a| a.to_string());
    let proxies = proxy_processes()
        .into_iter()
        .filter(|p| {
            p.netns_inum == host.inum
                && p.host_port == port
                && p.container_port == m.container_port
                && ip.as_ref().is_none_or(|ip| *ip == p.container_ip)
        })
        .collect();
    Ok(Some(PublishedLeg {
        container: c.name.clone(),
        host_ip: m.host_ip.clone(),
        host_port: port,
        container_port: m.container_port,
        proto: m.proto.clone(),
        proxies,
        host_lo,
        gateway: c
            .networks
            .iter()
            .find(|n| n.ip.is_some())
            .and_then(|n| n.gateway),
    }))
}

impl PublishedLeg {
    /// One line: what is followed, and which port the container side uses.
    pub fn describe(&self) -> String {
        let via = match self.proxies.as_slice() {
            [] => "no docker-proxy (userland proxy off: DNAT on the host)".to_string(),
            ps => {
                let pids: Vec<String> = ps.iter().map(|p| p.pid.to_string()).collect();
                format!("docker-proxy (pid {})", pids.join(", "))
            }
        };
        format!(
            "{}:{} is published by {}: host lo → {via} → container port {}/{}",
            if self.host_ip.is_empty() {
                "*"
            } else {
                &self.host_ip
            },
            self.host_port,
            self.container,
            self.container_port,
            self.proto
        )
    }

    pub fn relay_pids(&self) -> Vec<u32> {
        self.proxies.iter().map(|p| p.pid).collect()
    }
}
