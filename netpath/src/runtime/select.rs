//! What `serve` follows: the containers a selection names, one unit per network namespace of
//! a pod (its containers share it) and one per container outside pods, each resolved to its
//! network side.

use std::collections::BTreeMap;

use super::host_netns;
use super::{Container, Node, Runtime, Scan};
use crate::docker::ContainerNet;

/// Which containers to follow: by name (id, name, `namespace/pod[/container]`), by label
/// (`key` or `key=value`, all must match; names are then not looked at, as `docker ps
/// --filter label=…`), or all.
#[derive(Clone, Debug, Default)]
pub struct Selection {
    pub names: Vec<String>,
    pub labels: Vec<String>,
    pub all: bool,
}

impl Selection {
    pub fn wants(&self, c: &Container) -> bool {
        if self.all {
            return true;
        }
        if !self.labels.is_empty() {
            return c.has_labels(&self.labels);
        }
        self.names.iter().any(|n| c.matches(n))
    }
}

/// One followed network namespace: who runs it, its Kubernetes labels and its network side.
#[derive(Clone, Debug)]
pub struct Unit {
    pub runtime: Runtime,
    pub ids: Vec<String>,
    /// Kubernetes' `namespace` and `pod` ("" outside pods) and `container`: the container's
    /// name, or "" for a pod whose network several followed containers share.
    pub namespace: String,
    pub pod: String,
    pub container: String,
    pub net: ContainerNet,
}

/// The units of `scan` that `sel` wants, resolved; a container that stops meanwhile (or
/// cannot be resolved) is left out and said at info level.
pub fn units(node: &mut Node, scan: &Scan, sel: &Selection) -> Vec<Unit> {
    // Pods by (namespace, pod, netns); everything else on its own.
    let mut groups: BTreeMap<(String, String, String), Vec<&Container>> = BTreeMap::new();
    for c in scan.containers.iter().filter(|c| sel.wants(c)) {
        let key = match &c.pod {
            Some(_) => {
                let (ns, pod, _) = c.k8s_labels();
                (ns, pod, format!("netns:{}", c.netns_inum.unwrap_or(0)))
            }
            None => (String::new(), String::new(), format!("id:{}", c.id)),
        };
        groups.entry(key).or_default().push(c);
    }
    let mut out = Vec::new();
    for ((namespace, pod, _), members) in groups {
        let apps: Vec<&Container> = members.iter().copied().filter(|c| !c.sandbox).collect();
        let container = match apps.as_slice() {
            [one] => one.k8s_labels().2,
            _ => String::new(),
        };
        let first = apps.first().copied().unwrap_or(members[0]);
        let net = match resolve(node, first) {
            Ok(n) => n,
            Err(e) => {
                log::info!("skipping {}: {e:#}", first.describe());
                continue;
            }
        };
        out.push(Unit {
            runtime: first.runtime,
            ids: members.iter().map(|c| c.id.clone()).collect(),
            namespace,
            pod,
            container,
            net,
        });
    }
    out
}

fn resolve(node: &mut Node, c: &Container) -> anyhow::Result<ContainerNet> {
    match c.runtime {
        Runtime::Docker => super::resolve_container(node.engine()?, &c.id),
        _ => super::net_of(c, &host_netns()?),
    }
}

/// The `driver` label of a unit no Docker network describes, from its interfaces: `host`,
/// the driver its first interface but `lo` follows ([`ContainerNet::driver`]: `macvlan`,
/// `ipvlan`, `overlay`, `bridge`), else that link's kind (`veth`, routed, as the ptp plugin
/// makes; a CNI's own device), else `none`.
pub fn driver_label(net: &ContainerNet) -> String {
    if net.host_network {
        return "host".into();
    }
    if let Some(d) = net.driver(None) {
        return d.name().into();
    }
    match net.interface_on(None).map(|i| i.link.kind.as_str()) {
        Some(k) if !k.is_empty() => k.into(),
        _ => "none".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::docker::Interface;
    use crate::sys::nl::Link;

    fn with(kinds: &[(&str, &str)]) -> ContainerNet {
        let interfaces = kinds.iter().map(|(name, kind)| Interface {
            link: Link::up(name, kind),
            network: None,
            peer: None,
        });
        ContainerNet::with_interfaces(interfaces.collect())
    }

    /// serve's label: the driver when the link names one, else the link's kind, else none.
    #[test]
    fn the_label_falls_back_to_the_link_kind_then_none() {
        assert_eq!(
            driver_label(&with(&[("lo", ""), ("eth0", "ipvlan")])),
            "ipvlan"
        );
        assert_eq!(driver_label(&with(&[("lo", ""), ("eth0", "veth")])), "veth");
        assert_eq!(driver_label(&with(&[("lo", ""), ("eth0", "")])), "none");
        assert_eq!(driver_label(&with(&[("lo", "")])), "none");
        let mut host = with(&[("lo", "")]);
        host.host_network = true;
        assert_eq!(driver_label(&host), "host");
    }
}
