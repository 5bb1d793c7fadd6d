//! `egress` driver: a bridge container talking to another host, routed and MASQUERADEd by
//! the node, the path most containers' outbound traffic takes.
//!
//! ```text
//!  np<id>-cli           np<id>-node                                          np<id>-rmt
//!  eth0 .2 ─veth─ np<id>c ─ np<id>br .1 ⇒ route, MASQUERADE ⇒ np<id>up .1 ─veth─ np<id>rm .2:11111
//!  bridge 10.213.K.0/24                                   uplink 10.217.K.0/24
//! ```
//!
//! The client is a container on the bridge network (default route: the bridge's address); the
//! node routes its packets out of its uplink, and Docker's outbound rule in netpath's nft table
//! (`ip saddr <subnet> oifname != <bridge> masquerade`) rewrites their source to the uplink's
//! address. The `remote` namespace stands in for another host and knows only its uplink
//! subnet, so replies reach the client through conntrack's de-NAT, as from any real host.

use std::net::SocketAddrV4;

use anyhow::{Context, Result};

use super::bridge::{Containers, build_net};
use super::{
    LAB_PORT, LabNamespaces, UNDERLAY_MTU, UPLINK_B, device_named, ifname, lab_subnet_in,
    subnet_host,
};
use crate::driver::Driver;
use crate::sys::netns::Netns;
use crate::sys::nl::{Nl, links_in};
use crate::path::{Device, NetPath, Role};

pub(super) fn build(run_id: &str) -> Result<NetPath> {
    let mut b = build_net(run_id, Containers::Client)?;
    let cli = b.cli.clone().context("bridge network built without a client")?;
    let up = uplink(&mut b.nss, &b.node, run_id)?;
    let mut p = b.fill(NetPath::new(Driver::Egress, run_id, cli, up.remote, up.server));
    p.devices.extend(up.devices);
    Ok(p)
}

/// A node's uplink to the `remote` namespace and the server's address there.
pub(super) struct Uplink {
    /// `np<id>-rmt`, standing in for another host.
    pub remote: Netns,
    /// The remote's address on the uplink, port [`LAB_PORT`].
    pub server: SocketAddrV4,
    /// `np<id>up` (node), `np<id>rm` (remote), both of kind `Uplink`, and the remote's lo.
    pub devices: Vec<Device>,
}

/// Creates `np<id>-rmt` and the veth pair `np<id>up` (in `node`, .1) ↔ `np<id>rm` (in the
/// remote, .2) on 10.217.K.0/24, both up. No routes beyond the subnet's own: the remote
/// reaches only the node's uplink address, like a host the node's containers talk to. The
/// server listens on the remote's own address. Also `host-egress`'s way out.
pub(super) fn uplink(nss: &mut LabNamespaces, node: &Netns, run_id: &str) -> Result<Uplink> {
    let remote = nss.create("rmt")?;
    super::lo_up(&[&remote])?;
    let (net, plen) = lab_subnet_in(run_id, UPLINK_B);
    let (node_ip, remote_ip) = (subnet_host(net, 1), subnet_host(net, 2));
    let (up, rm) = (ifname(run_id, "up")?, ifname(run_id, "rm")?);
    let remote_fd = nss.fd(&remote)?;
    node.run(|| {
        let nl = Nl::new()?;
        let l = nl.add_veth_into(&up, &rm, remote_fd, UNDERLAY_MTU)?;
        nl.add_addr(l.ifindex, node_ip, plen)?;
        nl.set_up(l.ifindex)
    })
    .with_context(|| format!("setting up the uplink in {}", node.name))?;
    remote
        .run(|| Nl::new()?.address_up(&rm, remote_ip, plen))
        .with_context(|| format!("setting up {rm} in {}", remote.name))?;
    let (nl, rl) = (links_in(node)?, links_in(&remote)?);
    let devices = vec![
        device_named(node, &nl, &up, Role::Uplink)?,
        device_named(&remote, &rl, &rm, Role::Uplink)?,
        device_named(&remote, &rl, "lo", Role::Link)?,
    ];
    Ok(Uplink {
        server: SocketAddrV4::new(remote_ip, LAB_PORT),
        remote,
        devices,
    })
}
