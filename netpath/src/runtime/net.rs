//! The network side of a container no Docker engine describes (containerd's, a pod's, one
//! found by its cgroup): read from its network namespace and the host's. Its networks are the
//! bridges its interfaces' other ends are ports of (a CNI bridge: `cni0`, or the bridge a
//! plugin config names), so two pods on one bridge share a network as two Docker containers
//! on one Docker network do.

use std::path::PathBuf;

use anyhow::{Context as _, Result, bail};

use super::Container;
use super::proc_root;
use crate::docker::{ContainerNet, NetAttachment};
use crate::sys::netns::{Netns, ns_inum};

/// Where CNI runtimes (and `ip netns`) bind-mount pod network namespaces.
const NETNS_DIR: &str = "/run/netns";

/// The network view of `c` (not Docker's: [`Node::resolve`] asks Docker for those), with
/// `host` the namespace its runtime's bridges live in.
pub fn net_of(c: &Container, host: &Netns) -> Result<ContainerNet> {
    let Some(pid) = c.pid else {
        bail!("container {} has no running task", c.display());
    };
    let netns_path = proc_root().join(pid.to_string()).join("ns/net");
    let netns_inum = ns_inum(&netns_path)
        .with_context(|| format!("container {} stopped (pid {pid} gone)", c.display()))?;
    let host_network = netns_inum == host.inum;
    // A pod's namespace is the pod's, whichever of its containers was named.
    let name = match &c.pod {
        Some(p) => p.path(),
        None => c.name.clone(),
    };
    let mut cn = ContainerNet {
        id: c.id.clone(),
        name,
        pid,
        network_mode: network_mode(netns_inum, host_network),
        host_network,
        netns_path,
        netns_inum,
        sandbox_key: None,
        networks: Vec::new(),
        interfaces: Vec::new(),
        ports: Vec::new(),
        host_netns: host.name.clone(),
    };
    let dirs = [PathBuf::from(NETNS_DIR)];
    let mut interfaces = crate::docker::interfaces_with((&host.name, &host.path), &dirs, &cn)
        .with_context(|| format!("reading the interfaces of {}", c.display()))?;
    for i in &mut interfaces {
        let Some(bridge) = i
            .peer
            .as_ref()
            .and_then(|p| p.bridge.as_ref().map(|b| (p, b)))
        else {
            continue;
        };
        let Some(&(ip, prefix)) = i.link.addrs.first() else {
            continue;
        };
        let (peer, br) = bridge;
        i.network = Some(br.name.clone());
        cn.networks.push(NetAttachment {
            name: br.name.clone(),
            // One bridge in one namespace is one network.
            network_id: format!("{}:{}", peer.netns_inum, br.ifindex),
            ip: Some(ip),
            prefix_len: Some(prefix),
            gateway: None,
            mac: None,
        });
    }
    cn.interfaces = interfaces;
    Ok(cn)
}

/// `host`, `netns:<name>` when the namespace is bind-mounted in `/run/netns` (as CNI
/// runtimes do), else `private`.
fn network_mode(inum: u32, host_network: bool) -> String {
    if host_network {
        return "host".into();
    }
    let named = std::fs::read_dir(NETNS_DIR).ok().and_then(|rd| {
        rd.filter_map(|e| e.ok()).find_map(|e| {
            let p = e.path();
            (ns_inum(&p).ok()? == inum).then(|| e.file_name().to_string_lossy().into_owned())
        })
    });
    named.map_or_else(|| "private".into(), |n| format!("netns:{n}"))
}
