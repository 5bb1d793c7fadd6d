//! The single-node swarm the overlay driver needs, made on 127.0.0.1 and left when unused.
//!
//! Initialised only when the engine is in no swarm at all, and left again once no netpath
//! overlay uses it.

use anyhow::{Result, bail};
use bollard::models::SwarmInitRequest;

use super::state::{self, SwarmRecord};
use super::{Engine, LABEL};

/// Make this engine a single-node swarm manager if it is in no swarm at all (listening
/// and advertising on 127.0.0.1 only). Returns true if netpath initialised it. A swarm
/// netpath did not create is used as it is, never changed.
pub(crate) fn ensure_swarm(e: &Engine) -> Result<bool> {
    let (st, manager) = e.swarm_state()?;
    match st.as_str() {
        "active" if manager => Ok(false),
        "active" => bail!(
            "Swarm manager unavailable: this engine ({}) is a swarm worker; overlay networks are created on a manager",
            e.host
        ),
        "inactive" | "" => {
            // The name filter matches substrings too.
            let gw_existed = e
                .networks(&[("name", "docker_gwbridge")])?
                .iter()
                .any(|n| n.name.as_deref() == Some("docker_gwbridge"));
            let node = e
                .block_on(e.docker().init_swarm(SwarmInitRequest {
                    listen_addr: Some("127.0.0.1:2377".into()),
                    advertise_addr: Some("127.0.0.1".into()),
                    ..Default::default()
                }))
                .map_err(|err| e.err(err, "initialising a single-node swarm on 127.0.0.1"))?;
            state::write_swarm(&SwarmRecord {
                host: e.host.clone(),
                node_id: node,
                gwbridge_created: !gw_existed,
            })?;
            Ok(true)
        }
        other => bail!(
            "Swarm manager unavailable: swarm state of {} is {other:?}; fix it (`docker swarm leave` or unlock) or use another driver",
            e.host
        ),
    }
}

/// Leave the swarm netpath created, unless another netpath overlay network (not one of
/// `removed`, which the swarm may still list for a moment) uses it.
/// Returns true if it left.
pub(crate) fn leave_swarm_if_unused(e: &Engine, removed: &[String]) -> Result<bool> {
    let Some(rec) = state::read_swarm() else {
        return Ok(false);
    };
    if rec.host != e.host {
        return Ok(false);
    }
    let nets = e.networks(&[("label", LABEL), ("driver", "overlay")])?;
    if nets.iter().any(|n| {
        !removed
            .iter()
            .any(|r| n.name.as_deref() == Some(r.as_str()))
    }) {
        return Ok(false);
    }
    leave_recorded_swarm(e, &rec)
}

/// Leave the swarm of `rec` if this engine is still that node; remove docker_gwbridge
/// if the swarm brought it.
/// Returns true if it left.
pub(crate) fn leave_recorded_swarm(e: &Engine, rec: &SwarmRecord) -> Result<bool> {
    let info = e.info()?;
    let node = info.swarm.and_then(|s| s.node_id).unwrap_or_default();
    if node != rec.node_id {
        // Not the swarm netpath made (left, or re-created by someone): not ours.
        state::remove_swarm();
        return Ok(false);
    }
    e.block_on(
        e.docker()
            .leave_swarm(Some(bollard::query_parameters::LeaveSwarmOptions {
                force: true,
            })),
    )
    .map_err(|err| e.err(err, "leaving the swarm netpath initialised"))?;
    if rec.gwbridge_created {
        let _ = e.remove_network("docker_gwbridge");
    }
    state::remove_swarm();
    Ok(true)
}
