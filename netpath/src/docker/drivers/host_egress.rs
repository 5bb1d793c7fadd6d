//! `host-egress` on Docker: a `--network host` container talking to the same kind of remote
//! host as `egress` (its own, made for this run), over the uplink from the Docker host's
//! stack: no veth, no bridge, no forwarding, no NAT (conntrack still sees it, as every
//! packet of a Docker host).

use anyhow::Result;

use super::{Build, Client, egress};
use crate::path::NetPath;

pub(super) fn build(b: &mut Build<'_>) -> Result<NetPath> {
    let remote = egress::remote(b)?;
    b.client("host", None)?;
    let server = remote.server;
    b.path_to(Client::Container, remote.into_server(), server, server)
}
