//! `inspect`: what a container's packets go through, read from the kernel and the engine.
//!
//! Network mode, MTU (inside the container's namespace), the host end of each
//! veth and its bridge, VXLAN devices, published ports and the docker-proxy processes
//! serving them, the NAT rules that mention the container, RPS masks.

use std::net::Ipv4Addr;
use std::process::Command;

use anyhow::{Context, Result};

use super::resolve_container;
use crate::docker::{ContainerNet, Engine, Interface, NetAttachment, PortMapping};
use crate::harness::DevContext;
use crate::sys::netns::Netns;
use crate::sys::proxy::{ProxyProcess, proxy_processes};

/// One interface of the container and its other end.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, schemars::JsonSchema)]
pub struct InterfaceReport {
    pub name: String,
    pub kind: String,
    pub ifindex: u32,
    pub mtu: u32,
    pub addrs: Vec<String>,
    pub network: Option<String>,
    /// Host end: `netns/name (ifindex)`.
    pub peer: Option<String>,
    pub peer_kind: Option<String>,
    pub peer_mtu: Option<u32>,
    pub bridge: Option<String>,
    pub bridge_mtu: Option<u32>,
    pub vxlans: Vec<String>,
}

/// Everything `netpath docker inspect` prints.
#[derive(Clone, Debug, serde::Serialize, schemars::JsonSchema)]
pub struct InspectReport {
    pub container: String,
    pub id: String,
    pub pid: u32,
    pub network_mode: String,
    pub netns: String,
    pub netns_inum: u32,
    /// MTU of the container's first non-loopback interface (read in its namespace).
    pub mtu: Option<u32>,
    pub networks: Vec<NetAttachment>,
    pub interfaces: Vec<InterfaceReport>,
    pub ports: Vec<PortMapping>,
    /// docker-proxy processes forwarding to this container.
    pub proxies: Vec<ProxyProcess>,
    /// NAT rules (`iptables-save -t nat`, `nft list ruleset`) of the Docker host that
    /// mention the container's addresses or its published ports.
    pub nat_rules: Vec<String>,
    /// MTU and RPS masks of every device on the container's paths.
    pub devices: Vec<DevContext>,
    /// The resolved container (namespaces, links, peers).
    #[serde(skip)]
    pub net: Option<ContainerNet>,
    /// Who runs it and the pod it belongs to (set when found through
    /// [`runtime`](crate::runtime)).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub record: Option<super::Container>,
}

/// Inspect Docker container `name` (netpath's or not).
pub fn inspect_docker(engine: &Engine, name: &str) -> Result<InspectReport> {
    let c = resolve_container(engine, name)?;
    let host = Netns::at(&engine.host_netns_name, &engine.host_netns)?;
    Ok(inspect_net(&host, c))
}

/// Inspect a resolved container whose runtime's bridges and host-side links are in `host`.
pub fn inspect_net(host: &Netns, c: ContainerNet) -> InspectReport {
    let ips: Vec<Ipv4Addr> = c.networks.iter().filter_map(|n| n.ip).collect();
    let host_ports: Vec<u16> = c.ports.iter().map(|p| p.host_port).collect();
    let proxies: Vec<ProxyProcess> = proxy_processes()
        .into_iter()
        .filter(|p| {
            ips.iter().any(|ip| p.container_ip == ip.to_string())
                || (host_ports.contains(&p.host_port)
                    && c.ports.iter().any(|m| m.container_port == p.container_port))
        })
        .collect();
    let nat_rules = nat_rules(host, &ips, &host_ports)
        .unwrap_or_else(|e| vec![format!("(cannot read NAT rules: {e:#})")]);
    let devices = match dev_context(&c) {
        Ok(d) => d,
        Err(e) => {
            log::warn!("reading device settings of {}: {e:#}", c.name);
            Vec::new()
        }
    };
    let interfaces = c.interfaces.iter().map(interface_report).collect();
    let mtu = c
        .interfaces
        .iter()
        .find(|i| i.link.name != "lo")
        .map(|i| i.link.mtu);
    InspectReport {
        container: c.name.clone(),
        id: c.id.clone(),
        pid: c.pid,
        network_mode: c.network_mode.clone(),
        netns: c.netns_path.display().to_string(),
        netns_inum: c.netns_inum,
        mtu,
        networks: c.networks.clone(),
        interfaces,
        ports: c.ports.clone(),
        proxies,
        nat_rules,
        devices,
        net: Some(c),
        record: None,
    }
}

/// One interface of the container and its other end, as `inspect` reports it.
fn interface_report(i: &Interface) -> InterfaceReport {
    let peer = i.peer.as_ref();
    let bridge = peer.and_then(|p| p.bridge.as_ref());
    InterfaceReport {
        name: i.link.name.clone(),
        kind: if i.link.kind.is_empty() {
            "loopback".into()
        } else {
            i.link.kind.clone()
        },
        ifindex: i.link.ifindex,
        mtu: i.link.mtu,
        addrs: i
            .link
            .addrs
            .iter()
            .map(|(a, p)| format!("{a}/{p}"))
            .collect(),
        network: i.network.clone(),
        peer: peer.map(|p| format!("{}/{} ({})", p.netns, p.link.name, p.link.ifindex)),
        peer_kind: peer.map(|p| p.link.kind.clone()),
        peer_mtu: peer.map(|p| p.link.mtu),
        bridge: bridge.map(|b| b.name.clone()),
        bridge_mtu: bridge.map(|b| b.mtu),
        vxlans: peer
            .map(|p| p.vxlans.iter().map(|v| v.name.clone()).collect())
            .unwrap_or_default(),
    }
}

/// MTU and RPS masks of the container's devices, read from sysfs inside each device's
/// namespace (sysfs shows the namespace of whoever mounted it, so a thread gets its own
/// mount namespace and a fresh sysfs; where the sysfs on /sys already is that namespace's
/// the kernel refuses the mount with EBUSY and /sys is read as it is).
fn dev_context(c: &ContainerNet) -> Result<Vec<DevContext>> {
    let devices = c.devices();
    let mut out = Vec::new();
    for (name, path, inum) in c.namespaces().into_iter().chain(
        // --network host: lo of the host.
        c.host_network
            .then(|| (c.host_netns.clone(), c.netns_path.clone(), c.netns_inum)),
    ) {
        let devs: Vec<String> = devices
            .iter()
            .filter(|d| d.netns_inum == inum)
            .map(|d| d.name.clone())
            .collect();
        if devs.is_empty() {
            continue;
        }
        let got = Netns::at(&name, &path)?
            .run(|| {
                // Same reader as the run context of `compare` (harness/context.rs).
                crate::harness::context::private_sysfs()?;
                devs.iter()
                    .map(|d| {
                        let (mtu, rps) = crate::harness::context::read_dev(d)?;
                        let mtu = mtu.with_context(|| format!("{d}: no mtu in sysfs"))?;
                        Ok((d.clone(), mtu, rps))
                    })
                    .collect::<Result<Vec<_>>>()
            })
            .with_context(|| format!("reading device settings in {name}"))?;
        for (d, mtu, rps_cpus) in got {
            out.push(DevContext {
                netns: name.clone(),
                name: d,
                mtu,
                rps_cpus,
            });
        }
    }
    Ok(out)
}

/// NAT rules of the runtime's host namespace that mention one of `ips` or `ports`.
fn nat_rules(host: &Netns, ips: &[Ipv4Addr], ports: &[u16]) -> Result<Vec<String>> {
    let (ipt, nft) = host.run(|| {
        let run = |prog: &str, args: &[&str]| -> String {
            Command::new(prog)
                .args(args)
                .output()
                .ok()
                .filter(|o| o.status.success())
                .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
                .unwrap_or_default()
        };
        Ok((
            run("iptables-save", &["-t", "nat"]),
            run("nft", &["list", "ruleset"]),
        ))
    })?;
    let mut out = Vec::new();
    for (src, text) in [("iptables", &ipt), ("nft", &nft)] {
        for line in text.lines() {
            let l = line.trim();
            if l.starts_with('#') || l.is_empty() {
                continue;
            }
            if mentions(l, ips, ports) {
                out.push(format!("{src}: {l}"));
            }
        }
    }
    Ok(out)
}

/// True if `line` mentions one of the addresses (as a whole address) or ports (as
/// `--dport P`, `dport P` or `:P`).
pub fn mentions(line: &str, ips: &[Ipv4Addr], ports: &[u16]) -> bool {
    let bytes = line.as_bytes();
    let whole = |needle: &str| {
        let mut start = 0;
        while let Some(i) = line[start..].find(needle) {
            let a = start + i;
            let b = a + needle.len();
            let before_ok = a == 0 || !(bytes[a - 1].is_ascii_digit() || bytes[a - 1] == b'.');
            let after_ok = b >= bytes.len() || !(bytes[b].is_ascii_digit() || bytes[b] == b'.');
            if before_ok && after_ok {
                return true;
            }
            start = b;
        }
        false
    };
    ips.iter().any(|ip| whole(&ip.to_string()))
        || ports
            .iter()
            .filter(|p| **p != 0)
            .any(|p| whole(&format!("dport {p}")) || whole(&format!(":{p}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_whole_addresses_and_ports() {
        let ip: Ipv4Addr = "172.18.0.2".parse().unwrap();
        assert!(mentions(
            "-A DOCKER -d 127.0.0.1/32 ! -i br-1 -p tcp -m tcp --dport 40001 -j DNAT --to-destination 172.18.0.2:11111",
            &[ip],
            &[]
        ));
        assert!(!mentions("-A X -d 172.18.0.20/32 -j ACCEPT", &[ip], &[]));
        assert!(!mentions("-A X -d 172.18.0.21/32 -j ACCEPT", &[ip], &[]));
        assert!(mentions("-A X --dport 40001 -j DNAT", &[], &[40001]));
        assert!(!mentions("-A X --dport 400011 -j DNAT", &[], &[40001]));
    }
}
