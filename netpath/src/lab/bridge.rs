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
//! The published drivers reuse [`build_net`] without the client container.

use std::net::{Ipv4Addr, SocketAddrV4};

use anyhow::{Context, Result};
use netpath_common::DevKind;

use super::nft::{NatSpec, apply_docker_nat};
use super::nl::{Nl, write_sysctl};
use super::{
    Driver, LAB_PORT, Lab, LabDevice, LabNamespaces, Netns, PUBLISHED_PORT, device_named, ifname,
    lab_subnet, quiet_ipv6, subnet_host,
};

/// MTU of Docker's default bridge network.
pub const BRIDGE_MTU: u32 = 1500;

/// A built bridge network: node with bridge + nft table, the server container and
/// optionally the client container.
pub(super) struct BridgeNet {
    pub nss: LabNamespaces,
    pub node: Netns,
    pub cli: Option<Netns>,
    pub srv: Netns,
    pub subnet: (Ipv4Addr, u8),
    /// The bridge's address (the containers' gateway).
    pub gw: Ipv4Addr,
    /// `srv .3:LAB_PORT`.
    pub server: SocketAddrV4,
    pub nft_table: String,
    /// Every device, read back from netlink: [cli lo, cli eth0, np<id>c,] np<id>br,
    /// np<id>s, srv eth0, srv lo, node lo.
    pub devices: Vec<LabDevice>,
}

pub(super) fn build(run_id: &str) -> Result<Lab> {
    let b = build_net(run_id, true)?;
    let cli = b.cli.context("bridge network built without a client")?;
    Ok(Lab {
        driver: Driver::Bridge,
        run_id: run_id.to_string(),
        client_ns: cli,
        server_ns: b.srv,
        server_bind: b.server,
        connect_to: b.server,
        devices: b.devices,
        node_ns: Some(b.node),
        published: Some(SocketAddrV4::new(b.gw, PUBLISHED_PORT)),
        subnet: Some(b.subnet),
        nft_table: Some(b.nft_table),
        proxy_pid: None,
        nss: b.nss,
    })
}

pub(super) fn build_net(run_id: &str, with_client: bool) -> Result<BridgeNet> {
    let mut nss = LabNamespaces::new(run_id);
    let node = nss.create("node")?;
    let cli = if with_client {
        Some(nss.create("cli")?)
    } else {
        None
    };
    let srv = nss.create("srv")?;

    let (net, plen) = lab_subnet(run_id);
    let gw = subnet_host(net, 1);
    let cli_ip = subnet_host(net, 2);
    let srv_ip = subnet_host(net, 3);
    let br_name = ifname(run_id, "br")?;
    let cli_port = ifname(run_id, "c")?;
    let srv_port = ifname(run_id, "s")?;

    for ns in [Some(&node), cli.as_ref(), Some(&srv)]
        .into_iter()
        .flatten()
    {
        ns.run(|| {
            quiet_ipv6();
            Nl::new()?.lo_up()
        })
        .with_context(|| format!("setting up {}", ns.name))?;
    }

    // Node: bridge with the gateway address, forwarding on, veths with the container
    // ends created straight inside the container namespaces as eth0.
    let mut ports = Vec::new();
    if let Some(cli) = &cli {
        ports.push((&cli_port, nss.fd(cli)?));
    }
    ports.push((&srv_port, nss.fd(&srv)?));
    node.run(|| {
        write_sysctl("net.ipv4.ip_forward", "1")?;
        let nl = Nl::new()?;
        let br = nl.add_bridge(&br_name)?;
        nl.add_addr(br.ifindex, gw, plen)?;
        nl.set_up(br.ifindex)?;
        for (port, fd) in ports {
            let p = nl.add_veth_into(port, "eth0", fd, BRIDGE_MTU)?;
            nl.enslave_up(p.ifindex, br.ifindex)?;
        }
        Ok(())
    })
    .with_context(|| format!("setting up the bridge in {}", node.name))?;

    // Containers: address, up, default route via the bridge.
    let containers = cli
        .iter()
        .map(|c| (c, cli_ip))
        .chain([(&srv, srv_ip)])
        .collect::<Vec<_>>();
    for (ns, ip) in containers {
        super::address_eth0(ns, ip, plen, Some(gw))?;
    }

    let server = SocketAddrV4::new(srv_ip, LAB_PORT);
    let spec = NatSpec {
        run_id: run_id.to_string(),
        bridge: br_name.clone(),
        subnet: (net, plen),
        published_port: PUBLISHED_PORT,
        target: server,
    };
    node.run(|| apply_docker_nat(&spec))
        .with_context(|| format!("installing nft rules in {}", node.name))?;

    // Read every device back from netlink (ifindex, final MTU).
    let mut devices = Vec::new();
    let node_links = super::links_in(&node)?;
    let srv_links = super::links_in(&srv)?;
    if let Some(cli) = &cli {
        let cli_links = super::links_in(cli)?;
        devices.push(device_named(cli, &cli_links, "lo", DevKind::Loopback)?);
        devices.push(device_named(cli, &cli_links, "eth0", DevKind::Veth)?);
        devices.push(device_named(
            &node,
            &node_links,
            &cli_port,
            DevKind::BridgePort,
        )?);
    }
    devices.push(device_named(&node, &node_links, &br_name, DevKind::Bridge)?);
    devices.push(device_named(
        &node,
        &node_links,
        &srv_port,
        DevKind::BridgePort,
    )?);
    devices.push(device_named(&srv, &srv_links, "eth0", DevKind::Veth)?);
    devices.push(device_named(&srv, &srv_links, "lo", DevKind::Loopback)?);
    devices.push(device_named(&node, &node_links, "lo", DevKind::Loopback)?);

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
