//! `published-nat` on Docker: a port published by DNAT alone, on a second dockerd.
//!
//! The second dockerd runs with `--userland-proxy=false` in a namespace of its own
//! (`np<id>-dkr`) so the two daemons' iptables never meet; the server's port is published
//! there on `127.0.0.1:P`, and the client runs in that namespace.

use anyhow::Result;

use super::Build;
use crate::lab::PUBLISHED_PORT;
use crate::path::NetPath;

pub(super) fn build(b: &mut Build<'_>) -> Result<NetPath> {
    b.res.start_second_daemon()?;
    // The second daemon's own namespace: nothing else binds there.
    super::bridge::published(b, PUBLISHED_PORT)
}
