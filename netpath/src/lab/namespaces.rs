//! The namespaces (and processes) one lab owns: created and registered for signal cleanup
//! while it is built, removed when its path is torn down or the build fails.

use anyhow::{Context, Result};

use super::{cleanup, netns_name, netns_of_run};
use crate::netns::{Held, Netns};
use crate::nl::Nl;
use crate::path::{Keep, Teardown};

/// Namespaces (and helper processes) of one lab, deleted on drop unless torn down already.
pub(super) struct LabNamespaces {
    run_id: String,
    /// Every namespace of the lab, in creation order.
    nss: Vec<Netns>,
    /// An fd on each while the lab is being built (handed to the path by [`into_keep`]): it
    /// marks the namespace as in use by this process for `cleanup_leftovers` run elsewhere.
    held: Vec<Held>,
    /// Processes the lab started inside its namespaces (docker-proxy), stopped first.
    procs: Vec<std::process::Child>,
    done: bool,
}

impl LabNamespaces {
    pub(super) fn new(run_id: &str) -> LabNamespaces {
        LabNamespaces {
            run_id: run_id.to_string(),
            nss: Vec::new(),
            held: Vec::new(),
            procs: Vec::new(),
            done: false,
        }
    }

    /// Take ownership of a process running inside one of the lab's namespaces: it is
    /// registered for signal/panic cleanup and stopped (and reaped) before the
    /// namespaces go.
    pub(super) fn adopt(&mut self, child: std::process::Child) {
        cleanup::register_pid(&self.run_id, child.id());
        self.procs.push(child);
    }

    /// Create `np<runid>-<role>`, registered for signal/panic cleanup right away.
    pub(super) fn create(&mut self, role: &str) -> Result<Netns> {
        let ns = Netns::create(&netns_name(&self.run_id, role))?;
        // Registered only once it is ours, so signal cleanup never touches a name that
        // someone else created.
        cleanup::register(&self.run_id, &ns.name);
        self.nss.push(ns.clone());
        self.held.push(Held::open(ns.clone())?);
        Ok(ns)
    }

    /// The fd this lab holds on `ns` (for `IFLA_NET_NS_FD`).
    pub(super) fn fd(&self, ns: &Netns) -> Result<std::os::fd::BorrowedFd<'_>> {
        self.held
            .iter()
            .find(|h| &h.ns == ns)
            .map(|h| h.fd())
            .with_context(|| format!("netns {} is not part of this lab", ns.name))
    }

    /// The built lab's share of its path: the fds on its namespaces, and itself as the
    /// owner that removes them.
    pub(super) fn into_keep(mut self) -> Keep {
        let held = std::mem::take(&mut self.held);
        Keep::owned(held, Box::new(self))
    }

    /// Remove everything the lab created: processes first (docker-proxy, killed and
    /// reaped), then links (so veths are gone for sure, even if something still holds a
    /// namespace), then the namespaces.
    fn destroy(&mut self) -> Result<()> {
        if self.done {
            return Ok(());
        }
        self.done = true;
        let mut first_err = None;
        for mut child in std::mem::take(&mut self.procs) {
            // Only if the signal/panic cleanup or `cleanup_leftovers` did not already
            // stop (and reap) it: never signal a pid that may have been reused.
            if cleanup::take_pid(&self.run_id, child.id())
                && let Err(e) = cleanup::stop_child(&mut child)
            {
                first_err.get_or_insert(e);
            }
        }
        for ns in &self.nss {
            if let Err(e) = ns.run(|| Nl::new()?.purge_links()) {
                first_err.get_or_insert(e.context(format!("removing links in {}", ns.name)));
            }
        }
        self.held.clear(); // closes our fds
        for ns in &self.nss {
            if let Err(e) = ns.delete() {
                first_err.get_or_insert(e);
            }
        }
        cleanup::unregister(&self.run_id);
        match netns_of_run(&self.run_id) {
            Ok(left) if !left.is_empty() => {
                first_err.get_or_insert(anyhow::anyhow!(
                    "namespaces still present after teardown: {}",
                    left.join(", ")
                ));
            }
            Ok(_) => {}
            Err(e) => {
                first_err.get_or_insert(e);
            }
        }
        match first_err {
            None => Ok(()),
            Some(e) => Err(e.context(format!("teardown of lab {} incomplete", self.run_id))),
        }
    }
}

impl Teardown for LabNamespaces {
    fn teardown(&mut self) -> Result<()> {
        self.destroy()
    }
}

impl Drop for LabNamespaces {
    fn drop(&mut self) {
        if let Err(e) = self.destroy() {
            log::warn!("{e:#}");
        }
    }
}
