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

use std::net::SocketAddrV4;

use anyhow::{Context, Result};
use netpath_common::DevKind;

use super::nft::{NatSpec, apply_docker_nat};
use super::nl::{LinkSnapshot, Nl, write_sysctl};
use super::{
    Driver, LAB_PORT, Lab, LabDevice, LabNamespaces, Netns, PUBLISHED_PORT, device, ifname,
    lab_subnet, quiet_ipv6, subnet_host,
};

/// MTU of Docker's default bridge network.
pub const BRIDGE_MTU: u32 = 1500;

pub(super) fn build(run_id: &str) -> Result<Lab> {
    let mut nss = LabNamespaces::new(run_id);
    let node = nss.create("node")?;
    let cli = nss.create("cli")?;
    let srv = nss.create("srv")?;

    let (net, plen) = lab_subnet(run_id);
    let gw = subnet_host(net, 1);
    let cli_ip = subnet_host(net, 2);
    let srv_ip = subnet_host(net, 3);
    let br_name = ifname(run_id, "br")?;
    let cli_port = ifname(run_id, "c")?;
    let srv_port = ifname(run_id, "s")?;

    for ns in [&node, &cli, &srv] {
        ns.run(|| {
            quiet_ipv6();
            Nl::new()?.lo_up()
        })
        .with_context(|| format!("setting up {}", ns.name))?;
    }

    // Node: bridge with the gateway address, forwarding on, veths with the container
    // ends created straight inside the container namespaces as eth0.
    let cli_fd = nss.fd(&cli)?;
    let srv_fd = nss.fd(&srv)?;
    node.run(|| {
        write_sysctl("net.ipv4.ip_forward", "1")?;
        let nl = Nl::new()?;
        let br = nl.add_bridge(&br_name)?;
        nl.add_addr(br.ifindex, gw, plen)?;
        nl.set_up(br.ifindex)?;
        for (port, fd) in [(&cli_port, cli_fd), (&srv_port, srv_fd)] {
            let p = nl.add_veth_into(port, "eth0", fd, BRIDGE_MTU)?;
            nl.enslave_up(p.ifindex, br.ifindex)?;
        }
        Ok(())
    })
    .with_context(|| format!("setting up the bridge in {}", node.name))?;

    // Containers: address, up, default route via the bridge.
    for (ns, ip) in [(&cli, cli_ip), (&srv, srv_ip)] {
        ns.run(|| {
            let nl = Nl::new()?;
            let eth0 = nl.require_link("eth0")?;
            nl.add_addr(eth0.ifindex, ip, plen)?;
            nl.set_up(eth0.ifindex)?;
            nl.add_default_route(gw)?;
            Ok(())
        })
        .with_context(|| format!("setting up eth0 in {}", ns.name))?;
    }

    let published = SocketAddrV4::new(gw, PUBLISHED_PORT);
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
    let find = |ns: &Netns, links: &[LinkSnapshot], name: &str, kind| -> Result<LabDevice> {
        let l = links
            .iter()
            .find(|l| l.name == name)
            .with_context(|| format!("{name} missing in {}", ns.name))?;
        Ok(device(ns, l, kind))
    };
    let cli_links = super::links_in(&cli)?;
    let node_links = super::links_in(&node)?;
    let srv_links = super::links_in(&srv)?;
    devices.push(find(&cli, &cli_links, "lo", DevKind::Loopback)?);
    devices.push(find(&cli, &cli_links, "eth0", DevKind::Veth)?);
    devices.push(find(&node, &node_links, &cli_port, DevKind::BridgePort)?);
    devices.push(find(&node, &node_links, &br_name, DevKind::Bridge)?);
    devices.push(find(&node, &node_links, &srv_port, DevKind::BridgePort)?);
    devices.push(find(&srv, &srv_links, "eth0", DevKind::Veth)?);
    devices.push(find(&srv, &srv_links, "lo", DevKind::Loopback)?);
    devices.push(find(&node, &node_links, "lo", DevKind::Loopback)?);

    Ok(Lab {
        driver: Driver::Bridge,
        run_id: run_id.to_string(),
        client_ns: cli,
        server_ns: srv,
        server_bind: server,
        connect_to: server,
        devices,
        node_ns: Some(node),
        published: Some(published),
        subnet: Some((net, plen)),
        nft_table: Some(spec.table_name()),
        nss,
    })
}
