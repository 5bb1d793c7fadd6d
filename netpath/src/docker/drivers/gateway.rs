//! `gateway` on Docker: a container talking to its bridge's own address on the Docker host
//! (docker0's with `default_bridge`, else `np<id>br`'s): one veth crossing and local
//! delivery on the host's stack. The server listens on that address only, on a port free
//! there, in the Docker host's namespace.

use std::net::SocketAddrV4;

use anyhow::{Context, Result};

use super::{Build, Client, Server, bridge, free_port_in};
use crate::sys::netns::Netns;
use crate::path::NetPath;

pub(super) fn build(b: &mut Build<'_>) -> Result<NetPath> {
    let net = bridge::network_or_default(b)?;
    let c = b.client(&net, None)?;
    let gw = c
        .networks
        .iter()
        .find(|n| n.name == net)
        .and_then(|n| n.gateway)
        .with_context(|| format!("the client container has no gateway on {net}"))?;
    let host = Netns::at("host", &b.res.ctr().host_netns)?;
    let bind = SocketAddrV4::new(gw, free_port_in(&host, gw)?);
    b.path_to(Client::Container, Server::Host, bind, bind)
}
