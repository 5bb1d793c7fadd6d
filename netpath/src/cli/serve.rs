//! `netpath serve`: per-hop latency of running containers as Prometheus metrics.

use anyhow::{Result, bail};

use crate::lab;
use crate::probe::backend::{self, BackendChoice};
use crate::probe::doctor;

/// Keep the probes attached and export per-hop latency of running containers' traffic as
/// Prometheus metrics (GET /metrics; GET /ready for a readiness probe). Follows
/// containers as they start and stop.
#[derive(clap::Args)]
pub struct ServeArgs {
    /// Address to listen on (loopback unless told otherwise).
    #[arg(long, default_value = "127.0.0.1:9433")]
    pub listen: std::net::SocketAddr,
    /// Follow this container (name or id; repeat for several); picked up when it starts.
    #[arg(long, conflicts_with = "all")]
    pub container: Vec<String>,
    /// Follow the running containers with this label (KEY or KEY=VALUE; repeat: all must match).
    #[arg(long, conflicts_with = "all")]
    pub label: Vec<String>,
    /// Follow every running container.
    #[arg(long)]
    pub all: bool,
    /// Seconds between listings of the running containers.
    #[arg(long, default_value_t = 2.0)]
    pub rescan_secs: f64,
    /// The host's /proc, mounted here, when netpath runs in a PID namespace of its own
    /// (a swarm service: deploy/swarm mounts it at /host/proc).
    #[arg(long)]
    pub host_proc: Option<std::path::PathBuf>,
    #[arg(long, value_enum, default_value_t = BackendChoice::Auto)]
    pub backend: BackendChoice,
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
        let engine = crate::docker::Engine::connect()?;
        let caps = doctor::probe()?;
        let backend = backend::select(a.backend, &caps)?;
        crate::serve::run(
            backend,
            &engine,
            &crate::serve::ServeOptions {
                listen: a.listen,
                select: crate::serve::Selection {
                    names: a.container,
                    labels: a.label,
                    all: a.all,
                },
                rescan: std::time::Duration::from_secs_f64(a.rescan_secs.clamp(0.1, 3600.0)),
            },
        )
    }
}
