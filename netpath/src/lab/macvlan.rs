//! `macvlan` driver, like two containers on a `-d macvlan -o macvlan_mode=bridge`
//! network.
//!
//! ```text
//!  np<id>-cli                 np<id>-node                         np<id>-srv
//!  eth0 .2 (macvlan) ──┐                                    ┌── eth0 .3 (macvlan)
//!                      └──── parent np<id>mp (veth, 1500) ──┘
//!                                   │
//!                            np<id>pp in np<id>-mvp (the parent's peer, up)
//!  subnet 10.216.K.0/24
//! ```
//!
//! The parent is a link netpath creates (one end of a veth pair whose peer sits, up, in
//! a namespace netpath owns), never a host interface: macvlan sends broadcasts out of
//! its parent, and the peer being up gives the parent (and so the children) carrier.
//! In bridge mode the two children reach each other directly inside the macvlan
//! driver; only broadcasts (ARP) also leave through the parent. No gateway: both
//! containers are on-link.

use std::net::SocketAddrV4;

use anyhow::{Context, Result};
use netpath_common::DevKind;

use super::nl::Nl;
use super::{
    Driver, LAB_PORT, Lab, LabNamespaces, UNDERLAY_MTU, device_named, ifname, lab_subnet_in,
    links_in, quiet_ipv6, subnet_host,
};

pub(super) fn build(run_id: &str) -> Result<Lab> {
    let mut nss = LabNamespaces::new(run_id);
    let node = nss.create("node")?;
    let mvp = nss.create("mvp")?;
    let cli = nss.create("cli")?;
    let srv = nss.create("srv")?;

    let (net, plen) = lab_subnet_in(run_id, 216);
    let (cli_ip, srv_ip) = (subnet_host(net, 2), subnet_host(net, 3));
    let parent = ifname(run_id, "mp")?;
    let peer = ifname(run_id, "pp")?;

    for ns in [&node, &mvp, &cli, &srv] {
        ns.run(|| {
            quiet_ipv6();
            Nl::new()?.lo_up()
        })
        .with_context(|| format!("setting up {}", ns.name))?;
    }

    let (mvp_fd, cli_fd, srv_fd) = (nss.fd(&mvp)?, nss.fd(&cli)?, nss.fd(&srv)?);
    node.run(|| {
        let nl = Nl::new()?;
        let p = nl.add_veth_into(&parent, &peer, mvp_fd, UNDERLAY_MTU)?;
        nl.set_up(p.ifindex)?;
        // The children are created straight inside the container namespaces as eth0.
        nl.add_macvlan_into("eth0", p.ifindex, cli_fd)?;
        nl.add_macvlan_into("eth0", p.ifindex, srv_fd)
    })
    .with_context(|| format!("setting up the macvlan parent in {}", node.name))?;
    mvp.run(|| {
        let nl = Nl::new()?;
        let p = nl.require_link(&peer)?;
        nl.set_up(p.ifindex)
    })
    .with_context(|| format!("setting up the parent's peer in {}", mvp.name))?;

    for (ns, ip) in [(&cli, cli_ip), (&srv, srv_ip)] {
        super::address_eth0(ns, ip, plen, None)?;
    }

    let (cl, nl, ml, sl) = (
        links_in(&cli)?,
        links_in(&node)?,
        links_in(&mvp)?,
        links_in(&srv)?,
    );
    let devices = vec![
        device_named(&cli, &cl, "lo", DevKind::Loopback)?,
        device_named(&cli, &cl, "eth0", DevKind::Macvlan)?,
        device_named(&node, &nl, &parent, DevKind::MacvlanParent)?,
        device_named(&srv, &sl, "eth0", DevKind::Macvlan)?,
        device_named(&srv, &sl, "lo", DevKind::Loopback)?,
        // Off the unicast path (broadcasts only), listed so every link the lab made is.
        device_named(&mvp, &ml, &peer, DevKind::MacvlanParent)?,
        device_named(&node, &nl, "lo", DevKind::Loopback)?,
        device_named(&mvp, &ml, "lo", DevKind::Loopback)?,
    ];

    let server = SocketAddrV4::new(srv_ip, LAB_PORT);
    Ok(Lab {
        driver: Driver::Macvlan,
        run_id: run_id.to_string(),
        client_ns: cli,
        server_ns: srv,
        server_bind: server,
        connect_to: server,
        devices,
        node_ns: Some(node),
        published: None,
        subnet: Some((net, plen)),
        nft_table: None,
        proxy_pid: None,
        nss,
    })
}
