//! `host` on Docker: two `--network host` containers, over the Docker host's loopback.
//!
//! The harness listens on a port free there.

use std::net::{Ipv4Addr, SocketAddrV4};

use anyhow::Result;

use super::{Build, Client, free_port_here};
use crate::path::NetPath;

pub(super) fn build(b: &mut Build<'_>) -> Result<NetPath> {
    b.server("host", None, None)?;
    b.client("host", None)?;
    let bind = SocketAddrV4::new(Ipv4Addr::LOCALHOST, free_port_here()?);
    b.path(Client::Container, bind, bind)
}
