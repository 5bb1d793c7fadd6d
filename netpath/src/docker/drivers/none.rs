//! `none` on Docker: one `--network none` container, client and server over its loopback.
//!
//! Nothing else can reach it.

use std::net::{Ipv4Addr, SocketAddrV4};

use anyhow::Result;

use super::{Build, Client};
use crate::docker::AGENT_PORT;
use crate::path::NetPath;

pub(super) fn build(b: &mut Build<'_>) -> Result<NetPath> {
    b.server("none", None, None)?;
    let bind = SocketAddrV4::new(Ipv4Addr::LOCALHOST, AGENT_PORT);
    b.path(Client::Server, bind, bind)
}
