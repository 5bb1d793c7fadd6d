//! One listing of the node's containers: what each runtime answered, joined with what `/proc`
//! shows, into [`Container`] records.

use std::collections::{BTreeMap, BTreeSet};

use super::cgroup::Hint;
use super::containerd::Listing;
use super::procscan::ProcContainer;
use super::{Container, Pod, Runtime, k8s};

/// A running Docker container as its engine lists it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DockerSeen {
    pub id: String,
    pub name: String,
    pub labels: BTreeMap<String, String>,
}

/// What one scan found.
#[derive(Clone, Debug, Default)]
pub struct Scan {
    pub containers: Vec<Container>,
    /// Runtimes present on this node that did not answer this time, with why.
    pub failed: Vec<(Runtime, String)>,
}

/// What the runtimes answered (`None`: no such runtime on this node) and what `/proc` holds;
/// `netns_of` reads a pid's network namespace.
pub struct Inputs<'a> {
    pub docker: Option<Result<Vec<DockerSeen>, String>>,
    pub containerd: Option<Result<Listing, String>>,
    pub procs: &'a BTreeMap<String, ProcContainer>,
    pub netns_of: &'a dyn Fn(u32) -> Option<u32>,
}

/// The records of one scan. A container a runtime lists is that runtime's; one `/proc` alone
/// shows is kept as [`Runtime::Cgroup`] only when no runtime on this node could have made it
/// (its cgroup names a runtime this node has, or, unnamed, while one of them did not answer:
/// it would come back under another name at the next scan).
pub fn assemble(i: Inputs<'_>) -> Scan {
    let mut s = Scan::default();
    let mut present: BTreeSet<Hint> = BTreeSet::new();
    match i.docker {
        None => {}
        Some(Ok(list)) => {
            present.insert(Hint::Docker);
            s.containers
                .extend(list.into_iter().map(|d| from_docker(d, i.procs)));
        }
        Some(Err(e)) => {
            present.insert(Hint::Docker);
            s.failed.push((Runtime::Docker, e));
        }
    }
    match i.containerd {
        None => {}
        Some(Ok(l)) => {
            present.insert(Hint::Containerd);
            s.containers.extend(from_containerd(l, i.procs, i.netns_of));
        }
        Some(Err(e)) => {
            present.insert(Hint::Containerd);
            s.failed.push((Runtime::Containerd, e));
        }
    }
    let listed: BTreeSet<&str> = s.containers.iter().map(|c| c.id.as_str()).collect();
    let pids: BTreeSet<u32> = s.containers.iter().filter_map(|c| c.pid).collect();
    let mut alone = Vec::new();
    for (id, p) in i.procs {
        let ours = match p.cgroup.hint {
            Hint::Docker | Hint::Containerd => !present.contains(&p.cgroup.hint),
            Hint::Crio | Hint::Podman => true,
            Hint::Unknown => s.failed.is_empty(),
        };
        // A runtime may name a container otherwise than its cgroup does: same task, same one.
        if ours && !listed.contains(id.as_str()) && !pids.contains(&p.pid) {
            alone.push(from_cgroup(id, p));
        }
    }
    s.containers.extend(alone);
    s.containers
        .sort_by(|a, b| (a.runtime, &a.id).cmp(&(b.runtime, &b.id)));
    s
}

/// Pod UID and QoS class from the cgroup where the labels say nothing of them.
fn add_cgroup_pod(pod: &mut Option<Pod>, p: Option<&ProcContainer>) {
    let Some(p) = p else { return };
    if p.cgroup.pod_uid.is_none() {
        return;
    }
    let pod = pod.get_or_insert_with(Pod::default);
    if pod.uid.is_none() {
        pod.uid = p.cgroup.pod_uid.clone();
    }
    pod.qos = p.cgroup.qos.map(|q| q.name());
}

fn from_docker(d: DockerSeen, procs: &BTreeMap<String, ProcContainer>) -> Container {
    let p = procs.get(&d.id);
    let mut pod = Pod::from_labels(&d.labels);
    add_cgroup_pod(&mut pod, p);
    Container {
        sandbox: d.labels.get(k8s::DOCKER_KIND).map(String::as_str) == Some("podsandbox"),
        id: d.id,
        name: d.name,
        runtime: Runtime::Docker,
        runtime_namespace: None,
        pid: p.map(|p| p.pid),
        netns_inum: p.map(|p| p.netns_inum),
        pod,
        labels: d.labels,
    }
}

fn from_containerd(
    l: Listing,
    procs: &BTreeMap<String, ProcContainer>,
    netns_of: &dyn Fn(u32) -> Option<u32>,
) -> Vec<Container> {
    // A pod's own labels (`app=web`) are on its sandbox only: its containers get them too, so
    // `--label app=web` finds them.
    let mut pod_labels: BTreeMap<String, BTreeMap<String, String>> = BTreeMap::new();
    for c in &l.containers {
        if c.labels.get(k8s::CRI_KIND).map(String::as_str) == Some("sandbox")
            && let Some(uid) = c.labels.get(k8s::POD_UID)
        {
            pod_labels.insert(uid.clone(), c.labels.clone());
        }
    }
    let mut out = Vec::new();
    for c in l.containers {
        let Some(pid) = c.pid else { continue };
        let mut labels = c.labels;
        if let Some(extra) = labels.get(k8s::POD_UID).and_then(|u| pod_labels.get(u)) {
            for (k, v) in extra {
                labels.entry(k.clone()).or_insert_with(|| v.clone());
            }
        }
        let mut pod = Pod::from_labels(&labels);
        add_cgroup_pod(&mut pod, procs.get(&c.id));
        let sandbox = labels.get(k8s::CRI_KIND).map(String::as_str) == Some("sandbox");
        out.push(Container {
            name: labels
                .get(k8s::CONTAINER_NAME)
                .filter(|n| !n.is_empty() && !sandbox)
                .cloned()
                .unwrap_or_else(|| c.id.clone()),
            id: c.id,
            runtime: Runtime::Containerd,
            runtime_namespace: Some(c.namespace),
            pid: Some(pid),
            netns_inum: netns_of(pid),
            pod,
            sandbox,
            labels,
        });
    }
    out
}

fn from_cgroup(id: &str, p: &ProcContainer) -> Container {
    let mut pod = None;
    add_cgroup_pod(&mut pod, Some(p));
    Container {
        id: id.to_string(),
        name: id[..id.len().min(12)].to_string(),
        runtime: Runtime::Cgroup,
        runtime_namespace: p.cgroup.containerd_namespace.clone(),
        pid: Some(p.pid),
        netns_inum: Some(p.netns_inum),
        pod,
        sandbox: false,
        labels: BTreeMap::new(),
    }
}
