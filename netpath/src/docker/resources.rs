//! Everything one Docker lab creates: made through here, removed together by its teardown.
//!
//! Containers, networks, a swarm, a second daemon, the agent image, objects outside Docker
//! such as the macvlan parent, and the run lock.

use std::collections::HashMap;
use std::net::Ipv4Addr;

use anyhow::{Context, Result};
use bollard::models::{
    ContainerCreateBody, EndpointIpamConfig, EndpointSettings, HostConfig, Ipam, IpamConfig,
    NetworkCreateRequest, NetworkingConfig, PortBinding,
};
use bollard::query_parameters::{
    CreateContainerOptions, InspectContainerOptions, RemoveImageOptions, StartContainerOptions,
};

use super::container::{ContainerNet, from_inspect};
use super::daemon::SecondDaemon;
use super::state::RunLock;
use super::swarm::leave_swarm_if_unused;
use super::{AGENT_PORT, Engine, LABEL, LABEL_RUN};
use crate::path::{Errors, Teardown};

/// Everything a Docker lab created, removed on teardown (by its path, or by the
/// [`Building`](crate::path::Building) guard of a build that failed).
pub(crate) struct Resources {
    pub engine: Engine,
    pub run_id: String,
    /// Engine of the second daemon (published-nat), where the containers are.
    ctr_engine: Option<Engine>,
    /// (id, name)
    containers: Vec<(String, String)>,
    networks: Vec<String>,
    /// netpath initialised the swarm for this lab.
    pub swarm_created: bool,
    /// Objects a driver made outside Docker (the macvlan parent), removed after the
    /// networks that use them.
    pub others: Vec<Box<dyn Teardown>>,
    daemon: Option<SecondDaemon>,
    /// The agent image on the main engine, to remove at teardown.
    pub image: Option<String>,
    keep_image: bool,
    _lock: Option<RunLock>,
}

impl Resources {
    pub(crate) fn new(engine: &Engine, run_id: &str, lock: RunLock, keep_image: bool) -> Self {
        Resources {
            engine: engine.clone(),
            run_id: run_id.to_string(),
            ctr_engine: None,
            containers: Vec::new(),
            networks: Vec::new(),
            swarm_created: false,
            others: Vec::new(),
            daemon: None,
            image: None,
            keep_image,
            _lock: Some(lock),
        }
    }

    /// The engine the lab's containers run on.
    pub(crate) fn ctr(&self) -> &Engine {
        self.ctr_engine.as_ref().unwrap_or(&self.engine)
    }

    /// Run the containers on a second dockerd, started now in a namespace of its own.
    pub(crate) fn start_second_daemon(&mut self) -> Result<()> {
        let d = SecondDaemon::start(&self.run_id)?;
        let e2 = d.engine()?;
        self.daemon = Some(d);
        self.ctr_engine = Some(e2);
        Ok(())
    }

    pub(crate) fn second_daemon(&self) -> Option<&SecondDaemon> {
        self.daemon.as_ref()
    }

    /// `docker network create` with netpath's labels.
    pub(crate) fn create_network(
        &mut self,
        name: &str,
        driver: &str,
        options: HashMap<String, String>,
        ipam: Option<IpamConfig>,
        attachable: bool,
    ) -> Result<()> {
        let _inflight = crate::lab::cleanup::begin_create()?;
        let e = self.ctr().clone();
        let req = NetworkCreateRequest {
            name: name.to_string(),
            driver: Some(driver.to_string()),
            attachable: attachable.then_some(true),
            options: Some(options),
            ipam: ipam.map(|c| Ipam {
                driver: Some("default".into()),
                config: Some(vec![c]),
                options: None,
            }),
            labels: Some(labels(&self.run_id)),
            ..Default::default()
        };
        e.block_on(e.docker().create_network(req))
            .map_err(|err| e.err(err, &format!("creating {driver} network {name}")))?;
        self.networks.push(name.to_string());
        Ok(())
    }

    /// Create and start a container `name` of `image` running `cmd` on `network` (at `ip` if
    /// given); `publish` maps `127.0.0.1:publish` to the agent port (TCP, and UDP too on the
    /// second daemon: without docker-proxy a UDP mapping is one more DNAT rule, which
    /// `published-nat --proto udp` crosses).
    pub(crate) fn run_container(
        &mut self,
        name: &str,
        image: &str,
        cmd: &[&str],
        network: &str,
        ip: Option<Ipv4Addr>,
        publish: Option<u16>,
    ) -> Result<ContainerNet> {
        let inflight = crate::lab::cleanup::begin_create()?;
        let e = self.ctr().clone();
        let udp = self.daemon.is_some();
        let mut body = container_body(image, cmd, network, ip, publish.map(|p| (p, udp)));
        body.labels = Some(labels(&self.run_id));
        let created = e
            .block_on(e.docker().create_container(
                Some(CreateContainerOptions {
                    name: Some(name.to_string()),
                    ..Default::default()
                }),
                body,
            ))
            .map_err(|err| e.err(err, &format!("creating container {name}")))?;
        self.containers.push((created.id.clone(), name.to_string()));
        drop(inflight);
        e.block_on(
            e.docker()
                .start_container(&created.id, None::<StartContainerOptions>),
        )
        .map_err(|err| e.err(err, &format!("starting container {name}")))?;
        let c = e
            .block_on(
                e.docker()
                    .inspect_container(&created.id, None::<InspectContainerOptions>),
            )
            .map_err(|err| e.err(err, &format!("inspecting container {name}")))?;
        from_inspect(&e, &c).with_context(|| format!("resolving container {name}"))
    }
}

impl Teardown for Resources {
    /// Remove the containers, the networks, the swarm if this lab initialised it (and no
    /// other netpath overlay uses it), the objects outside Docker, the second daemon and
    /// (unless kept or reused) the agent image, then release the run lock.
    fn teardown(&mut self) -> Result<()> {
        let mut errors = Errors::default();
        let e = self.ctr().clone();
        for (id, name) in std::mem::take(&mut self.containers).into_iter().rev() {
            errors.note(
                e.remove_container(&id)
                    .with_context(|| format!("removing container {name}")),
            );
        }
        let networks = std::mem::take(&mut self.networks);
        for n in networks.iter().rev() {
            errors.note(e.remove_network(n));
        }
        if std::mem::take(&mut self.swarm_created) {
            errors.note(leave_swarm_if_unused(&self.engine, &networks).map(|_| ()));
        }
        for mut o in std::mem::take(&mut self.others).into_iter().rev() {
            errors.note(o.teardown());
        }
        self.ctr_engine = None;
        if let Some(d) = self.daemon.take() {
            errors.note(d.stop());
        }
        if let Some(img) = self.image.take()
            && !self.keep_image
        {
            // Fails (harmlessly) while another run's containers use it.
            let _ = self.engine.block_on(self.engine.docker().remove_image(
                &img,
                None::<RemoveImageOptions>,
                None,
            ));
        }
        self._lock = None;
        errors.result(&format!("Docker lab {}", self.run_id))
    }
}

/// netpath's labels: `netpath=1` and the run id.
fn labels(run_id: &str) -> HashMap<String, String> {
    HashMap::from([
        (LABEL.to_string(), "1".to_string()),
        (LABEL_RUN.to_string(), run_id.to_string()),
    ])
}

/// The create request of an agent container (labels left to the caller).
fn container_body(
    image: &str,
    cmd: &[&str],
    network: &str,
    ip: Option<Ipv4Addr>,
    publish: Option<(u16, bool)>,
) -> ContainerCreateBody {
    let protos: &[&str] = match publish {
        Some((_, true)) => &["tcp", "udp"],
        _ => &["tcp"],
    };
    let keys: Vec<String> = protos.iter().map(|p| format!("{AGENT_PORT}/{p}")).collect();
    let endpoints = match network {
        "host" | "none" | "bridge" => None,
        n => Some(NetworkingConfig {
            endpoints_config: Some(HashMap::from([(
                n.to_string(),
                EndpointSettings {
                    ipam_config: ip.map(|ip| EndpointIpamConfig {
                        ipv4_address: Some(ip.to_string()),
                        ..Default::default()
                    }),
                    ..Default::default()
                },
            )])),
        }),
    };
    ContainerCreateBody {
        image: Some(image.to_string()),
        cmd: Some(cmd.iter().map(|s| s.to_string()).collect()),
        exposed_ports: publish.map(|_| keys.iter().map(|k| (k.clone(), HashMap::new())).collect()),
        host_config: Some(HostConfig {
            network_mode: Some(network.to_string()),
            port_bindings: publish.map(|(p, _)| {
                keys.iter()
                    .map(|k| {
                        let b = PortBinding {
                            // Containment: published on loopback only.
                            host_ip: Some("127.0.0.1".into()),
                            host_port: Some(p.to_string()),
                        };
                        (k.clone(), Some(vec![b]))
                    })
                    .collect()
            }),
            ..Default::default()
        }),
        networking_config: endpoints,
        ..Default::default()
    }
}
