//! The root qdisc of each device of a path, read over netlink where the device is: what
//! `--parts` names a transmit's qdisc part after (`noqueue`, `pfifo_fast`, `fq_codel`, `netem`,
//! …). The part itself is timed in the kernel, from `dev_queue` to `start_xmit` on the device.
use anyhow::{Context as _, Result};

use super::NetPath;
use crate::sys::{netns::Netns, nl::Nl};

/// One device's root qdisc.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Qdisc {
    pub netns_inum: u32,
    pub ifindex: u32,
    pub name: String,
    pub netns: String,
    /// The qdisc's kind; `none` when netlink lists no root qdisc for the device.
    pub kind: String,
}

/// The root qdisc of every device of `path` in one of `namespaces` (those `parts::namespaces`
/// found); a device elsewhere is left out.
pub fn read(path: &NetPath, namespaces: &[Netns]) -> Result<Vec<Qdisc>> {
    let mut out = Vec::new();
    for ns in namespaces {
        let devs: Vec<_> = (path.devices.iter())
            .filter(|d| d.netns_inum == ns.inum)
            .collect();
        if devs.is_empty() {
            continue;
        }
        let kinds: Vec<Option<String>> = ns
            .run(|| {
                let mut roots = Nl::new()?.root_qdiscs()?;
                Ok(devs.iter().map(|d| roots.remove(&d.ifindex)).collect())
            })
            .with_context(|| format!("the qdiscs of {}", ns.name))?;
        for (d, kind) in devs.into_iter().zip(kinds) {
            out.push(Qdisc {
                netns_inum: d.netns_inum,
                ifindex: d.ifindex,
                name: d.name.clone(),
                netns: d.netns.clone(),
                kind: kind.unwrap_or_else(|| "none".into()),
            });
        }
    }
    Ok(out)
}
