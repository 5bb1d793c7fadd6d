//! `overlay` on Docker: client and server containers on an attachable swarm overlay network.
//!
//! The swarm is initialised on 127.0.0.1 if the engine is in none (see `docker/swarm.rs`).

use std::collections::HashMap;

use anyhow::Result;

use super::{Build, Client};
use crate::docker::swarm::ensure_swarm;
use crate::path::NetPath;

pub(super) fn build(b: &mut Build<'_>) -> Result<NetPath> {
    b.res.swarm_created = ensure_swarm(&b.res.engine)?;
    let net = b.net.clone();
    b.res
        .create_network(&net, "overlay", HashMap::new(), None, true)?;
    let server = b.pair_on(&net)?;
    b.path(Client::Container, server, server)
}
