//! `overlay` driver, like two containers on a swarm overlay network on two hosts.
//!
//! ```text
//!  np<id>-cli          np<id>-node1                         np<id>-node2          np<id>-srv
//!  eth0 .2 ─veth─ np<id>c ─ np<id>b1 ─ np<id>v1          np<id>v2 ─ np<id>b2 ─ np<id>s ─veth─ eth0 .3
//!  (1450)          (1450)    bridge    vxlan 4096:4789    vxlan      bridge    (1450)         (1450)
//!                                          │                 │
//!                                      np<id>u1 .1 ──veth── np<id>u2 .2     underlay, 1500
//!  overlay 10.215.K.0/24                   underlay 10.214.K.0/24
//! ```
//!
//! Each node has a Linux bridge and a VXLAN device enslaved to it (VNI [`OVERLAY_VNI`],
//! UDP port [`VXLAN_PORT`], `local` its own underlay address, unicast `remote` the other
//! node's, `dev` the underlay link, learning off, MTU 1450), as Docker's overlay driver
//! sets up in its per-network namespace. The unicast `remote` makes the kernel install
//! the all-zeros default FDB entry pointing at the other node, which is what Docker's
//! `bridge fdb append 00:00:00:00:00:00 dst <peer>` does; with one peer, nothing is ever
//! flooded anywhere else. The containers' eth0 MTU is 1450 like Docker sets it. Docker's
//! second container interface (eth1 on docker_gwbridge, for traffic leaving the
//! overlay) is not modelled: the path measured is container to container.

use std::net::SocketAddrV4;

use anyhow::{Context, Result};
use netpath_common::DevKind;

use super::nl::{Nl, VxlanSpec};
use super::{
    Driver, LAB_PORT, Lab, LabNamespaces, OVERLAY_MTU, OVERLAY_VNI, UNDERLAY_MTU, VXLAN_PORT,
    device_named, ifname, lab_subnet_in, links_in, quiet_ipv6, subnet_host,
};

pub(super) fn build(run_id: &str) -> Result<Lab> {
    let mut nss = LabNamespaces::new(run_id);
    let node1 = nss.create("node1")?;
    let node2 = nss.create("node2")?;
    let cli = nss.create("cli")?;
    let srv = nss.create("srv")?;

    let (unet, uplen) = lab_subnet_in(run_id, 214);
    let (onet, oplen) = lab_subnet_in(run_id, 215);
    let (u1_ip, u2_ip) = (subnet_host(unet, 1), subnet_host(unet, 2));
    let (cli_ip, srv_ip) = (subnet_host(onet, 2), subnet_host(onet, 3));
    let (u1, u2) = (ifname(run_id, "u1")?, ifname(run_id, "u2")?);
    let (b1, b2) = (ifname(run_id, "b1")?, ifname(run_id, "b2")?);
    let (v1, v2) = (ifname(run_id, "v1")?, ifname(run_id, "v2")?);
    let (cport, sport) = (ifname(run_id, "c")?, ifname(run_id, "s")?);

    for ns in [&node1, &node2, &cli, &srv] {
        ns.run(|| {
            quiet_ipv6();
            Nl::new()?.lo_up()
        })
        .with_context(|| format!("setting up {}", ns.name))?;
    }

    // Underlay: one veth pair between the nodes, like the hosts' network.
    let node2_fd = nss.fd(&node2)?;
    node1
        .run(|| {
            let nl = Nl::new()?;
            let u = nl.add_veth_into(&u1, &u2, node2_fd, UNDERLAY_MTU)?;
            nl.add_addr(u.ifindex, u1_ip, uplen)?;
            nl.set_up(u.ifindex)
        })
        .with_context(|| format!("setting up the underlay in {}", node1.name))?;
    node2
        .run(|| {
            let nl = Nl::new()?;
            let u = nl.require_link(&u2)?;
            nl.add_addr(u.ifindex, u2_ip, uplen)?;
            nl.set_up(u.ifindex)
        })
        .with_context(|| format!("setting up the underlay in {}", node2.name))?;

    // Each node: bridge, VXLAN port towards the other node, veth port to its container.
    let nodes = [
        (&node1, &u1, &b1, &v1, u1_ip, u2_ip, &cport, nss.fd(&cli)?),
        (&node2, &u2, &b2, &v2, u2_ip, u1_ip, &sport, nss.fd(&srv)?),
    ];
    for (node, under, br, vx, local, remote, port, ctr_fd) in nodes {
        node.run(|| {
            let nl = Nl::new()?;
            let u = nl.require_link(under)?;
            let br = nl.add_bridge(br)?;
            nl.set_up(br.ifindex)?;
            let vx = nl.add_vxlan(&VxlanSpec {
                name: vx,
                vni: OVERLAY_VNI,
                port: VXLAN_PORT,
                dev: u.ifindex,
                local,
                remote,
                mtu: OVERLAY_MTU,
            })?;
            nl.enslave_up(vx.ifindex, br.ifindex)?;
            let p = nl.add_veth_into(port, "eth0", ctr_fd, OVERLAY_MTU)?;
            nl.enslave_up(p.ifindex, br.ifindex)
        })
        .with_context(|| format!("setting up the overlay in {}", node.name))?;
    }

    // Containers: overlay address, up. Both are on-link in the overlay subnet.
    for (ns, ip) in [(&cli, cli_ip), (&srv, srv_ip)] {
        super::address_eth0(ns, ip, oplen, None)?;
    }

    let (cl, n1, n2, sl) = (
        links_in(&cli)?,
        links_in(&node1)?,
        links_in(&node2)?,
        links_in(&srv)?,
    );
    let devices = vec![
        device_named(&cli, &cl, "lo", DevKind::Loopback)?,
        device_named(&cli, &cl, "eth0", DevKind::Veth)?,
        device_named(&node1, &n1, &cport, DevKind::BridgePort)?,
        device_named(&node1, &n1, &b1, DevKind::Bridge)?,
        device_named(&node1, &n1, &v1, DevKind::Vxlan)?,
        device_named(&node1, &n1, &u1, DevKind::Underlay)?,
        device_named(&node2, &n2, &u2, DevKind::Underlay)?,
        device_named(&node2, &n2, &v2, DevKind::Vxlan)?,
        device_named(&node2, &n2, &b2, DevKind::Bridge)?,
        device_named(&node2, &n2, &sport, DevKind::BridgePort)?,
        device_named(&srv, &sl, "eth0", DevKind::Veth)?,
        device_named(&srv, &sl, "lo", DevKind::Loopback)?,
        device_named(&node1, &n1, "lo", DevKind::Loopback)?,
        device_named(&node2, &n2, "lo", DevKind::Loopback)?,
    ];

    let server = SocketAddrV4::new(srv_ip, LAB_PORT);
    Ok(Lab {
        driver: Driver::Overlay,
        run_id: run_id.to_string(),
        client_ns: cli,
        server_ns: srv,
        server_bind: server,
        connect_to: server,
        devices,
        node_ns: Some(node1),
        published: None,
        subnet: Some((onet, oplen)),
        nft_table: None,
        proxy_pid: None,
        nss,
    })
}
