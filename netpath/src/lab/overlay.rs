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
//! Each node has a bridge and a VXLAN device on it, as Docker's overlay driver sets up in its
//! per-network namespace (details on [`Node::bridge_and_vxlan`]). Docker's eth1 on
//! docker_gwbridge (traffic leaving the overlay) is not modelled: the path is container to
//! container.

use std::net::{Ipv4Addr, SocketAddrV4};
use std::os::fd::BorrowedFd;

use anyhow::{Context, Result};

use super::{
    LAB_PORT, LabNamespaces, OVERLAY_MTU, OVERLAY_VNI, UNDERLAY_MTU, VXLAN_PORT, device_named,
    ifname, lab_subnet_in, lo_up, subnet_host,
};
use crate::driver::Driver;
use crate::sys::netns::Netns;
use crate::sys::nl::{Nl, VxlanSpec, links_in};
use crate::path::{Device, NetPath, Role};

pub(super) fn build(run_id: &str) -> Result<NetPath> {
    let mut nss = LabNamespaces::new(run_id);
    let [node1, node2, cli, srv] = nss.create_all(["node1", "node2", "cli", "srv"])?;

    let (unet, uplen) = lab_subnet_in(run_id, 214);
    let (onet, oplen) = lab_subnet_in(run_id, 215);
    let n1 = Node::new(run_id, node1, "1", "c", subnet_host(unet, 1))?;
    let n2 = Node::new(run_id, node2, "2", "s", subnet_host(unet, 2))?;
    lo_up(&[&n1.ns, &n2.ns, &cli, &srv])?;
    underlay(&n1, &n2, uplen, nss.fd(&n2.ns)?)?;
    n1.bridge_and_vxlan(n2.ip, nss.fd(&cli)?)?;
    n2.bridge_and_vxlan(n1.ip, nss.fd(&srv)?)?;

    // Containers: overlay address, up. Both are on-link in the overlay subnet.
    let (cli_ip, srv_ip) = (subnet_host(onet, 2), subnet_host(onet, 3));
    for (ns, ip) in [(&cli, cli_ip), (&srv, srv_ip)] {
        super::address_eth0(ns, ip, oplen, None)?;
    }

    let server = SocketAddrV4::new(srv_ip, LAB_PORT);
    let mut p = NetPath::new(Driver::Overlay, run_id, cli, srv, server);
    p.devices = read_devices(&p.client_ns, &n1, &n2, &p.server_ns)?;
    p.node_ns = Some(n1.ns);
    p.subnet = Some((onet, oplen));
    p.keep = nss.into_keep();
    Ok(p)
}

/// One node: its namespace, the names of its links and its underlay address.
struct Node {
    ns: Netns,
    /// Underlay veth `np<id>u<N>`.
    under: String,
    /// Bridge `np<id>b<N>`.
    br: String,
    /// VXLAN device `np<id>v<N>`.
    vx: String,
    /// Veth port to its container, `np<id>c` or `np<id>s`.
    port: String,
    ip: Ipv4Addr,
}

impl Node {
    fn new(run_id: &str, ns: Netns, n: &str, port: &str, ip: Ipv4Addr) -> Result<Node> {
        Ok(Node {
            ns,
            under: ifname(run_id, &format!("u{n}"))?,
            br: ifname(run_id, &format!("b{n}"))?,
            vx: ifname(run_id, &format!("v{n}"))?,
            port: ifname(run_id, port)?,
            ip,
        })
    }

    /// Bridge, VXLAN port towards the node at `remote`, veth port to its container.
    ///
    /// The VXLAN device: VNI [`OVERLAY_VNI`], UDP port [`VXLAN_PORT`], `local` this node's
    /// underlay address, unicast `remote` the other node's, `dev` the underlay link, learning
    /// off, MTU 1450. The unicast `remote` makes the kernel install the all-zeros default FDB
    /// entry pointing at the other node, which is what Docker's `bridge fdb append
    /// 00:00:00:00:00:00 dst <peer>` does; with one peer, nothing is ever flooded anywhere
    /// else. The containers' eth0 MTU is 1450 like Docker sets it.
    fn bridge_and_vxlan(&self, remote: Ipv4Addr, ctr_fd: BorrowedFd<'_>) -> Result<()> {
        self.ns
            .run(|| {
                let nl = Nl::new()?;
                let u = nl.require_link(&self.under)?;
                let br = nl.add_bridge(&self.br)?;
                nl.set_up(br.ifindex)?;
                let vx = nl.add_vxlan(&VxlanSpec {
                    name: &self.vx,
                    vni: OVERLAY_VNI,
                    port: VXLAN_PORT,
                    dev: u.ifindex,
                    local: self.ip,
                    remote,
                    mtu: OVERLAY_MTU,
                })?;
                nl.enslave_up(vx.ifindex, br.ifindex)?;
                let p = nl.add_veth_into(&self.port, "eth0", ctr_fd, OVERLAY_MTU)?;
                nl.enslave_up(p.ifindex, br.ifindex)
            })
            .with_context(|| format!("setting up the overlay in {}", self.ns.name))
    }
}

/// One veth pair between the nodes, like the hosts' network.
fn underlay(n1: &Node, n2: &Node, plen: u8, n2_fd: BorrowedFd<'_>) -> Result<()> {
    n1.ns
        .run(|| {
            let nl = Nl::new()?;
            let u = nl.add_veth_into(&n1.under, &n2.under, n2_fd, UNDERLAY_MTU)?;
            nl.add_addr(u.ifindex, n1.ip, plen)?;
            nl.set_up(u.ifindex)
        })
        .with_context(|| format!("setting up the underlay in {}", n1.ns.name))?;
    n2.ns
        .run(|| {
            let nl = Nl::new()?;
            let u = nl.require_link(&n2.under)?;
            nl.add_addr(u.ifindex, n2.ip, plen)?;
            nl.set_up(u.ifindex)
        })
        .with_context(|| format!("setting up the underlay in {}", n2.ns.name))
}

/// Every device, read back from netlink, in path order, loopbacks last.
fn read_devices(cli: &Netns, n1: &Node, n2: &Node, srv: &Netns) -> Result<Vec<Device>> {
    let (cl, l1, l2, sl) = (
        links_in(cli)?,
        links_in(&n1.ns)?,
        links_in(&n2.ns)?,
        links_in(srv)?,
    );
    let (link, underlay) = (Role::Link, Role::Underlay);
    Ok(vec![
        device_named(cli, &cl, "lo", link)?,
        device_named(cli, &cl, "eth0", link)?,
        device_named(&n1.ns, &l1, &n1.port, link)?,
        device_named(&n1.ns, &l1, &n1.br, link)?,
        device_named(&n1.ns, &l1, &n1.vx, link)?,
        device_named(&n1.ns, &l1, &n1.under, underlay)?,
        device_named(&n2.ns, &l2, &n2.under, underlay)?,
        device_named(&n2.ns, &l2, &n2.vx, link)?,
        device_named(&n2.ns, &l2, &n2.br, link)?,
        device_named(&n2.ns, &l2, &n2.port, link)?,
        device_named(srv, &sl, "eth0", link)?,
        device_named(srv, &sl, "lo", link)?,
        device_named(&n1.ns, &l1, "lo", link)?,
        device_named(&n2.ns, &l2, "lo", link)?,
    ])
}
