//! Probe backends and the choice between them. Every backend reports the same points and feeds
//! the same hop model (`netpath_common::hop`), so hop names do not depend on the backend; what
//! differs is which hops a backend can separate.
use netpath_common::{Hop, hop::hop_between};

pub mod probes;

crate::choice::choice! {
    pub enum Backend {
        /// Tracepoints, raw tracepoints and TC: works on locked-down kernels without kprobes.
        Tracepoint => "tracepoint",
        /// kprobes on the driver and netfilter functions (veth_xmit, br_forward, nf_nat, vxlan).
        Kprobe => "kprobe",
        /// fentry/fexit: like kprobe, cheaper, needs BTF for the target (vmlinux or module).
        Fentry => "fentry",
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
#[clap(rename_all = "lower")]
pub enum BackendChoice {
    Auto,
    Tracepoint,
    Kprobe,
    Fentry,
}

impl Backend {
    /// Hops this backend can tell apart: those the hop model names between two points its
    /// probes stamp (`probes::PROBES`), on any device kinds, in `Hop::ALL` order.
    pub fn visible_hops(self) -> Vec<Hop> {
        let mut points: Vec<u16> = probes::points(self).map(|p| p as u16).collect();
        points.sort_unstable();
        points.dedup();
        // Device kinds and the scheduler points' kind bits are all below 16.
        let mut seen = [false; Hop::ALL.len()];
        for &a in &points {
            for &b in &points {
                for ak in 0..16 {
                    for bk in 0..16 {
                        seen[hop_between(a, ak, b, bk) as usize] = true;
                    }
                }
            }
        }
        Hop::ALL
            .into_iter()
            .filter(|h| seen[*h as usize] && *h != Hop::Other)
            .collect()
    }

    /// Backends implemented in this build, best first.
    pub fn implemented() -> &'static [Backend] {
        &[Backend::Fentry, Backend::Kprobe, Backend::Tracepoint]
    }
}

/// What the kernel allows, as `netpath doctor` learned it by loading programs (a trait, so this
/// module does not depend on `doctor`).
pub trait Allows {
    fn usable(&self, b: Backend) -> bool;
    /// Why `b` is not usable (the failed checks).
    fn reason(&self, b: Backend) -> String;
}

/// Picks the backend: the forced one if the kernel allows it, else the best that loads here.
pub fn select(choice: BackendChoice, doctor: &impl Allows) -> anyhow::Result<Backend> {
    let wanted = match choice {
        BackendChoice::Auto => {
            return Backend::implemented()
                .iter()
                .copied()
                .find(|b| doctor.usable(*b))
                .ok_or_else(|| {
                    anyhow::anyhow!(
                        "no probe backend can attach on this kernel: tracepoints failed ({}); run `netpath doctor`",
                        doctor.reason(Backend::Tracepoint)
                    )
                });
        }
        BackendChoice::Tracepoint => Backend::Tracepoint,
        BackendChoice::Kprobe => Backend::Kprobe,
        BackendChoice::Fentry => Backend::Fentry,
    };
    if !doctor.usable(wanted) {
        anyhow::bail!(
            "the {} backend cannot be used on this kernel: {}",
            wanted.name(),
            doctor.reason(wanted)
        );
    }
    if !Backend::implemented().contains(&wanted) {
        anyhow::bail!(
            "the {} backend is not implemented in this build yet; use --backend tracepoint",
            wanted.name()
        );
    }
    Ok(wanted)
}

impl BackendChoice {
    /// `NETPATH_BACKEND` (auto, tracepoint, kprobe, fentry) if set: lets the test suite run the
    /// same tests once per backend.
    pub fn from_env() -> anyhow::Result<BackendChoice> {
        use clap::ValueEnum as _;
        match std::env::var("NETPATH_BACKEND") {
            Ok(v) if !v.is_empty() => BackendChoice::from_str(&v, true)
                .map_err(|e| anyhow::anyhow!("NETPATH_BACKEND={v}: {e}")),
            _ => Ok(BackendChoice::Auto),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The hops each backend separates, as they were listed by hand before the probe table.
    #[test]
    fn visible_hops_follow_from_the_probe_table() {
        let mut tp = vec![
            Hop::SenderStack,
            Hop::Loopback,
            Hop::Veth,
            Hop::Backlog,
            Hop::Bridge,
            Hop::Forward,
            Hop::Macvlan,
            Hop::Ipvlan,
            Hop::Netkit,
            Hop::VxlanEncap,
            Hop::Underlay,
            Hop::VxlanDecap,
            Hop::Uplink,
            Hop::ReceiverStack,
            Hop::Wakeup,
            Hop::IdleExit,
            Hop::Runqueue,
            Hop::RecvCopy,
            Hop::RecvReturn,
        ];
        tp.sort();
        let mut got = Backend::Tracepoint.visible_hops();
        got.sort();
        assert_eq!(got, tp);
        let mut fns = [tp, vec![Hop::Nat]].concat();
        fns.sort();
        for b in [Backend::Kprobe, Backend::Fentry] {
            let mut got = b.visible_hops();
            got.sort();
            assert_eq!(got, fns, "{b:?}");
        }
    }
}
