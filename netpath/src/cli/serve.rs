//! `netpath serve`: per-hop latency of running containers as Prometheus metrics.

use std::net::{Ipv4Addr, SocketAddr, UdpSocket};

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
    /// Address to listen on (loopback unless told otherwise); `node:PORT` is the address this
    /// node's default route leaves from, where other nodes reach it.
    #[arg(long, default_value = "127.0.0.1:9433", value_parser = listen_addr)]
    pub listen: SocketAddr,
    /// A running container to follow (id, name or namespace/pod[/container], on Docker,
    /// containerd or found by its cgroup; repeat for several); picked up when it starts.
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
    /// Sample one journey in N (followed; the others cost the kernel a device lookup and a
    /// count; 1: every one; at most 1000000). Quantiles then rest on the journeys followed
    /// (see docs/fleet.md).
    #[arg(long, value_name = "N", default_value_t = crate::serve::DEFAULT_SAMPLE, alias = "sample", value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    pub sample_every: u32,
    #[arg(long, alias = "program-stats", help = super::args::PROG_STATS_HELP)]
    pub prog_stats: bool,
    /// The full profile: also attach the two programs that name no hop (softirq_entry,
    /// consume_skb) and export netpath_softirq_runs. Default: light, for leaving it on (two
    /// programs fewer on every packet of the machine; see docs/fleet.md).
    #[arg(long)]
    pub full: bool,
    /// The host's /proc, mounted here, when netpath runs in a PID namespace of its own
    /// (a swarm service: deploy/swarm mounts it at /host/proc; default: /proc).
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
                "serve: say which containers to follow: --container NAME, --label K=V or --all"
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
                sample: a.sample_every,
                program_stats: a.prog_stats,
                full: a.full,
            },
        )
    }
}

/// `ADDR:PORT`, or `node:PORT`: the source address of this node's default route. A UDP
/// socket's connect only looks the route up; nothing is sent.
fn listen_addr(s: &str) -> Result<SocketAddr, String> {
    let Some(port) = s.strip_prefix("node:") else {
        return s
            .parse()
            .map_err(|e| format!("{s:?}: {e} (ADDR:PORT or node:PORT)"));
    };
    let port: u16 = port
        .parse()
        .map_err(|e| format!("{s:?}: port {port:?}: {e}"))?;
    let u = UdpSocket::bind((Ipv4Addr::UNSPECIFIED, 0)).map_err(|e| e.to_string())?;
    // A documentation address (RFC 5737): routed by the default route, never answered.
    u.connect((Ipv4Addr::new(192, 0, 2, 1), 9)).map_err(|e| {
        format!("{s}: this node has no default route to take its address from ({e}); give ADDR:PORT")
    })?;
    let ip = u.local_addr().map_err(|e| e.to_string())?.ip();
    Ok(SocketAddr::new(ip, port))
}

/// `serve --help` ends with these.
const EXAMPLES: &str = "EXAMPLES:
    netpath serve --all                              Prometheus metrics of every running container's traffic
    netpath serve --label app=web --listen node:9433 on the node's own address, for a central Prometheus
    netpath serve --container web --container db --rescan 5s
    netpath serve --all --sample-every 1 --prog-stats   every journey, and each program's kernel time";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listen_takes_an_address_or_the_nodes_own() {
        assert_eq!(
            listen_addr("127.0.0.1:9433").unwrap(),
            "127.0.0.1:9433".parse().unwrap()
        );
        assert!(listen_addr("node:x").is_err());
        assert!(listen_addr("somewhere").is_err());
        // Where the machine has a default route, `node:` is one of its own addresses: it
        // binds (port 0: any).
        match listen_addr("node:0") {
            Ok(a) => {
                assert!(!a.ip().is_unspecified(), "{a}");
                std::net::TcpListener::bind(a).unwrap();
            }
            Err(e) => assert!(e.contains("no default route"), "{e}"),
        }
    }
}
