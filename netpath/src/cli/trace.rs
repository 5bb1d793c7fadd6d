//! `netpath trace`: per-packet timelines on a lab path or running containers.

use anyhow::{Result, bail};

use super::bounds;
use crate::driver::Driver;
use crate::render::{self, OutputArgs};

/// Print per-packet timelines of traffic on a lab path or of running containers.
///
/// One line per point: time since the previous one, device, hop. Filters are applied in the
/// kernel.
#[derive(clap::Args)]
#[command(after_help = EXAMPLES)]
pub struct TraceArgs {
    /// Lab topology to build and send request/response traffic through.
    #[arg(long, short = 'd', default_value = "bridge")]
    pub driver: Driver,
    /// Complete timelines to print (1-100000).
    #[arg(long, short = 'c', default_value_t = 10, value_parser = bounds::trace_count())]
    pub count: usize,
    /// Only this L4 protocol (tcp, udp, icmp or a number).
    #[arg(long)]
    pub proto: Option<crate::harness::proto::L4>,
    /// Only packets from or to this IPv4 address.
    #[arg(long)]
    pub host: Option<std::net::Ipv4Addr>,
    /// Only packets from or to this port.
    #[arg(long)]
    pub port: Option<u16>,
    /// Only packets first seen in this netns (lab role such as cli/srv/node, full name, or
    /// a path like /proc/PID/ns/net).
    #[arg(long)]
    pub netns: Option<String>,
    /// Only packets first seen on this lab interface.
    #[arg(long)]
    pub iface: Option<String>,
    /// Trace the traffic of running containers (Docker's, containerd's or a pod's: by id, name
    /// or namespace/pod[/container]; repeat for several) instead of building a lab: attaches
    /// to their interfaces and host-side peers only.
    #[arg(long)]
    pub container: Vec<String>,
    /// With --container: stop after this long even if fewer packets came, e.g. 10s (100ms
    /// to 1h).
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = bounds::trace_wait())]
    pub duration: std::time::Duration,
    #[command(flatten)]
    pub backend: super::args::BackendArg,
    #[command(flatten)]
    pub output: OutputArgs,
}

impl super::Command for TraceArgs {
    fn run(self) -> Result<()> {
        let a = self;
        super::require_root()?;
        // trace prints timelines as they come, no bars.
        let backend = super::traced_run(a.backend.backend, false)?;
        let o = crate::trace::TraceOptions {
            driver: a.driver,
            count: a.count,
            proto: a.proto,
            host: a.host,
            port: a.port,
            netns: a.netns,
            iface: a.iface,
        };
        let out = if a.container.is_empty() {
            crate::trace::run(backend, &o)?
        } else {
            crate::trace::run_containers(backend, &a.container, &o, a.duration, a.output.is_text())?
        };
        render::emit(a.output.format(), Some(backend.name()), &out)?;
        if out.timelines.is_empty() {
            bail!("no packet matched the filters");
        }
        Ok(())
    }
}

/// `trace --help` ends with these.
const EXAMPLES: &str = "EXAMPLES:
    netpath trace --port 11111 --count 5            five complete packet timelines on the bridge lab
    netpath trace -d overlay --netns srv --iface eth0 --json
    netpath trace -d bridge --proto udp -c 3        the harness sends UDP; timelines of its datagrams
    netpath trace --container web --container db --port 5432 --duration 30s
    netpath trace --container shop/web-0             a pod's traffic, whatever runtime runs it";
