//! `macvlan` driver, like two containers on a `-d macvlan -o macvlan_mode=bridge` network.
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
//! In bridge mode the two children reach each other directly inside the macvlan driver; only
//! broadcasts (ARP) also leave through the parent, a link netpath makes (see [`Children`]).
//! No gateway: both containers are on-link.

use std::net::SocketAddrV4;
use std::os::fd::BorrowedFd;

use anyhow::{Context, Result};

use super::{
    LAB_PORT, LabNamespaces, UNDERLAY_MTU, device_named, ifname, lab_subnet_in, lo_up, subnet_host,
};
use crate::driver::Driver;
use crate::sys::nl::{Nl, links_in};
use crate::path::{NetPath, Role};

pub(super) fn build(run_id: &str) -> Result<NetPath> {
    let children = Children {
        driver: Driver::Macvlan,
        parent_ns: "mvp",
        subnet_b: 216,
        add: |nl, name, parent, ns| nl.add_macvlan_into(name, parent, ns),
    };
    children.build(run_id)
}

/// Two children of one parent link netpath makes, each straight inside a container
/// namespace as `eth0` (macvlan here, ipvlan in `ipvlan.rs`).
///
/// The parent is one end of a veth pair whose peer sits, up, in a namespace netpath owns,
/// never a host interface: macvlan sends broadcasts out of its parent, and the peer being up
/// gives the parent (and so the children) carrier.
pub(super) struct Children {
    pub driver: Driver,
    /// Role of the namespace holding the parent's peer.
    pub parent_ns: &'static str,
    /// Second octet of the subnet, 10.B.K.0/24.
    pub subnet_b: u8,
    /// Creates child `name` of link `parent` inside the namespace `ns`.
    pub add: fn(&Nl, &str, u32, BorrowedFd<'_>) -> Result<()>,
}

impl Children {
    pub(super) fn build(&self, run_id: &str) -> Result<NetPath> {
        let mut nss = LabNamespaces::new(run_id);
        let [node, mvp, cli, srv] = nss.create_all(["node", self.parent_ns, "cli", "srv"])?;

        let (net, plen) = lab_subnet_in(run_id, self.subnet_b);
        let (cli_ip, srv_ip) = (subnet_host(net, 2), subnet_host(net, 3));
        let parent = ifname(run_id, "mp")?;
        let peer = ifname(run_id, "pp")?;
        lo_up(&[&node, &mvp, &cli, &srv])?;
        let (mvp_fd, cli_fd, srv_fd) = (nss.fd(&mvp)?, nss.fd(&cli)?, nss.fd(&srv)?);
        let driver = self.driver;
        node.run(|| {
            let nl = Nl::new()?;
            let p = nl.add_veth_into(&parent, &peer, mvp_fd, UNDERLAY_MTU)?;
            nl.set_up(p.ifindex)?;
            // The children are created straight inside the container namespaces as eth0.
            (self.add)(&nl, "eth0", p.ifindex, cli_fd)?;
            (self.add)(&nl, "eth0", p.ifindex, srv_fd)
        })
        .with_context(|| format!("setting up the {driver} parent in {}", node.name))?;
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
        let (parent_role, link) = (Role::MacvlanParent, Role::Link);
        let devices = vec![
            device_named(&cli, &cl, "lo", link)?,
            device_named(&cli, &cl, "eth0", link)?,
            device_named(&node, &nl, &parent, parent_role)?,
            device_named(&srv, &sl, "eth0", link)?,
            device_named(&srv, &sl, "lo", link)?,
            // Off the unicast path (broadcasts only), listed so every link the lab made is.
            device_named(&mvp, &ml, &peer, parent_role)?,
            device_named(&node, &nl, "lo", link)?,
            device_named(&mvp, &ml, "lo", link)?,
        ];

        let server = SocketAddrV4::new(srv_ip, LAB_PORT);
        let mut p = NetPath::new(driver, run_id, cli, srv, server);
        p.devices = devices;
        p.node_ns = Some(node);
        p.subnet = Some((net, plen));
        p.keep = nss.into_keep();
        Ok(p)
    }
}
