//! `bridge` driver, like two containers on `docker0`.
//!
//! ```text
//!  np<id>-cli            np<id>-node                          np<id>-srv
//!  eth0 .2 ──veth── np<id>c ─┐                 ┌─ np<id>s ──veth── eth0 .3
//!                            └── np<id>br .1 ──┘
//!                         nft table ip netpath_<id>: masquerade + published-port DNAT
//! ```
//!
//! The node namespace stands in for the Docker host, so nothing is created in the
//! root namespace (where dockerd's FORWARD DROP + br_netfilter would bite).
//! The published drivers reuse [`build_net`] without the client container, egress and
//! gateway without the server container.

use std::net::{Ipv4Addr, SocketAddrV4};

use anyhow::{Context, Result};

use super::nft::{NatSpec, apply_docker_nat};
use super::{
    LAB_PORT, LabNamespaces, PUBLISHED_PORT, device_named, ifname, lab_subnet, lo_up, subnet_host,
};
use crate::driver::Driver;
use crate::sys::netns::{Netns, write_sysctl};
use crate::sys::nl::{Nl, links_in};
use crate::path::{Device, NetPath, Role};

/// MTU of Docker's default bridge network.
pub const BRIDGE_MTU: u32 = 1500;

/// The containers a bridge network gets: `cli` (.2) and `srv` (.3).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Containers {
    Both,
    /// The client only: its server is elsewhere (egress, gateway).
    Client,
    /// The server only: its client is the node (published drivers).
    Server,
}

/// A built bridge network: node with bridge + nft table, and its containers.
pub(super) struct BridgeNet {
    pub nss: LabNamespaces,
    pub node: Netns,
    pub cli: Option<Netns>,
    pub srv: Option<Netns>,
    pub subnet: (Ipv4Addr, u8),
    /// The bridge's address (the containers' gateway).
    pub gw: Ipv4Addr,
    /// `srv .3:LAB_PORT`, if there is a server container.
    pub server: Option<SocketAddrV4>,
    pub nft_table: String,
    /// Every device, read back from netlink: [cli lo, cli eth0, np<id>c,] np<id>br,
    /// [np<id>s, srv eth0, srv lo,] node lo.
    pub devices: Vec<Device>,
}

impl BridgeNet {
    /// The path from `client_ns` to the server container; the node, subnet and nft table
    /// set, `connect_to` and `published` left to the caller.
    pub(super) fn into_path(self, driver: Driver, run_id: &str, client_ns: Netns) -> Result<NetPath> {
        let srv = self.srv.clone().context("bridge network built without a server")?;
        let server = self.server.context("bridge network built without a server")?;
        Ok(self.fill(NetPath::new(driver, run_id, client_ns, srv, server)))
    }

    /// `p` (a new path, whose server may sit outside this network) with this network's node,
    /// subnet, nft table and devices (the caller adds devices elsewhere).
    pub(super) fn fill(self, mut p: NetPath) -> NetPath {
        p.devices = self.devices;
        p.node_ns = Some(self.node);
        p.subnet = Some(self.subnet);
        p.nft_table = Some(self.nft_table);
        p.keep = self.nss.into_keep();
        p
    }
}

pub(super) fn build(run_id: &str) -> Result<NetPath> {
    let b = build_net(run_id, Containers::Both)?;
    let cli = b.cli.clone().context("bridge network built without a client")?;
    let published = SocketAddrV4::new(b.gw, PUBLISHED_PORT);
    let mut p = b.into_path(Driver::Bridge, run_id, cli)?;
    p.published = Some(published);
    Ok(p)
}

pub(super) fn build_net(run_id: &str, containers: Containers) -> Result<BridgeNet> {
    let mut nss = LabNamespaces::new(run_id);
    let node = nss.create("node")?;
    let cli = match containers {
        Containers::Server => None,
        _ => Some(nss.create("cli")?),
    };
    let srv = match containers {
        Containers::Client => None,
        _ => Some(nss.create("srv")?),
    };

    let (net, plen) = lab_subnet(run_id);
    let gw = subnet_host(net, 1);
    let br_name = ifname(run_id, "br")?;
    let cli_port = ifname(run_id, "c")?;
    let srv_port = ifname(run_id, "s")?;

    let all: Vec<&Netns> = [Some(&node), cli.as_ref(), srv.as_ref()]
        .into_iter()
        .flatten()
        .collect();
    lo_up(&all)?;

    // Node: bridge with the gateway address, forwarding on, veths with the container
    // ends created straight inside the container namespaces as eth0.
    let mut ports = Vec::new();
    if let Some(cli) = &cli {
        ports.push((&cli_port, nss.fd(cli)?));
    }
    if let Some(srv) = &srv {
        ports.push((&srv_port, nss.fd(srv)?));
    }
    node.run(|| bridge_with_ports(&br_name, gw, plen, ports))
        .with_context(|| format!("setting up the bridge in {}", node.name))?;

    // Containers: address (.2 client, .3 server), up, default route via the bridge.
    let containers = [(cli.as_ref(), 2), (srv.as_ref(), 3)];
    for (ns, host) in containers.into_iter().filter_map(|(n, h)| Some((n?, h))) {
        super::address_eth0(ns, subnet_host(net, host), plen, Some(gw))?;
    }

    let server = srv
        .as_ref()
        .map(|_| SocketAddrV4::new(subnet_host(net, 3), LAB_PORT));
    let spec = NatSpec {
        run_id: run_id.to_string(),
        bridge: br_name.clone(),
        subnet: (net, plen),
        published_port: PUBLISHED_PORT,
        target: server,
    };
    node.run(|| apply_docker_nat(&spec))
        .with_context(|| format!("installing nft rules in {}", node.name))?;

    let devices = read_devices(
        &node,
        cli.as_ref(),
        srv.as_ref(),
        [&cli_port, &br_name, &srv_port],
    )?;
    Ok(BridgeNet {
        nss,
        node,
        cli,
        srv,
        subnet: (net, plen),
        gw,
        server,
        nft_table: spec.table_name(),
        devices,
    })
}

/// In the node's namespace: forwarding on, the bridge with the gateway address, and a veth
/// per port whose other end is `eth0` in the given container namespace.
fn bridge_with_ports(
    br_name: &str,
    gw: Ipv4Addr,
    plen: u8,
    ports: Vec<(&String, std::os::fd::BorrowedFd<'_>)>,
) -> Result<()> {
    write_sysctl("net.ipv4.ip_forward", "1")?;
    let nl = Nl::new()?;
    let br = nl.add_bridge(br_name)?;
    nl.add_addr(br.ifindex, gw, plen)?;
    nl.set_up(br.ifindex)?;
    for (port, fd) in ports {
        let p = nl.add_veth_into(port, "eth0", fd, BRIDGE_MTU)?;
        nl.enslave_up(p.ifindex, br.ifindex)?;
    }
    Ok(())
}

/// Every device of a bridge network, read back from netlink (ifindex, final MTU), in path
/// order: [cli lo, cli eth0, the client's port,] bridge, [the server's port, srv eth0, srv
/// lo,] node lo.
fn read_devices(
    node: &Netns,
    cli: Option<&Netns>,
    srv: Option<&Netns>,
    [cli_port, br, srv_port]: [&str; 3],
) -> Result<Vec<Device>> {
    let node_links = links_in(node)?;
    let mut devices = Vec::new();
    if let Some(cli) = cli {
        let cli_links = links_in(cli)?;
        devices.push(device_named(cli, &cli_links, "lo", Role::Link)?);
        devices.push(device_named(cli, &cli_links, "eth0", Role::Link)?);
        devices.push(device_named(node, &node_links, cli_port, Role::Link)?);
    }
    devices.push(device_named(node, &node_links, br, Role::Link)?);
    if let Some(srv) = srv {
        let srv_links = links_in(srv)?;
        devices.push(device_named(node, &node_links, srv_port, Role::Link)?);
        devices.push(device_named(srv, &srv_links, "eth0", Role::Link)?);
        devices.push(device_named(srv, &srv_links, "lo", Role::Link)?);
    }
    devices.push(device_named(node, &node_links, "lo", Role::Link)?);
    Ok(devices)
}
