//! The runtimes of this node and the one way a name becomes a container.

use std::path::Path;

use anyhow::{Result, bail};

use super::containerd::Containerd;
use super::scan::{Inputs, Scan, assemble};
use super::{Container, Runtime, docker, host_netns, proc_root, procscan};
use crate::docker::{ContainerNet, Engine};

/// Docker's socket when `DOCKER_HOST` is unset.
const DOCKER_SOCKET: &str = "/var/run/docker.sock";

/// The container runtimes this node has, each asked again at every scan (a runtime that
/// restarts answers again without netpath restarting).
pub struct Node {
    /// Docker is here: `DOCKER_HOST` is set or its socket exists.
    docker_here: bool,
    engine: Option<Engine>,
    containerd: Option<Containerd>,
    /// containerd's namespaces at its last answer (to tell `ctr` tasks' cgroups).
    namespaces: Vec<String>,
}

/// A container and its network side.
pub struct Resolved {
    pub record: Container,
    pub net: ContainerNet,
}

impl Node {
    /// The runtimes present on this node; none answering is no error (each scan asks again,
    /// and containers are still found by their cgroups).
    pub fn connect() -> Result<Node> {
        let docker_here = std::env::var("DOCKER_HOST").is_ok_and(|h| !h.trim().is_empty())
            || Path::new(DOCKER_SOCKET).exists();
        Ok(Node {
            docker_here,
            engine: docker_here.then(|| Engine::connect().ok()).flatten(),
            containerd: Containerd::configured()?,
            namespaces: Vec::new(),
        })
    }

    /// A node whose Docker is `engine` (and whatever containerd is configured).
    pub fn with_engine(engine: Engine) -> Result<Node> {
        Ok(Node {
            docker_here: true,
            engine: Some(engine),
            containerd: Containerd::configured()?,
            namespaces: Vec::new(),
        })
    }

    /// Docker's engine, connecting if it was down; the error says why not.
    pub fn engine(&mut self) -> Result<&Engine> {
        if !self.docker_here {
            bail!("no Docker on this node (no DOCKER_HOST, no {DOCKER_SOCKET})");
        }
        if self.engine.is_none() {
            self.engine = Some(Engine::connect()?);
        }
        Ok(self.engine.as_ref().expect("set above"))
    }

    /// Where containers come from here, for the first line a command prints.
    pub fn sources(&self) -> String {
        let mut v = Vec::new();
        if self.docker_here {
            let host = std::env::var("DOCKER_HOST")
                .ok()
                .filter(|h| !h.trim().is_empty())
                .unwrap_or_else(|| format!("unix://{DOCKER_SOCKET}"));
            v.push(format!("Docker at {host}"));
        }
        if let Some(c) = &self.containerd {
            v.push(format!("containerd at {}", c.display()));
        }
        v.push(format!("cgroups in {}", proc_root().display()));
        v.join(", ")
    }

    /// Every running container, once.
    pub fn scan(&mut self) -> Scan {
        let docker = self.docker_here.then(|| match self.engine() {
            Ok(e) => docker::list(e).map_err(|e| format!("{e:#}")),
            Err(e) => Err(format!("{e:#}")),
        });
        let containerd = self.containerd.as_mut().map(|c| c.list());
        if let Some(Ok(l)) = &containerd {
            log::debug!("containerd: {l:?}");
            self.namespaces = l.namespaces.clone();
        }
        let procs = procscan::scan(&proc_root(), &self.namespaces);
        let root = proc_root();
        assemble(Inputs {
            docker,
            containerd: containerd.map(|r| r.map_err(|e| format!("{e:#}"))),
            procs: &procs,
            netns_of: &|pid| procscan::netns_of(&root, pid),
        })
    }

    /// The containers `name` names (a pod's name names all of its containers).
    pub fn find(&mut self, name: &str) -> Result<Vec<Container>> {
        let scan = self.scan();
        let found: Vec<Container> = scan
            .containers
            .iter()
            .filter(|c| c.matches(name))
            .cloned()
            .collect();
        if !found.is_empty() {
            return Ok(found);
        }
        let mut why = format!(
            "unknown container {name}: none of the containers of {} has that id, name or \
             namespace/pod[/container]",
            self.sources()
        );
        for (_, e) in &scan.failed {
            why.push_str(&format!("; {e}"));
        }
        bail!("{why}")
    }

    /// The container `name` names and its network side: Docker's through its API as
    /// always, the others' through their network namespace.
    pub fn resolve(&mut self, name: &str) -> Result<Resolved> {
        let found = match self.find(name) {
            Ok(f) => f,
            // Docker resolves names of its own this listing does not (short id prefixes).
            Err(e) => match self.engine.as_ref() {
                Some(engine) => {
                    let net = super::resolve_container(engine, name)?;
                    let record = docker_record(&net);
                    return Ok(Resolved { record, net });
                }
                None => return Err(e),
            },
        };
        let netns: std::collections::BTreeSet<Option<u32>> =
            found.iter().map(|c| c.netns_inum).collect();
        if netns.len() > 1 || (netns.contains(&None) && found.len() > 1) {
            let names: Vec<String> = found.iter().map(Container::describe).collect();
            bail!(
                "{name} names several containers: {}; name one by its id or namespace/pod/container",
                names.join(", ")
            );
        }
        // A pod's containers share its namespace: any will do, an application's first.
        let record = found
            .iter()
            .find(|c| !c.sandbox)
            .unwrap_or(&found[0])
            .clone();
        let net = match record.runtime {
            Runtime::Docker => super::resolve_container(self.engine()?, &record.id)?,
            _ => super::net_of(&record, &host_netns()?)?,
        };
        Ok(Resolved { record, net })
    }
}

/// The record of a Docker container found by Docker's own name resolution.
fn docker_record(net: &ContainerNet) -> Container {
    Container {
        id: net.id.clone(),
        name: net.name.clone(),
        runtime: Runtime::Docker,
        runtime_namespace: None,
        pid: Some(net.pid),
        netns_inum: Some(net.netns_inum),
        pod: None,
        sandbox: false,
        labels: Default::default(),
    }
}
