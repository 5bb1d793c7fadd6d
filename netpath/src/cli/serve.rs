//! `netpath serve`: per-hop latency of running containers as Prometheus metrics.

use anyhow::{Result, bail};

use crate::lab;
use crate::probe::backend;
use crate::probe::doctor;

/// Export per-hop latency of running containers' traffic as Prometheus metrics.
///
/// Keeps the probes attached (GET /metrics; GET /ready for a readiness probe) and follows
/// containers as they start and stop.
#[derive(clap::Args)]
#[command(after_help = EXAMPLES)]
pub struct ServeArgs {
    /// Address to listen on (loopback unless told otherwise).
    #[arg(long, default_value = "127.0.0.1:9433")]
    pub listen: std::net::SocketAddr,
    /// Follow this container (id, name or namespace/pod[/container], on Docker, containerd or
    /// found by its cgroup; repeat for several); picked up when it starts.
    #[arg(long, conflicts_with = "all")]
    pub container: Vec<String>,
    /// Follow the running containers with this label (KEY or KEY=VALUE; repeat: all must
    /// match; a pod's labels count for its containers).
    #[arg(long, conflicts_with = "all")]
    pub label: Vec<String>,
    /// Follow every running container.
    #[arg(long)]
    pub all: bool,
    /// Time between listings of the running containers, e.g. 2s (100ms to 1h).
    #[arg(long, value_name = "DURATION", default_value = "2s", alias = "rescan-secs", value_parser = super::bounds::rescan())]
    pub rescan: std::time::Duration,
    /// Follow one journey in N (1: every one): the others cost the kernel a device lookup and
    /// a count. Quantiles then rest on the journeys followed (see docs/fleet.md).
    #[arg(long, value_name = "N", default_value_t = crate::serve::DEFAULT_SAMPLE, value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    pub sample: u32,
    /// Export each kernel program's run count and time (netpath_bpf_program_*): turns on the
    /// kernel's BPF statistics, two clock reads more per run of every BPF program on the node.
    #[arg(long)]
    pub program_stats: bool,
    /// The host's /proc, mounted here, when netpath runs in a PID namespace of its own
    /// (a swarm service: deploy/swarm mounts it at /host/proc).
    #[arg(long)]
    pub host_proc: Option<std::path::PathBuf>,
    #[command(flatten)]
    pub backend: super::args::BackendArg,
}

impl super::Command for ServeArgs {
    fn run(self) -> Result<()> {
        let a = self;
        super::require_root()?;
        if a.container.is_empty() && a.label.is_empty() && !a.all {
            bail!(
                "netpath serve: say which containers to follow: --container NAME, --label K=V or --all"
            );
        }
        if let Some(dir) = a.host_proc {
            crate::docker::set_host_proc(dir)?;
        }
        lab::install_signal_cleanup();
        let mut node = crate::runtime::Node::connect()?;
        let caps = doctor::probe()?;
        let backend = backend::select(a.backend.backend, &caps)?;
        crate::serve::run(
            backend,
            &mut node,
            &crate::serve::ServeOptions {
                listen: a.listen,
                select: crate::serve::Selection {
                    names: a.container,
                    labels: a.label,
                    all: a.all,
                },
                rescan: a.rescan,
                sample: a.sample,
                program_stats: a.program_stats,
            },
        )
    }
}

/// `serve --help` ends with these.
const EXAMPLES: &str = "EXAMPLES:
    netpath serve --all                              Prometheus metrics of every running container's traffic
    netpath serve --label app=web --listen 0.0.0.0:9433
    netpath serve --container web --container db --rescan 5s
    netpath serve --all --sample 1 --program-stats    every journey, and each program's kernel time";
