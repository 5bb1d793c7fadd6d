//! containerd's own API (gRPC over its unix socket, the `containerd-client` crate): every
//! namespace's containers with their labels, and the pid of each running task. Containers a
//! kubelet made through the CRI plugin (namespace `k8s.io`) carry the pod's labels
//! (`io.kubernetes.pod.namespace`, `io.kubernetes.pod.name`, `io.kubernetes.container.name`,
//! `io.kubernetes.pod.uid`), as do those a test starts with `ctr run --label`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context as _, Result, anyhow};
use containerd_client::services::v1::{
    ListContainersRequest, ListNamespacesRequest, ListTasksRequest,
    containers_client::ContainersClient, namespaces_client::NamespacesClient,
    tasks_client::TasksClient,
};
use containerd_client::tonic::Request;
use containerd_client::tonic::transport::Channel;
use containerd_client::types::v1::Status;
use containerd_client::with_namespace;

/// Where containerd listens unless `CONTAINERD_ADDRESS` says otherwise.
pub const DEFAULT_ADDRESS: &str = "/run/containerd/containerd.sock";
/// Label Docker puts on the containerd containers behind its own (named through its API).
const DOCKER_BUNDLE: &str = "com.docker/engine.bundle.path";
/// How long one listing may take before containerd counts as not answering.
const TIMEOUT: Duration = Duration::from_secs(5);

/// One containerd container.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CtrContainer {
    pub namespace: String,
    pub id: String,
    pub image: String,
    pub labels: BTreeMap<String, String>,
    /// Its task's pid, when the task runs.
    pub pid: Option<u32>,
}

/// Every namespace and its containers, as one listing saw them.
#[derive(Clone, Debug, Default)]
pub struct Listing {
    pub namespaces: Vec<String>,
    pub containers: Vec<CtrContainer>,
}

/// A containerd socket, connected on first use and again after a failure (a restarted
/// containerd is a new connection).
pub struct Containerd {
    pub address: PathBuf,
    rt: tokio::runtime::Runtime,
    channel: Option<Channel>,
}

impl Containerd {
    /// containerd at `CONTAINERD_ADDRESS` (a path, or `unix://path`), else at the default
    /// socket when that exists; `None` when this node has neither (no containerd here).
    pub fn configured() -> Result<Option<Containerd>> {
        let addr = match std::env::var("CONTAINERD_ADDRESS") {
            Ok(a) if !a.trim().is_empty() => {
                let p = a.trim().trim_start_matches("unix://");
                if !p.starts_with('/') {
                    anyhow::bail!(
                        "unsupported CONTAINERD_ADDRESS {a:?}: netpath talks to containerd over a unix socket path"
                    );
                }
                PathBuf::from(p)
            }
            _ if Path::new(DEFAULT_ADDRESS).exists() => PathBuf::from(DEFAULT_ADDRESS),
            _ => return Ok(None),
        };
        Ok(Some(Containerd::at(addr)?))
    }

    pub fn at(address: PathBuf) -> Result<Containerd> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .context("cannot start a tokio runtime for the containerd client")?;
        Ok(Containerd {
            address,
            rt,
            channel: None,
        })
    }

    /// `unix:///run/containerd/containerd.sock`, as users write it.
    pub fn display(&self) -> String {
        format!("unix://{}", self.address.display())
    }

    /// Every namespace's containers (but Docker's, which Docker names) with the pid of each
    /// running task.
    pub fn list(&mut self) -> Result<Listing> {
        let r = self.list_once();
        if r.is_err() {
            self.channel = None;
        }
        r.map_err(|e| anyhow!("containerd not reachable at {}: {e:#}", self.display()))
    }

    fn list_once(&mut self) -> Result<Listing> {
        let channel = match &self.channel {
            Some(c) => c.clone(),
            None => {
                let path = self.address.clone();
                let c = self.rt.block_on(async {
                    tokio::time::timeout(TIMEOUT, containerd_client::connect(path)).await
                });
                let c = c.map_err(|_| anyhow!("no answer within {TIMEOUT:?}"))??;
                self.channel = Some(c.clone());
                c
            }
        };
        self.rt.block_on(async {
            tokio::time::timeout(TIMEOUT, list_all(channel))
                .await
                .map_err(|_| anyhow!("no answer within {TIMEOUT:?}"))?
        })
    }
}

/// A gRPC failure in one line: its message and what caused it (not tonic's debug form).
fn status(s: containerd_client::tonic::Status) -> anyhow::Error {
    let mut m = s.message().to_string();
    let mut cur = std::error::Error::source(&s);
    while let Some(c) = cur {
        let part = c.to_string();
        if !m.ends_with(&part) {
            m.push_str(&format!(": {part}"));
        }
        cur = c.source();
    }
    anyhow!(m)
}

async fn list_all(channel: Channel) -> Result<Listing> {
    let mut ns_client = NamespacesClient::new(channel.clone());
    let namespaces: Vec<String> = ns_client
        .list(ListNamespacesRequest::default())
        .await
        .map_err(status)?
        .into_inner()
        .namespaces
        .into_iter()
        .map(|n| n.name)
        .collect();
    let mut containers = Vec::new();
    for ns in &namespaces {
        let mut cc = ContainersClient::new(channel.clone());
        let list = cc
            .list(with_namespace!(
                ListContainersRequest::default(),
                ns.as_str()
            ))
            .await?
            .into_inner()
            .containers;
        let mut tc = TasksClient::new(channel.clone());
        let tasks = tc
            .list(with_namespace!(ListTasksRequest::default(), ns.as_str()))
            .await
            .map_err(status)?
            .into_inner()
            .tasks;
        let running: BTreeMap<String, u32> = tasks
            .into_iter()
            .filter(|t| t.status == Status::Running as i32 && t.pid > 0)
            // A task's id is its container's (containerd leaves `container_id` empty here).
            .map(|t| {
                let id = if t.id.is_empty() {
                    t.container_id
                } else {
                    t.id
                };
                (id, t.pid)
            })
            .collect();
        for c in list {
            if c.labels.contains_key(DOCKER_BUNDLE) {
                continue;
            }
            containers.push(CtrContainer {
                namespace: ns.clone(),
                pid: running.get(&c.id).copied(),
                id: c.id,
                image: c.image,
                labels: c.labels.into_iter().collect(),
            });
        }
    }
    Ok(Listing {
        namespaces,
        containers,
    })
}
