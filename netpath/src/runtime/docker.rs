//! Docker's containers as its engine lists them (names and labels) and inspects them (the
//! network side, read as the Docker lab reads its own: [`crate::docker::ContainerNet`]).

use std::collections::HashMap;

use anyhow::{Context, Result};
use bollard::query_parameters::{InspectContainerOptions, ListContainersOptions};

use super::scan::DockerSeen;
use crate::docker::{ContainerNet, Engine, from_inspect};

/// The running containers of `engine`.
pub fn list(engine: &Engine) -> Result<Vec<DockerSeen>> {
    let filters = HashMap::from([("status".to_string(), vec!["running".to_string()])]);
    let list = engine
        .block_on(engine.docker().list_containers(Some(ListContainersOptions {
            filters: Some(filters),
            ..Default::default()
        })))
        .map_err(|e| engine.err(e, "listing running containers"))?;
    Ok(list
        .into_iter()
        .filter_map(|c| {
            let id = c.id?;
            let name = c
                .names
                .unwrap_or_default()
                .first()
                .map(|n| n.trim_start_matches('/').to_string())
                .unwrap_or_else(|| id[..id.len().min(12)].to_string());
            Some(DockerSeen {
                id,
                name,
                labels: c.labels.unwrap_or_default().into_iter().collect(),
            })
        })
        .collect())
}

/// Look up a running container (name or id) and everything about its network.
pub fn resolve_container(engine: &Engine, name: &str) -> Result<ContainerNet> {
    let c = engine
        .block_on(
            engine
                .docker()
                .inspect_container(name, None::<InspectContainerOptions>),
        )
        .map_err(|e| engine.err(e, &format!("inspecting container {name}")))?;
    from_inspect(engine, &c).with_context(|| format!("resolving the network of container {name}"))
}
