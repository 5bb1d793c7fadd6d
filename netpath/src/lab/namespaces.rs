//! The namespaces and processes one lab owns, from their creation to their removal.
//!
//! They are registered for signal cleanup as they are created, and removed when the lab's
//! path is torn down or its build fails.

use anyhow::{Context, Result};

use super::{cleanup, netns_name, netns_of_run};
use crate::path::{Building, Errors, Keep, Teardown};
use crate::sys::netns::{Held, Netns};
use crate::sys::nl::Nl;

/// Namespaces (and helper processes) of one lab being built: removed if it is dropped
/// before [`LabNamespaces::into_keep`] hands them to the lab's path.
pub(super) struct LabNamespaces {
    /// An fd on each namespace: it marks the namespace as in use by this process for
    /// `cleanup_leftovers` run elsewhere. Declared first: closed before `owned` removes
    /// the namespaces on a failed build.
    held: Vec<Held>,
    owned: Building<Owned>,
}

/// What a lab owns and removes on teardown.
struct Owned {
    run_id: String,
    /// Every namespace of the lab, in creation order.
    nss: Vec<Netns>,
    /// Processes the lab started inside its namespaces (docker-proxy), stopped first.
    procs: Vec<std::process::Child>,
}

impl LabNamespaces {
    pub(super) fn new(run_id: &str) -> LabNamespaces {
        LabNamespaces {
            held: Vec::new(),
            owned: Building::new(Owned {
                run_id: run_id.to_string(),
                nss: Vec::new(),
                procs: Vec::new(),
            }),
        }
    }

    /// Take ownership of a process running inside one of the lab's namespaces: it is
    /// registered for signal/panic cleanup and stopped (and reaped) before the
    /// namespaces go.
    pub(super) fn adopt(&mut self, child: std::process::Child) {
        cleanup::register_pid(&self.owned.run_id, child.id());
        self.owned.procs.push(child);
    }

    /// Create `np<runid>-<role>`, registered for signal/panic cleanup right away.
    pub(super) fn create(&mut self, role: &str) -> Result<Netns> {
        let run_id = &self.owned.run_id;
        let ns = cleanup::create_registered(
            run_id,
            || Netns::create(&netns_name(run_id, role)),
            |ns| &ns.name,
        )?;
        self.owned.nss.push(ns.clone());
        self.held.push(Held::open(ns.clone())?);
        Ok(ns)
    }

    /// [`create`](Self::create) for each of `roles`, in order.
    pub(super) fn create_all<const N: usize>(&mut self, roles: [&str; N]) -> Result<[Netns; N]> {
        let mut v = Vec::with_capacity(N);
        for r in roles {
            v.push(self.create(r)?);
        }
        Ok(v.try_into().expect("N namespaces"))
    }

    /// The fd this lab holds on `ns` (for `IFLA_NET_NS_FD`).
    pub(super) fn fd(&self, ns: &Netns) -> Result<std::os::fd::BorrowedFd<'_>> {
        self.held
            .iter()
            .find(|h| &h.ns == ns)
            .map(|h| h.fd())
            .with_context(|| format!("netns {} is not part of this lab", ns.name))
    }

    /// The built lab's share of its path: the fds on its namespaces, and the owner that
    /// removes them.
    pub(super) fn into_keep(self) -> Keep {
        Keep::owned(self.held, self.owned.finish())
    }
}

impl Teardown for Owned {
    /// Remove everything the lab created: processes first (docker-proxy, killed and
    /// reaped), then links (so veths are gone for sure, even if something still holds a
    /// namespace), then the namespaces.
    fn teardown(&mut self) -> Result<()> {
        let mut errors = Errors::default();
        for mut child in std::mem::take(&mut self.procs) {
            // Only if the signal/panic cleanup or `cleanup_leftovers` did not already
            // stop (and reap) it: never signal a pid that may have been reused.
            if cleanup::take_pid(&self.run_id, child.id()) {
                errors.note(cleanup::stop_child(&mut child));
            }
        }
        for ns in &self.nss {
            let purged = ns.run(|| Nl::new()?.purge_links());
            errors.note(
                purged
                    .map(|_| ())
                    .with_context(|| format!("removing links in {}", ns.name)),
            );
        }
        for ns in std::mem::take(&mut self.nss) {
            errors.note(ns.delete());
        }
        cleanup::unregister(&self.run_id);
        errors.note(netns_of_run(&self.run_id).and_then(|left| {
            if left.is_empty() {
                Ok(())
            } else {
                Err(anyhow::anyhow!(
                    "namespaces still present after teardown: {}",
                    left.join(", ")
                ))
            }
        }));
        errors.result(&format!("lab {}", self.run_id))
    }
}
