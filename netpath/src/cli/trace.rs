//! `netpath trace`: per-packet timelines on a lab path or running containers.

use anyhow::{Result, bail};

use super::bounds;
use crate::driver::Driver;
use crate::harness::{Proto, proto::L4};
use crate::render::OutputArgs;

/// Print per-packet timelines of traffic on a lab path or of running containers.
///
/// One line per point: time since the previous one, device, hop. Filters are applied in the
/// kernel.
#[derive(clap::Args)]
#[command(after_help = EXAMPLES)]
pub struct TraceArgs {
    /// Drivers, comma-separated (trace takes one: the lab built, with request/response
    /// traffic sent through it; default: bridge).
    #[arg(long, short = 'd', value_name = "DRIVER", value_delimiter = ',')]
    pub driver: Vec<Driver>,
    /// Complete timelines to print (1-100000).
    #[arg(long, short = 'c', default_value_t = 10, value_parser = bounds::trace_count())]
    pub count: usize,
    /// What the request/response runs send (the lab's harness; trace takes one): tcp, udp
    /// or icmp (default: tcp; given, it is also a filter).
    #[arg(long, value_enum, value_delimiter = ',')]
    pub proto: Vec<Proto>,
    /// Only this L4 protocol (tcp, udp, icmp or a number).
    #[arg(long, value_name = "PROTO")]
    pub filter_proto: Option<L4>,
    /// Only packets from or to this IPv4 address.
    #[arg(long, value_name = "ADDR", alias = "host")]
    pub filter_addr: Option<std::net::Ipv4Addr>,
    /// Only packets from or to this port.
    #[arg(long, value_name = "PORT", alias = "port")]
    pub filter_port: Option<u16>,
    /// Only packets first seen in this netns (lab role such as cli/srv/node, full name, or
    /// a path like /proc/PID/ns/net).
    #[arg(long, value_name = "NETNS", alias = "netns")]
    pub filter_netns: Option<String>,
    /// Only packets first seen on this lab interface.
    #[arg(long, value_name = "IFACE", alias = "iface")]
    pub filter_iface: Option<String>,
    /// Only packets a pcap filter expression selects, as tcpdump and pwru take it ('tcp port
    /// 5432 and host 10.0.0.2'), compiled to the kernel's filters: tcp, udp, icmp, proto N, port N, host A,
    /// joined by `and`. Instead of --filter-proto, --filter-addr and --filter-port.
    #[arg(long, value_name = "EXPR", conflicts_with_all = ["filter_proto", "filter_addr", "filter_port", "expression"])]
    pub filter_expr: Option<String>,
    /// The filter expression as trailing words (`netpath trace tcp port 5432`), as tcpdump takes it.
    #[arg(value_name = "EXPRESSION", trailing_var_arg = true, conflicts_with_all = ["filter_proto", "filter_addr", "filter_port"])]
    pub expression: Vec<String>,
    /// Also write each followed packet with its hops as pcap-ng to FILE (or -o FILE.pcapng;
    /// Wireshark, tshark: the hops are in the packet comments, e.g.
    /// `frame.comment contains "wakeup"`).
    #[arg(long, value_name = "FILE")]
    pub pcapng: Option<std::path::PathBuf>,
    /// Also write the journeys as a Perfetto trace to FILE (or -o FILE.perfetto-trace;
    /// ui.perfetto.dev): a track per CPU and followed thread, each hop a slice, each journey a
    /// flow.
    #[arg(long, value_name = "FILE")]
    pub perfetto: Option<std::path::PathBuf>,
    /// A running container to follow (Docker's, containerd's or a pod's: by id, name or
    /// namespace/pod[/container]; repeat for several) instead of building a lab: attaches to
    /// their interfaces and host-side peers only.
    #[arg(long)]
    pub container: Vec<String>,
    /// With --container: stop after this long even if fewer packets came, e.g. 10s (100ms
    /// to 1h).
    #[arg(long, value_name = "DURATION", default_value = "10s", alias = "duration", value_parser = bounds::trace_wait())]
    pub timeout: std::time::Duration,
    #[command(flatten)]
    pub backend: super::args::BackendArg,
    #[arg(long, conflicts_with = "container", help = super::args::PARTS_HELP)]
    pub parts: bool,
    #[command(flatten)]
    pub output: OutputArgs,
}

impl super::Command for TraceArgs {
    fn run(self) -> Result<()> {
        let mut a = self;
        // Bad input is said before anything is loaded or built.
        let expr = a.filter_expr.clone().or_else(|| {
            (!a.expression.is_empty()).then(|| a.expression.join(" "))
        });
        let compiled = expr.as_deref().map(super::pcap_filter::compile).transpose()?;
        let exports =
            crate::render::export::asked(a.pcapng.clone(), a.perfetto.clone(), &mut a.output.output)?;
        super::require_root()?;
        let driver = super::one("trace", "-d", &a.driver, Driver::Bridge)?;
        let proto = filter(&a)?;
        a.output.check_files("trace", false)?;
        // trace prints timelines as they come, no bars.
        let backend = super::traced_run(a.backend.backend, false)?;
        let o = crate::trace::TraceOptions {
            driver,
            count: a.count,
            proto: compiled.map_or(proto, |c| c.proto),
            host: compiled.map_or(a.filter_addr, |c| c.host),
            port: compiled.map_or(a.filter_port, |c| c.port),
            netns: a.filter_netns,
            iface: a.filter_iface,
            parts: a.parts,
        };
        let out = if a.container.is_empty() {
            crate::trace::run(backend, &o)?
        } else {
            crate::trace::run_containers(backend, &a.container, &o, a.timeout, a.output.live())?
        };
        a.output.emit(Some(backend.name()), &out)?;
        let lines = crate::render::export::write(&exports, &[(&out.driver, &out.timelines)])?;
        if a.output.live() {
            lines.iter().for_each(|l| println!("{l}"));
        }
        if out.timelines.is_empty() {
            bail!("no packet matched the filters");
        }
        Ok(())
    }
}

/// The protocol the engine is given: on a lab what the harness sends and the filter (they
/// must agree: a filter on another protocol would match nothing); with --container the
/// filter alone (where --proto, which used to filter there, still does, with a hint).
fn filter(a: &TraceArgs) -> Result<Option<L4>> {
    let sent = match a.proto.as_slice() {
        [] => None,
        p => Some(super::one("trace", "--proto", p, Proto::Tcp)?),
    };
    if !a.container.is_empty() {
        if let Some(p) = sent {
            eprintln!(
                "netpath: trace --container --proto {p}: filters on it as before; the filter is now --filter-proto (--proto sets what the lab sends)"
            );
        }
        return Ok(a.filter_proto.or(sent.map(L4::Harness)));
    }
    match (sent, a.filter_proto) {
        (Some(p), Some(f)) if f != L4::Harness(p) => bail!(
            "--filter-proto {}: the lab's harness sends {p} (--proto): nothing else would match",
            a.filter_proto.map(|f| f.number()).unwrap_or_default()
        ),
        (_, Some(f)) => Ok(Some(f)),
        (p, None) => Ok(p.map(L4::Harness)),
    }
}

/// `trace --help` ends with these.
const EXAMPLES: &str = "EXAMPLES:
    netpath trace --filter-port 11111 --count 5     five complete packet timelines on the bridge lab
    netpath trace -d overlay --filter-netns srv --filter-iface eth0 --json
    netpath trace -d bridge --proto udp -c 3        the harness sends UDP; timelines of its datagrams
    netpath trace -d bridge udp port 11111          the same filter as a pcap expression
    netpath trace -c 20 -o hops.pcapng              then: tshark -r hops.pcapng -Y 'frame.comment contains \"wakeup\"'
    netpath trace -d bridge -o bridge.perfetto-trace   open it in ui.perfetto.dev
    netpath trace --container web --container db --filter-port 5432 --timeout 30s
    netpath trace --container shop/web-0             a pod's traffic, whatever runtime runs it";
