//! `published-nat` driver: `docker run -p` with `--userland-proxy=false`, used from the node.
//!
//! The client runs in the node namespace (the "host"), the way users hit a published port,
//! the server in the container, on the bridge network without a client container.
//!
//! ```text
//!  np<id>-node                                                         np<id>-srv
//!  client → .1:18080 ─OUTPUT DNAT→ .3:11111 ── np<id>br ─ np<id>s ─veth─ eth0 .3:11111
//! ```
//!
//! The published address is the node's own bridge gateway .1, not 127.0.0.1 (why: on
//! [`build`]), so the connection takes Docker's nat OUTPUT DNAT path.

use std::net::SocketAddrV4;

use anyhow::Result;

use super::PUBLISHED_PORT;
use super::bridge::{Containers, build_net};
use crate::driver::Driver;
use crate::path::NetPath;

/// Docker handles locally originated connections to a published port with a DNAT in the nat
/// OUTPUT chain. For 127.0.0.1 it additionally needs `route_localnet=1` and a hairpin
/// MASQUERADE; netpath instead publishes on the node's own non-loopback address (the bridge
/// gateway .1), which takes exactly the OUTPUT-DNAT path without touching route_localnet: the
/// bridge driver's existing rule `.1:PUBLISHED_PORT → srv:LAB_PORT`.
pub(super) fn build(run_id: &str) -> Result<NetPath> {
    let b = build_net(run_id, Containers::Server)?;
    let published = SocketAddrV4::new(b.gw, PUBLISHED_PORT);
    let node = b.node.clone();
    let mut p = b.into_path(Driver::PublishedNat, run_id, node)?;
    p.connect_to = published;
    p.published = Some(published);
    Ok(p)
}
