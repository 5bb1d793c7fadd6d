//! The containers on this node as `/proc` shows them, whatever made them: every task's cgroup
//! path names its container (see [`cgroup`](super::cgroup)), and the container's first task
//! (its lowest pid, the init of its PID namespace) gives the network namespace.

use std::collections::BTreeMap;
use std::path::Path;

use super::cgroup::{self, CgroupRef};

/// One container found in `/proc`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProcContainer {
    pub cgroup: CgroupRef,
    /// Its lowest pid.
    pub pid: u32,
    /// Inode of `/proc/<pid>/ns/net`.
    pub netns_inum: u32,
}

/// The containers whose tasks run under `proc_root` (`/proc`, or the host's `/proc` mounted
/// elsewhere), by id. `namespaces`: the containerd namespaces known (see [`cgroup::parse`]).
/// Tasks that exit while the scan reads them are skipped.
pub fn scan(proc_root: &Path, namespaces: &[String]) -> BTreeMap<String, ProcContainer> {
    let mut first: BTreeMap<String, (u32, CgroupRef)> = BTreeMap::new();
    let Ok(procs) = procfs::process::all_processes_with_root(proc_root) else {
        return BTreeMap::new();
    };
    for p in procs.flatten() {
        let Ok(groups) = p.cgroups() else { continue };
        // The unified hierarchy first; on a v1 or hybrid host every hierarchy holds the
        // same container path, so the first that names one will do.
        let mut lines: Vec<_> = groups.into_iter().collect();
        lines.sort_by_key(|g| g.hierarchy != 0);
        let Some(r) = lines
            .iter()
            .find_map(|g| cgroup::parse(&g.pathname, namespaces))
        else {
            continue;
        };
        let pid = p.pid as u32;
        match first.get(&r.id) {
            Some((have, _)) if *have <= pid => {}
            _ => {
                first.insert(r.id.clone(), (pid, r));
            }
        }
    }
    first
        .into_iter()
        .filter_map(|(id, (pid, cgroup))| {
            let ns = proc_root.join(pid.to_string()).join("ns/net");
            let netns_inum = crate::sys::netns::ns_inum(&ns).ok()?;
            Some((
                id,
                ProcContainer {
                    cgroup,
                    pid,
                    netns_inum,
                },
            ))
        })
        .collect()
}

/// Inode of the network namespace of `pid` under `proc_root`, if it still runs.
pub fn netns_of(proc_root: &Path, pid: u32) -> Option<u32> {
    crate::sys::netns::ns_inum(&proc_root.join(pid.to_string()).join("ns/net")).ok()
}
