//! Every device of this node, in every network namespace a journey may cross: the host's
//! (bridges, the host ends of veths, VXLAN devices), each container's and pod's, and the
//! namespaces runtimes bind-mount with no process of their own (Docker's overlay sandboxes,
//! CNI's `/run/netns`). Passive tracing gives the programs their kinds, so a journey that
//! leaves the followed containers (a reply to a client in another container) has every hop
//! named, and its timeline names every device with its namespace.

use std::path::{Path, PathBuf};

use netpath_common::DevKind;

use super::{Node, host_netns, proc_root};
use crate::path::{Device, Role, kind_of};
use crate::sys::netns::{Netns, ns_inum};
use crate::sys::nl::links_in;

/// Where runtimes bind-mount network namespaces: CNI plugins and `ip netns` here; Docker's
/// under its exec root (asked from the engine when it answers).
const NETNS_DIR: &str = "/run/netns";

/// Every link of every network namespace of the node (see the module's doc), with its kind
/// (`DevKind::Unknown` for a kind no hop is named after, e.g. a physical NIC: its name is
/// still known). Namespaces that go away while they are read are left out.
pub fn node_devices(node: &mut Node) -> Vec<Device> {
    let mut spaces: Vec<(String, PathBuf)> = Vec::new();
    if let Ok(h) = host_netns() {
        spaces.push((h.name, h.path));
    }
    let scan = node.scan();
    for c in &scan.containers {
        if let Some(pid) = c.pid {
            // A pod's containers share its namespace: named after the pod.
            let name = match &c.pod {
                Some(p) => p.path(),
                None => c.name.clone(),
            };
            spaces.push((name, proc_root().join(pid.to_string()).join("ns/net")));
        }
    }
    let mut dirs = vec![PathBuf::from(NETNS_DIR)];
    if let Ok(e) = node.engine() {
        dirs.push(e.exec_root.join("netns"));
    }
    for d in dirs {
        spaces.extend(bind_mounts(&d));
    }
    let mut seen: Vec<u32> = Vec::new();
    let mut out = Vec::new();
    for (name, path) in spaces {
        let Ok(inum) = ns_inum(&path) else { continue };
        if seen.contains(&inum) {
            continue;
        }
        seen.push(inum);
        match Netns::at(&name, &path).and_then(|ns| links_in(&ns)) {
            Ok(links) => out.extend(links.iter().map(|l| Device {
                name: l.name.clone(),
                netns: name.clone(),
                netns_inum: inum,
                ifindex: l.ifindex,
                kind: kind_of(l, Role::Link).unwrap_or(DevKind::Unknown),
                mtu: l.mtu,
            })),
            Err(e) => log::debug!("devices of netns {name}: {e:#}"),
        }
    }
    out
}

/// The namespaces bind-mounted in `dir`, named by their file names.
fn bind_mounts(dir: &Path) -> Vec<(String, PathBuf)> {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut v: Vec<(String, PathBuf)> = rd
        .filter_map(|e| e.ok())
        .map(|e| (e.file_name().to_string_lossy().into_owned(), e.path()))
        .collect();
    v.sort();
    v
}

/// `watched` followed by every device of `known` not among them: the names timelines use,
/// the watched path's own names first.
pub fn with_known(watched: &[Device], known: &[Device]) -> Vec<Device> {
    let mut v = watched.to_vec();
    v.extend(
        known
            .iter()
            .filter(|k| {
                !watched
                    .iter()
                    .any(|w| w.netns_inum == k.netns_inum && w.ifindex == k.ifindex)
            })
            .cloned(),
    );
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dev(name: &str, netns: u32, ifindex: u32, kind: DevKind) -> Device {
        Device {
            name: name.into(),
            netns: format!("ns{netns}"),
            netns_inum: netns,
            ifindex,
            kind,
            mtu: 1500,
        }
    }

    #[test]
    fn the_watched_paths_names_come_first_and_once() {
        let watched = [dev("eth0", 1, 2, DevKind::Veth)];
        let known = [
            dev("eth0", 1, 2, DevKind::Veth),
            dev("vethabc", 9, 7, DevKind::BridgePort),
        ];
        let all = with_known(&watched, &known);
        assert_eq!(all.len(), 2);
        assert_eq!(all[0], watched[0]);
        assert_eq!(all[1].name, "vethabc");
    }
}
