//! The links netpath puts in the Docker host's namespace: one end of a veth whose other end
//! sits in a namespace netpath makes, never a host interface. The macvlan parent
//! (`np<id>mp`, peer `np<id>pp` in `np<id>-mvp`) and the egress uplink (`np<id>up`, peer
//! `np<id>rm` in `np<id>-rmt`, the remote host). Removed with the lab's other resources, and
//! by `netpath cleanup` when a killed run left them.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

use super::state;
use crate::lab::{ifname, netns_name, split_run_name};
use crate::path::Teardown;
use crate::sys::netns::{Held, Netns};
use crate::sys::nl::Nl;

/// One kind of host veth: suffixes of its two ends and the role of the peer's namespace.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Kind {
    pub host: &'static str,
    pub peer: &'static str,
    pub role: &'static str,
}

pub(crate) const MACVLAN_PARENT: Kind = Kind {
    host: "mp",
    peer: "pp",
    role: "mvp",
};
pub(crate) const UPLINK: Kind = Kind {
    host: "up",
    peer: "rm",
    role: "rmt",
};
pub(crate) const KINDS: [Kind; 2] = [MACVLAN_PARENT, UPLINK];

/// A veth from the Docker host's namespace into a namespace of netpath's; removes both (and
/// the namespace's marker) on teardown.
pub(crate) struct HostVeth {
    kind: Kind,
    run_id: String,
    /// `np<id><host>` in the Docker host's namespace.
    pub host_link: String,
    /// `np<id><peer>`, in `peer_ns`.
    pub peer_link: String,
    host_netns: PathBuf,
    /// `np<id>-<role>`, held.
    pub peer_ns: Held,
}

impl HostVeth {
    /// Creates netns `np<id>-<role>` (marked as this Docker lab's), then the veth pair, both
    /// ends down, with `mtu`. On error nothing is left.
    pub(crate) fn create(kind: Kind, run_id: &str, host_netns: &Path, mtu: u32) -> Result<Self> {
        let host_link = ifname(run_id, kind.host)?;
        let peer_link = ifname(run_id, kind.peer)?;
        // A link of that name that is not ours (a clash) must stay as it is: refusing here
        // keeps the teardown below from deleting it by name.
        let taken = Netns::at("host", host_netns)?
            .run(|| Ok(Nl::new()?.link(&host_link)?.is_some()))
            .with_context(|| format!("looking for {host_link} in the Docker host"))?;
        if taken {
            anyhow::bail!(
                "a link named {host_link} already exists in the Docker host's namespace and is \
                 not this run's: rename or delete it (`ip link del {host_link}`) if it is a \
                 leftover, or run again (a new run picks another name)"
            );
        }
        state::write_ns_marker(kind.role, run_id)?;
        let created = Netns::create(&netns_name(run_id, kind.role)).and_then(|ns| {
            Held::open(ns.clone()).inspect_err(|_| {
                let _ = ns.delete();
            })
        });
        let peer_ns = match created {
            Ok(h) => h,
            Err(e) => {
                state::remove_ns_marker(kind.role, run_id);
                return Err(e);
            }
        };
        let mut hv = HostVeth {
            kind,
            run_id: run_id.to_string(),
            host_link,
            peer_link,
            host_netns: host_netns.to_path_buf(),
            peer_ns,
        };
        let made = hv.host().and_then(|host| {
            host.run(|| {
                Nl::new()?.add_veth_into(&hv.host_link, &hv.peer_link, hv.peer_ns.fd(), mtu)?;
                Ok(())
            })
        });
        if let Err(e) = made {
            if let Err(t) = hv.teardown() {
                log::warn!("{t:#}");
            }
            return Err(e.context(format!("creating {} in the Docker host", hv.host_link)));
        }
        Ok(hv)
    }

    /// The Docker host's namespace.
    pub(crate) fn host(&self) -> Result<Netns> {
        Netns::at("host", &self.host_netns)
    }
}

impl Teardown for HostVeth {
    fn teardown(&mut self) -> Result<()> {
        let name = self.host_link.clone();
        self.host()?
            .run(|| {
                let nl = Nl::new()?;
                if let Some(l) = nl.link(&name)? {
                    nl.del_link(l.ifindex)?;
                }
                Ok(())
            })
            .with_context(|| format!("deleting {name} in the Docker host"))?;
        self.peer_ns.ns.delete()?;
        state::remove_ns_marker(self.kind.role, &self.run_id);
        Ok(())
    }
}

/// If `name` is a host link netpath makes (`np<6 hex><suffix>` of one of [`KINDS`]), its
/// run id.
pub(crate) fn host_link_run(name: &str) -> Option<&str> {
    let (id, sfx) = split_run_name(name)?;
    KINDS.iter().any(|k| k.host == sfx).then_some(id)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_link_names() {
        assert_eq!(host_link_run("np1a2b3cmp"), Some("1a2b3c"));
        assert_eq!(host_link_run("np1a2b3cup"), Some("1a2b3c"));
        assert_eq!(host_link_run("np1a2b3cpp"), None);
        assert_eq!(host_link_run("np1a2b3crm"), None);
        assert_eq!(host_link_run("eth0"), None);
        assert_eq!(host_link_run("npzzzzzzmp"), None);
        assert_eq!(host_link_run("np1a2b3cbr"), None);
    }
}
