//! `gateway` driver: a bridge container talking to its bridge's own address on the node.
//!
//! ```text
//!  np<id>-cli               np<id>-node
//!  eth0 .2 ──veth── np<id>c ─ np<id>br .1:11111 → the node's stack
//! ```
//!
//! One veth crossing, then the bridge passes the frame up to the node's stack (a receive
//! pass on the bridge device) and it is delivered locally; the reply leaves through the
//! bridge device. The server listens on the bridge's address, in the node namespace.

use std::net::SocketAddrV4;

use anyhow::{Context, Result};

use super::LAB_PORT;
use super::bridge::{Containers, build_net};
use crate::driver::Driver;
use crate::path::NetPath;

pub(super) fn build(run_id: &str) -> Result<NetPath> {
    let b = build_net(run_id, Containers::Client)?;
    let cli = b.cli.clone().context("bridge network built without a client")?;
    let node = b.node.clone();
    let server = SocketAddrV4::new(b.gw, LAB_PORT);
    Ok(b.fill(NetPath::new(Driver::Gateway, run_id, cli, node, server)))
}
