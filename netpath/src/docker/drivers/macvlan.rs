//! `macvlan` on Docker: client and server on a `-d macvlan -o macvlan_mode=bridge` network.
//!
//! Its parent is a veth netpath creates in the Docker host's namespace (`np<id>mp`, its peer
//! up in netns `np<id>-mvp`), never a host interface.

use std::collections::HashMap;
use std::net::SocketAddrV4;

use anyhow::{Context, Result};
use bollard::models::IpamConfig;

use super::{Build, Client};
use crate::docker::AGENT_PORT;
use crate::docker::hostveth::{HostVeth, MACVLAN_PARENT};
use crate::lab::{UNDERLAY_MTU, lab_subnet_in, subnet_host};
use crate::sys::nl::Nl;
use crate::path::NetPath;

pub(super) fn build(b: &mut Build<'_>) -> Result<NetPath> {
    let parent = make_parent(b)?;
    let (net, plen) = lab_subnet_in(&b.res.run_id, 216);
    let (cli_ip, srv_ip) = (subnet_host(net, 2), subnet_host(net, 3));
    let name = b.net.clone();
    b.res.create_network(
        &name,
        "macvlan",
        HashMap::from([
            ("parent".to_string(), parent),
            ("macvlan_mode".to_string(), "bridge".to_string()),
        ]),
        Some(IpamConfig {
            subnet: Some(format!("{net}/{plen}")),
            gateway: Some(subnet_host(net, 1).to_string()),
            ..Default::default()
        }),
        false,
    )?;
    b.server(&name, Some(srv_ip), None)?;
    b.client(&name, Some(cli_ip))?;
    let server = SocketAddrV4::new(srv_ip, AGENT_PORT);
    b.path(Client::Container, server, server)
}

/// `np<id>mp` in the Docker host's namespace, up, its peer `np<id>pp` up in `np<id>-mvp`;
/// registered with the lab's resources before anything else can fail.
fn make_parent(b: &mut Build<'_>) -> Result<String> {
    let host_netns = b.res.ctr().host_netns.clone();
    let hv = HostVeth::create(MACVLAN_PARENT, &b.res.run_id, &host_netns, UNDERLAY_MTU)?;
    let (host, parent, peer) = (hv.host()?, hv.host_link.clone(), hv.peer_link.clone());
    let mvp = hv.peer_ns.ns.clone();
    b.res.others.push(Box::new(hv));
    host.run(|| {
        let nl = Nl::new()?;
        let p = nl.require_link(&parent)?;
        nl.set_up(p.ifindex)
    })
    .with_context(|| format!("setting up the macvlan parent {parent}"))?;
    mvp.run(|| {
        let nl = Nl::new()?;
        nl.lo_up()?;
        let p = nl.require_link(&peer)?;
        nl.set_up(p.ifindex)
    })
    .with_context(|| format!("setting up {peer} in {}", mvp.name))?;
    Ok(parent)
}
