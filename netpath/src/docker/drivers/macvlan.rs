//! `macvlan` on Docker: client and server on a `-d macvlan -o macvlan_mode=bridge` network.
//!
//! Its parent is a veth netpath creates in the Docker host's namespace (`np<id>mp`, its peer
//! up in netns `np<id>-mvp`), never a host interface.

use std::collections::HashMap;
use std::net::SocketAddrV4;
use std::path::PathBuf;

use anyhow::{Context, Result};
use bollard::models::IpamConfig;

use super::{Build, Client};
use crate::docker::{AGENT_PORT, state};
use crate::lab::{UNDERLAY_MTU, ifname, lab_subnet_in, netns_name, run_id_of_netns, subnet_host};
use crate::netns::{Held, Netns};
use crate::nl::Nl;
use crate::path::{NetPath, Teardown};

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

/// The macvlan parent netpath made: `np<id>mp` in the Docker host's namespace, its peer in
/// `np<id>-mvp`; removed with the lab's other resources.
struct MacvlanParent {
    parent: String,
    host_netns: PathBuf,
    mvp: Held,
}

/// `np<id>mp` in the Docker host's namespace, its peer `np<id>pp` up in `np<id>-mvp`;
/// registered with the lab's resources before anything else can fail.
fn make_parent(b: &mut Build<'_>) -> Result<String> {
    let id = b.res.run_id.clone();
    let parent = ifname(&id, "mp")?;
    let peer = ifname(&id, "pp")?;
    state::write_mvp_marker(&id)?;
    let created = Netns::create(&netns_name(&id, "mvp")).and_then(|ns| {
        Held::open(ns.clone()).inspect_err(|_| {
            let _ = ns.delete();
        })
    });
    let mvp = match created {
        Ok(h) => h,
        Err(e) => {
            state::remove_mvp_marker(&id);
            return Err(e);
        }
    };
    let host_netns = b.res.ctr().host_netns.clone();
    let host = Netns::at("host", &host_netns)?;
    let r = host.run(|| {
        let nl = Nl::new()?;
        let p = nl.add_veth_into(&parent, &peer, mvp.fd(), UNDERLAY_MTU)?;
        nl.set_up(p.ifindex)
    });
    let mvp_ns = mvp.ns.clone();
    b.res.others.push(Box::new(MacvlanParent {
        parent: parent.clone(),
        host_netns,
        mvp,
    }));
    r.with_context(|| format!("creating the macvlan parent {parent}"))?;
    mvp_ns
        .run(|| {
            let nl = Nl::new()?;
            nl.lo_up()?;
            let p = nl.require_link(&peer)?;
            nl.set_up(p.ifindex)
        })
        .with_context(|| format!("setting up {peer} in {}", mvp_ns.name))?;
    Ok(parent)
}

impl Teardown for MacvlanParent {
    fn teardown(&mut self) -> Result<()> {
        let parent = self.parent.clone();
        Netns::at("host", &self.host_netns)?
            .run(|| {
                let nl = Nl::new()?;
                if let Some(l) = nl.link(&parent)? {
                    nl.del_link(l.ifindex)?;
                }
                Ok(())
            })
            .with_context(|| format!("deleting the macvlan parent {}", self.parent))?;
        self.mvp.ns.delete()?;
        if let Some(id) = run_id_of_netns(&self.mvp.ns.name) {
            state::remove_mvp_marker(id);
        }
        Ok(())
    }
}
