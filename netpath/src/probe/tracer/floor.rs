//! What the hooks cost without netpath's code: the floor programs (empty programs beside the
//! real ones, for bpf_stats) and the same empty program on every raw tracepoint the real ones
//! use, instead of them (bench's "empty programs" runs: the least any program on these hooks
//! costs the traffic).
use anyhow::{Context as _, Result};
use aya::programs::RawTracePoint;

use super::{Link, Tracer};
use crate::probe::backend::probes::{self, Probe, Role};

/// The empty program attached everywhere by `attach_empty` (a raw tracepoint program that
/// reads no argument attaches to any raw tracepoint).
const EMPTY: &str = "floor_net_dev_queue";

impl Tracer {
    /// The raw tracepoints `attach` attaches, in table order: not the floors, not the socket
    /// bounds where syscalls bound a TCP run, in a passive run only what it needs, and in the
    /// light profile only what names a hop.
    pub(super) fn raw_attach_plan(&self) -> Vec<&'static Probe> {
        let tcp_syscalls = self.tcp_syscalls();
        self.raw_plan
            .iter()
            .copied()
            .filter(|p| {
                p.role != Role::Floor
                    && !(tcp_syscalls && p.role == Role::SockBound)
                    && (self.threads || probes::passive_needs(p, self.ready))
                    && (!self.light || probes::light_needs(p))
            })
            .collect()
    }

    /// A TCP run on a kernel without `tcp_sendmsg_locked` is bounded by syscalls at both
    /// ends: the socket points would end its journeys twice, so they stay detached.
    pub(super) fn tcp_syscalls(&self) -> bool {
        self.syscall_bounds && !self.dgram
    }

    /// Attaches the floor programs (empty programs on `net_dev_queue`, `sched_waking` and
    /// `sched_switch`) beside the others, so a cost measurement has the kernel's own per-run
    /// cost on those hooks from the same run.
    pub fn attach_floor(&mut self) -> Result<()> {
        let floor: Vec<&'static Probe> = self
            .raw_plan
            .iter()
            .copied()
            .filter(|p| p.role == Role::Floor)
            .collect();
        for p in floor {
            self.attach_raw(p)?;
        }
        Ok(())
    }

    /// Attaches one empty program to every raw tracepoint `attach` would, and nothing else
    /// (the syscall tracepoints and function probes some kernels add are left out): the
    /// hooks' dispatch alone. `detach` removes it.
    pub fn attach_empty(&mut self) -> Result<()> {
        for p in self.raw_attach_plan() {
            let raw: &mut RawTracePoint = self
                .ebpf
                .program_mut(EMPTY)
                .context("the empty program is missing from the eBPF object")?
                .try_into()?;
            let id = raw
                .attach(p.target)
                .with_context(|| format!("attaching an empty program to {}", p.target))?;
            self.links.push(Link::Raw(EMPTY, id));
        }
        Ok(())
    }
}
