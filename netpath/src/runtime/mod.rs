//! Containers and pods on this node, whatever runs them.
//!
//! `/proc` is the ground truth: each task's cgroup path names its container (the layouts per
//! runtime are in [`cgroup`]; a CRI container's `kubepods…pod<UID>` level also gives the pod's
//! UID and QoS class) and its `ns/net` the network namespace. Names come from whichever
//! runtime answers: Docker's API (bollard, [`docker`]), containerd's ([`containerd`]:
//! containers with their labels, tasks with their pids), else the cgroup alone, said so
//! ([`Runtime::Cgroup`]). Pods are named by the labels in [`k8s`], so a container is named by
//! its id, its name, or `namespace/pod[/container]`.
//!
//! [`Node`] holds the runtime clients; [`Node::scan`] lists every container once;
//! [`Node::resolve`] turns a name into the network view the tracer takes
//! ([`ContainerNet`](crate::docker::ContainerNet)), through Docker's API for Docker's
//! containers (unchanged) and through the namespace itself for the others ([`net`]).

mod between;
pub mod cgroup;
pub mod containerd;
mod devices;
mod docker;
mod inspect_report;
mod lookup;
mod net;
mod node;
pub mod procscan;
mod scan;
pub mod select;

use std::collections::BTreeMap;

pub use between::{Between, between, between_nets};
pub use devices::{node_devices, with_known};
pub use docker::resolve_container;
pub use inspect_report::{InspectReport, InterfaceReport, inspect_docker, inspect_net};
pub use lookup::inspect;
pub use net::net_of;
pub use node::{Node, Resolved};
pub use scan::{Scan, assemble};

/// An id as people read it: Docker's and the CRI's 64 hex digits cut to 12, any other
/// (containerd's are names) whole.
pub fn short_id(id: &str) -> &str {
    if id.len() == 64 && id.bytes().all(|b| b.is_ascii_hexdigit()) {
        &id[..12]
    } else {
        id
    }
}

/// Label keys a kubelet's runtime sets on every container of a pod: pod identity follows
/// Kubernetes' conventions.
pub mod k8s {
    pub const POD_NAMESPACE: &str = "io.kubernetes.pod.namespace";
    pub const POD_NAME: &str = "io.kubernetes.pod.name";
    pub const POD_UID: &str = "io.kubernetes.pod.uid";
    pub const CONTAINER_NAME: &str = "io.kubernetes.container.name";
    /// containerd's CRI plugin: `sandbox` (the pod's pause container) or `container`.
    pub const CRI_KIND: &str = "io.cri-containerd.kind";
    /// cri-dockerd: `podsandbox` or `container`.
    pub const DOCKER_KIND: &str = "io.kubernetes.docker.type";
}

/// Who named a container.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, schemars::JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum Runtime {
    Docker,
    Containerd,
    /// No runtime answered for it: found by its cgroup and network namespace alone.
    Cgroup,
}

impl Runtime {
    pub fn name(self) -> &'static str {
        match self {
            Runtime::Docker => "docker",
            Runtime::Containerd => "containerd",
            Runtime::Cgroup => "cgroup",
        }
    }
}

/// The pod a container belongs to, as far as it is known.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, schemars::JsonSchema)]
pub struct Pod {
    pub namespace: Option<String>,
    pub name: Option<String>,
    pub uid: Option<String>,
    /// `Guaranteed`, `Burstable` or `BestEffort`, from the pod's cgroup.
    pub qos: Option<&'static str>,
    /// The container's name in the pod spec.
    pub container: Option<String>,
}

impl Pod {
    /// A pod from a container's labels, if they name one.
    pub fn from_labels(labels: &BTreeMap<String, String>) -> Option<Pod> {
        let get = |k: &str| labels.get(k).filter(|v| !v.is_empty()).cloned();
        let p = Pod {
            namespace: get(k8s::POD_NAMESPACE),
            name: get(k8s::POD_NAME),
            uid: get(k8s::POD_UID),
            qos: None,
            container: get(k8s::CONTAINER_NAME),
        };
        (p.name.is_some() || p.uid.is_some()).then_some(p)
    }

    /// `namespace/name` (the UID when the name is unknown).
    pub fn path(&self) -> String {
        let name = self.name.as_deref().or(self.uid.as_deref()).unwrap_or("?");
        match &self.namespace {
            Some(ns) => format!("{ns}/{name}"),
            None => name.to_string(),
        }
    }
}

/// One running container, whoever runs it.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, schemars::JsonSchema)]
pub struct Container {
    pub id: String,
    /// Docker's name; the pod spec's container name; else the id (12 characters for one
    /// found by its cgroup alone).
    pub name: String,
    pub runtime: Runtime,
    /// The containerd namespace it lives in.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub runtime_namespace: Option<String>,
    /// Its first task (the init of its PID namespace), when known.
    pub pid: Option<u32>,
    pub netns_inum: Option<u32>,
    pub pod: Option<Pod>,
    /// A pod's sandbox (pause) container: it holds the pod's namespaces.
    pub sandbox: bool,
    pub labels: BTreeMap<String, String>,
}

impl Container {
    /// Kubernetes' `namespace`, `pod` and `container` label values ("" where none).
    pub fn k8s_labels(&self) -> (String, String, String) {
        match &self.pod {
            Some(p) => (
                p.namespace.clone().unwrap_or_default(),
                p.name.clone().or_else(|| p.uid.clone()).unwrap_or_default(),
                if self.sandbox {
                    String::new()
                } else {
                    p.container.clone().unwrap_or_else(|| self.name.clone())
                },
            ),
            None => (String::new(), String::new(), self.name.clone()),
        }
    }

    /// True if `name` names this container: its id (or an id prefix of 12 characters or
    /// more), its name, `namespace/pod` of its pod, or `namespace/pod/container`.
    pub fn matches(&self, name: &str) -> bool {
        if name.is_empty() {
            return false;
        }
        if self.id == name || (name.len() >= 12 && self.id.starts_with(name)) || self.name == name {
            return true;
        }
        let Some(p) = &self.pod else { return false };
        let pod = p.path();
        if name == pod {
            return true;
        }
        !self.sandbox
            && p.container
                .as_deref()
                .is_some_and(|c| name == format!("{pod}/{c}"))
    }

    /// How people name it: `namespace/pod/container` in a pod, else its name.
    pub fn display(&self) -> String {
        match &self.pod {
            Some(p) if self.sandbox => p.path(),
            Some(p) => format!("{}/{}", p.path(), self.k8s_labels().2),
            None => self.name.clone(),
        }
    }

    /// One line: what it is and who named it.
    pub fn describe(&self) -> String {
        let mut s = format!(
            "{} ({}, id {}",
            self.display(),
            self.runtime.name(),
            short_id(&self.id)
        );
        if let Some(p) = &self.pod {
            if let Some(uid) = &p.uid {
                s.push_str(&format!(", pod uid {uid}"));
            }
            if let Some(q) = p.qos {
                s.push_str(&format!(", QoS {q}"));
            }
        }
        s.push(')');
        s
    }

    /// `key` or `key=value` filters, all of which its labels must match (as `docker ps
    /// --filter label=…`).
    pub fn has_labels(&self, filters: &[String]) -> bool {
        filters.iter().all(|f| match f.split_once('=') {
            Some((k, v)) => self.labels.get(k).is_some_and(|x| x == v),
            None => self.labels.contains_key(f.as_str()),
        })
    }
}

#[cfg(test)]
mod tests;

/// Where this node's tasks are: `/proc`, or the host's mounted elsewhere (`--host-proc`).
pub fn proc_root() -> std::path::PathBuf {
    crate::docker::proc_root()
}

/// The namespace the runtimes' bridges and host-side veths live in: netpath's own (it runs
/// in the host's network namespace, as the DaemonSet and the swarm stack do).
pub fn host_netns() -> anyhow::Result<crate::sys::netns::Netns> {
    crate::sys::netns::Netns::at("host", std::path::Path::new("/proc/self/ns/net"))
}
