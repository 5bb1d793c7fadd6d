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
    /// A pcap filter expression, as tcpdump and pwru take it ('tcp port 5432 and host
    /// 10.0.0.2'), compiled to the kernel's filters: tcp, udp, icmp, proto N, port N, host A,
    /// joined by `and`. Instead of --proto, --host and --port.
    #[arg(long, value_name = "EXPR", conflicts_with_all = ["proto", "host", "port", "expression"])]
    pub filter_expr: Option<String>,
    /// The filter expression as trailing words (`netpath trace tcp port 5432`), as tcpdump takes it.
    #[arg(value_name = "EXPRESSION", trailing_var_arg = true, conflicts_with_all = ["proto", "host", "port"])]
    pub expression: Vec<String>,
    /// Also write each followed packet with its hops as pcap-ng to FILE (Wireshark, tshark:
    /// the hops are in the packet comments, e.g. `frame.comment contains "wakeup"`).
    #[arg(long, value_name = "FILE")]
    pub pcapng: Option<std::path::PathBuf>,
    /// Also write the journeys as a Perfetto trace to FILE (ui.perfetto.dev): a track per CPU
    /// and followed thread, each hop a slice, each journey a flow.
    #[arg(long, value_name = "FILE")]
    pub perfetto: Option<std::path::PathBuf>,
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
        // Bad input is said before anything is loaded or built.
        let expr = a.filter_expr.clone().or_else(|| {
            (!a.expression.is_empty()).then(|| a.expression.join(" "))
        });
        let compiled = expr.as_deref().map(super::pcap_filter::compile).transpose()?;
        let exports = render::export::asked(a.pcapng.clone(), a.perfetto.clone())?;
        super::require_root()?;
        // trace prints timelines as they come, no bars.
        let backend = super::traced_run(a.backend.backend, false)?;
        let o = crate::trace::TraceOptions {
            driver: a.driver,
            count: a.count,
            proto: compiled.map_or(a.proto, |c| c.proto),
            host: compiled.map_or(a.host, |c| c.host),
            port: compiled.map_or(a.port, |c| c.port),
            netns: a.netns,
            iface: a.iface,
        };
        let out = if a.container.is_empty() {
            crate::trace::run(backend, &o)?
        } else {
            crate::trace::run_containers(backend, &a.container, &o, a.duration, a.output.is_text())?
        };
        render::emit(a.output.format(), Some(backend.name()), &out)?;
        let lines = render::export::write(&exports, &[(&out.driver, &out.timelines)])?;
        if a.output.is_text() {
            lines.iter().for_each(|l| println!("{l}"));
        }
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
    netpath trace -d bridge udp port 11111          the same filter as a pcap expression
    netpath trace -c 20 --pcapng hops.pcapng        then: tshark -r hops.pcapng -Y 'frame.comment contains \"wakeup\"'
    netpath trace -d bridge --perfetto bridge.perfetto-trace   open it in ui.perfetto.dev
    netpath trace --container web --container db --port 5432 --duration 30s
    netpath trace --container shop/web-0             a pod's traffic, whatever runtime runs it";
