//! Probe backends and the choice between them. Every backend reports the same points and feeds
//! the same hop model (`netpath_common::hop`), so hop names do not depend on the backend; what
//! differs is which hops a backend can separate.
use netpath_common::Hop;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Backend {
    /// Tracepoints, raw tracepoints and TC: works on locked-down kernels without kprobes.
    Tracepoint,
    /// kprobes on the driver and netfilter functions (veth_xmit, br_forward, nf_nat, vxlan).
    Kprobe,
    /// fentry/fexit: like kprobe, cheaper, needs BTF for the target (vmlinux or module).
    Fentry,
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
    pub fn name(self) -> &'static str {
        match self {
            Backend::Tracepoint => "tracepoint",
            Backend::Kprobe => "kprobe",
            Backend::Fentry => "fentry",
        }
    }

    /// Hops this backend can tell apart.
    pub fn visible_hops(self) -> &'static [Hop] {
        match self {
            Backend::Tracepoint => &[
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
            ],
            Backend::Kprobe | Backend::Fentry => &[
                Hop::SenderStack,
                Hop::Loopback,
                Hop::Veth,
                Hop::Backlog,
                Hop::Bridge,
                Hop::Forward,
                Hop::Nat,
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
            ],
        }
    }

    /// Backends implemented in this build, best first.
    pub fn implemented() -> &'static [Backend] {
        &[Backend::Fentry, Backend::Kprobe, Backend::Tracepoint]
    }
}

/// Picks the backend: the forced one if the kernel allows it, else the best that loads here.
pub fn select(
    choice: BackendChoice,
    doctor: &crate::doctor::Capabilities,
) -> anyhow::Result<Backend> {
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
