//! `bridge` on Docker: client and server containers on a bridge network.
//!
//! A user-defined network whose Linux bridge carries netpath's name (`np<id>br`), or docker0
//! with `default_bridge`. The published drivers reuse the network ([`published`]).

use std::collections::HashMap;
use std::net::{Ipv4Addr, SocketAddrV4};

use anyhow::{Context, Result};

use super::{Build, Client};
use crate::docker::AGENT_PORT;
use crate::lab::ifname;
use crate::path::NetPath;

pub(super) fn build(b: &mut Build<'_>) -> Result<NetPath> {
    let net = network_or_default(b)?;
    let server = b.pair_on(&net)?;
    b.path(Client::Container, server, server)
}

/// docker0 (network `bridge`) with `default_bridge`, else a new `np<id>-net`.
pub(super) fn network_or_default(b: &mut Build<'_>) -> Result<String> {
    if b.opts.default_bridge {
        Ok("bridge".to_string())
    } else {
        network(b)
    }
}

/// `np<id>-net`, a bridge network whose Linux bridge is `np<id>br`, so cleanup and the tests
/// can find it.
fn network(b: &mut Build<'_>) -> Result<String> {
    let br = ifname(&b.res.run_id, "br")?;
    let options = HashMap::from([("com.docker.network.bridge.name".to_string(), br)]);
    let net = b.net.clone();
    b.res.create_network(&net, "bridge", options, None, false)?;
    Ok(net)
}

/// The server on a bridge network, its port published on `127.0.0.1:port`, and the client
/// on the Docker host connecting there (both published drivers).
pub(super) fn published(b: &mut Build<'_>, port: u16) -> Result<NetPath> {
    let net = network(b)?;
    let s = b.server(&net, None, Some(port))?;
    let ip = s
        .ip_on(&net)
        .context("server container has no IPv4 address")?;
    let published = SocketAddrV4::new(Ipv4Addr::LOCALHOST, port);
    let mut p = b.path(Client::Host, SocketAddrV4::new(ip, AGENT_PORT), published)?;
    p.published = Some(published);
    Ok(p)
}
