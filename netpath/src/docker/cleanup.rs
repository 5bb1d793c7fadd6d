//! `cleanup_docker`: remove what netpath made in Docker and a killed run left behind.

use std::collections::HashMap;
use std::path::Path;

use anyhow::{Context, Result};
use bollard::query_parameters::{
    ListContainersOptions, ListImagesOptions, ListNetworksOptions, RemoveContainerOptions,
    RemoveImageOptions,
};

use super::hostveth::{KINDS, host_link_run};
use super::state::{self, run_in_use};
use super::swarm::leave_swarm_if_unused;
use super::{Engine, LABEL, LABEL_KEEP, LABEL_RUN};
use crate::lab::netns_name;
use crate::sys::netns::Netns;
use crate::sys::nl::Nl;

/// Remove every netpath-labelled container and network of `engine` (except those of a
/// Docker lab another live process is running), every netpath image not labelled
/// `netpath.keep`, the swarm if netpath initialised it and nothing of netpath's uses it
/// any more, the links netpath put in the Docker host's namespace with their peers'
/// namespaces (macvlan parents `np<id>mp`/`np<id>-mvp`, egress uplinks
/// `np<id>up`/`np<id>-rmt`) and the second
/// daemons (`published-nat`) of runs that are gone. Returns what was removed.
pub fn cleanup_docker(engine: &Engine) -> Result<Vec<String>> {
    let mut removed = remove_containers(engine)?;
    let gone_nets = remove_networks(engine)?;
    removed.extend(gone_nets.iter().map(|n| format!("network {n}")));
    removed.extend(remove_images(engine)?);
    if leave_swarm_if_unused(engine, &gone_nets)? {
        removed.push("swarm (initialised by netpath)".to_string());
    }
    removed.extend(cleanup_docker_host(&engine.host_netns)?);
    Ok(removed)
}

/// True if the labels name a run whose lock a live process holds.
fn busy(labels: &Option<HashMap<String, String>>) -> bool {
    labels
        .as_ref()
        .and_then(|l| l.get(LABEL_RUN))
        .is_some_and(|id| run_in_use(id))
}

fn label_filter() -> Option<HashMap<String, Vec<String>>> {
    Some(HashMap::from([(
        "label".to_string(),
        vec![LABEL.to_string()],
    )]))
}

/// netpath's containers of runs that are gone.
fn remove_containers(engine: &Engine) -> Result<Vec<String>> {
    let ctrs = engine
        .block_on(engine.docker().list_containers(Some(ListContainersOptions {
            all: true,
            filters: label_filter(),
            ..Default::default()
        })))
        .map_err(|e| engine.err(e, "listing netpath containers"))?;
    let mut removed = Vec::new();
    for c in ctrs.into_iter().filter(|c| !busy(&c.labels)) {
        let Some(id) = c.id else { continue };
        let name = c
            .names
            .and_then(|n| n.first().cloned())
            .unwrap_or_else(|| id.clone())
            .trim_start_matches('/')
            .to_string();
        let opts = RemoveContainerOptions {
            force: true,
            v: true,
            ..Default::default()
        };
        let res = engine.block_on(engine.docker().remove_container(&id, Some(opts)));
        if engine.removed(res, &format!("removing container {name}"))? {
            removed.push(format!("container {name}"));
        }
    }
    Ok(removed)
}

/// netpath's networks of runs that are gone; returns their names.
fn remove_networks(engine: &Engine) -> Result<Vec<String>> {
    let nets = engine
        .block_on(engine.docker().list_networks(Some(ListNetworksOptions {
            filters: label_filter(),
        })))
        .map_err(|e| engine.err(e, "listing netpath networks"))?;
    let mut gone = Vec::new();
    for n in nets.into_iter().filter(|n| !busy(&n.labels)) {
        let Some(name) = n.name else { continue };
        let res = engine.block_on(engine.docker().remove_network(&name));
        if engine.removed(res, &format!("removing network {name}"))? {
            gone.push(name);
        }
    }
    Ok(gone)
}

/// netpath's images not labelled `netpath.keep`; one a busy run's container uses stays.
fn remove_images(engine: &Engine) -> Result<Vec<String>> {
    let imgs = engine
        .block_on(engine.docker().list_images(Some(ListImagesOptions {
            filters: label_filter(),
            ..Default::default()
        })))
        .map_err(|e| engine.err(e, "listing netpath images"))?;
    let mut removed = Vec::new();
    for i in imgs
        .into_iter()
        .filter(|i| !i.labels.contains_key(LABEL_KEEP))
    {
        let name = i.repo_tags.first().cloned().unwrap_or_else(|| i.id.clone());
        // No force: in use by a busy run's container, it stays.
        let opts = RemoveImageOptions {
            force: false,
            noprune: false,
        };
        let res = engine.block_on(engine.docker().remove_image(&i.id, Some(opts), None));
        match engine.removed(res, "removing it") {
            Ok(true) => removed.push(format!("image {name}")),
            Ok(false) => {}
            Err(e) => log::info!("leaving image {name}: {e}"),
        }
    }
    Ok(removed)
}

/// On SIGINT/SIGTERM: the Docker labs of this process are released and removed with
/// everything else [`cleanup_docker`] would remove (their drops never run: the process exits).
pub(crate) fn interrupted() -> Vec<String> {
    if state::release_held_locks() == 0 {
        return Vec::new();
    }
    // A daemon under load can take seconds to answer a network create.
    if !crate::lab::cleanup::wait_for_creates(std::time::Duration::from_secs(20)) {
        eprintln!("netpath: a Docker create is still unanswered after 20 s; sweeping anyway");
    }
    let mut removed = match Engine::connect().and_then(|e| sweep_until_quiet(&e)) {
        Ok(removed) => removed,
        Err(e) => {
            eprintln!("netpath: Docker cleanup failed ({e:#}); run `netpath cleanup`");
            Vec::new()
        }
    };
    // Our locks were released above, so they are stale now: their files go too.
    removed.extend(
        state::remove_stale_locks()
            .into_iter()
            .map(|id| format!("run lock {id}")),
    );
    removed
}

/// [`cleanup_docker`] until a sweep finds nothing: a create the run sent just before the
/// signal can land in the daemon after the first sweep listed what exists (seen: a network
/// and its bridge left by a SIGINT 3.4 s into `compare --docker`). A sweep that fails (a
/// network whose container landed after the containers were listed: "active endpoints") is
/// tried again; only the last attempt's failure is reported.
fn sweep_until_quiet(engine: &Engine) -> Result<Vec<String>> {
    let mut removed = Vec::new();
    let mut failed = None;
    for attempt in 0..6 {
        if attempt > 0 {
            std::thread::sleep(std::time::Duration::from_millis(300));
        }
        match cleanup_docker(engine) {
            Ok(more) => {
                let quiet = more.is_empty() && attempt > 0;
                removed.extend(more);
                failed = None;
                if quiet {
                    break;
                }
            }
            Err(e) => failed = Some(e),
        }
    }
    match failed {
        Some(e) => Err(e),
        None => Ok(removed),
    }
}

/// The part of [`cleanup_docker`] that needs no engine (for when no daemon answers):
/// second daemons of runs that are gone (stopped, their namespace and directories
/// removed), netpath's links in the Docker host's namespace `host_netns`
/// (`/proc/self/ns/net` for the system daemon: macvlan parents `np<id>mp`, egress uplinks
/// `np<id>up`), their peers' namespaces (`np<id>-mvp`, `np<id>-rmt`), stale run locks.
pub fn cleanup_docker_host(host_netns: &Path) -> Result<Vec<String>> {
    let mut removed = Vec::new();
    for d in state::daemons() {
        if run_in_use(&d.run_id) {
            continue;
        }
        super::daemon::stop_recorded(&d)
            .with_context(|| format!("stopping the second dockerd of run {}", d.run_id))?;
        removed.push(format!(
            "dockerd of run {} ({})",
            d.run_id,
            d.socket.display()
        ));
    }

    // netpath's links in the Docker host's namespace (macvlan parents, egress uplinks), then
    // their peers' namespaces.
    let host = Netns::at("host", host_netns)?;
    let links: Vec<(String, u32)> = host.run(|| {
        Ok(Nl::new()?
            .links()?
            .into_iter()
            .filter_map(|l| {
                let id = host_link_run(&l.name)?;
                (!run_in_use(id)).then(|| (l.name.clone(), l.ifindex))
            })
            .collect())
    })?;
    if !links.is_empty() {
        host.run(|| {
            let nl = Nl::new()?;
            for (_, i) in &links {
                nl.del_link(*i)?;
            }
            Ok(())
        })?;
        removed.extend(links.into_iter().map(|(n, _)| format!("link {n}")));
    }
    for role in KINDS.map(|k| k.role) {
        for id in state::ns_markers(role) {
            if run_in_use(&id) {
                continue;
            }
            if let Ok(ns) = Netns::open_existing(&netns_name(&id, role)) {
                ns.delete()?;
                removed.push(format!("netns {}", ns.name));
            }
            state::remove_ns_marker(role, &id);
        }
    }
    state::remove_stale_locks();
    Ok(removed)
}
