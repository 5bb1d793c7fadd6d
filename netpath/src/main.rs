//! `netpath`: the command line (clap), one `run` per subcommand, and the exit status; the
//! work is in the library.
use std::process::ExitCode;

use anyhow::{Result, bail};
use clap::Args;
use clap::{Parser, Subcommand};
use netpath::{
    backend::{self, BackendChoice},
    bounds, compare,
    compare_args::TrafficArgs,
    doctor,
    driver::Driver,
    harness::Proto,
    lab,
    render::{self, OutputArgs},
};

/// Where the microseconds go when containers talk: per-hop latency of each packet through
/// veth, bridge, NAT, VXLAN and the socket, per Docker network driver, measured with eBPF.
#[derive(Parser)]
#[command(name = "netpath", version, after_help = EXAMPLES)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

const EXAMPLES: &str = "EXAMPLES:
    netpath doctor                       what this kernel allows, and the backend netpath picks
    netpath compare                      every driver on the embedded netns lab
    netpath compare -d bridge,host --rounds 5 --bulk-secs 0 --burst 0
    netpath compare -d bridge --wait block --cpus same   what an application sees, both ends on one CPU
    netpath compare --driver bridge -n 50000 --json > bridge.json
    netpath trace --port 11111 --count 5  five complete packet timelines on the bridge lab
    netpath trace --netns srv --iface eth0 --json
    netpath bench --rounds 5             netpath's own cost, as ratios against sockperf and iperf3
    netpath bench --stability            do compare's ratios hold still, idle vs a busy loop?
    netpath compare -d bridge,overlay --underlay-delay 50us   same node vs cross node
    netpath compare --docker --lab       real Docker networks next to the lab, one run
    netpath compare --between web db     between two running containers (client web, server db)
    netpath compare --between shop/web-0 shop/db-0   between two pods (Docker or containerd)
    netpath trace --container web --container db --port 5432
    netpath trace --container shop/web-0        a pod's traffic, whatever runtime runs it
    netpath inspect web
    netpath serve --all                  Prometheus metrics of every running container's traffic
    netpath serve --label app=web --listen 0.0.0.0:9433
    netpath tune -d bridge --knob gro --rounds 5   veth GRO on vs off, interleaved, with the noise
    netpath tune -d bridge --knob nodelay          Nagle and the delayed ACK on a two-write request
    netpath tune -d bridge --knob wait=block,spin  the receiver's wakeup, A/B
    netpath compare -d bridge,host --report run.html --svg run.svg
    netpath report bridge.json -o bridge.html   the HTML report of a saved compare --json
    netpath diff -d overlay --vs bridge  which hops make overlay slower, with each delta's noise
    netpath diff a.json b.json --driver bridge   the same driver in two saved runs
    netpath cleanup                      remove what a killed run left behind";

#[derive(Subcommand)]
enum Cmd {
    /// Report kernel, lockdown, BTF, which program types load and attach here, and Docker.
    Doctor(DoctorArgs),
    /// Run request/response traffic per driver, traced and untraced, and attribute latency to hops.
    Compare(CompareArgs),
    /// One driver with a knob at two settings (A and B), interleaved in one run: per figure
    /// (RTT, bulk, per hop) the difference, its spread over rounds, and whether it is noise.
    Tune(netpath::cli::tune::TuneArgs),
    /// Render a saved `netpath compare --json` output as the HTML report (and SVG charts).
    Report(ReportArgs),
    /// One driver against another, noise-aware: one sentence, the hops ranked by their share
    /// of the difference (each delta with its spread over rounds), and what differed in the two
    /// sides' conditions. From two saved `compare --json` files (or two drivers of one), or
    /// measured live in one interleaved run (`-d overlay --vs bridge`, needs root).
    Diff(DiffArgs),
    /// Print per-packet timelines (one line per point, time since the previous one, device,
    /// hop) for traffic on a lab path; filters are applied in the kernel.
    Trace(TraceArgs),
    /// Check the hop tables against exactly known delays: a TC program holds each data packet
    /// on one lab device for D µs, every D interleaved in rounds; per driver and D, what the
    /// hop the device leads into recovered, the largest change elsewhere, the untraced RTT's.
    Validate(ValidateArgs),
    /// Benchmark netpath itself, as ratios from one run: harness vs sockperf and iperf3, traced
    /// vs untraced latency and throughput, kernel cost per round trip, memory.
    Bench(BenchArgs),
    /// The thirty-second check of a container's network: mode, MTU, veth peer and bridge on the
    /// host, published ports and the docker-proxy serving them, NAT rules touching it, RPS.
    Inspect(InspectArgs),
    /// Keep the probes attached and export per-hop latency of running containers' traffic as
    /// Prometheus metrics (GET /metrics; GET /ready for a readiness probe). Follows
    /// containers as they start and stop.
    Serve(ServeArgs),
    /// Build the netpath image (FROM scratch: this binary and its shared libraries) through
    /// the Docker API and print its tag; `netpath cleanup` leaves it. For the DaemonSet and
    /// the swarm stack under deploy/ (which run `/netpath serve`).
    Image,
    /// Remove every netpath namespace, link and table a killed run left behind.
    Cleanup,
}

#[derive(Args)]
struct DoctorArgs {
    #[command(flatten)]
    output: OutputArgs,
}

#[derive(Args)]
struct CompareArgs {
    /// Drivers to measure, comma-separated (default: all of them).
    #[arg(long, short = 'd', value_delimiter = ',')]
    driver: Vec<Driver>,
    #[command(flatten)]
    traffic: TrafficArgs,
    /// What the request/response runs send: tcp (one connection), udp (one datagram each
    /// way, like sockperf's default) or icmp (echo request and reply); several,
    /// comma-separated (tcp,udp,icmp), interleave in the same rounds, a row each. Bulk and
    /// burst phases are TCP only.
    #[arg(long, value_enum, value_delimiter = ',', default_value = "tcp")]
    proto: Vec<Proto>,
    /// Measure real Docker networks and containers (a daemon must answer) instead of the lab.
    #[arg(long)]
    docker: bool,
    /// With --docker: also measure the lab's version of each driver, side by side.
    #[arg(long)]
    lab: bool,
    /// Measure between two running containers instead (client in the first, server in the
    /// second, on a network they share): Docker's or any runtime's, named by id, name or
    /// namespace/pod[/container]; nothing is created.
    #[arg(long, num_args = 2, value_names = ["CLIENT", "SERVER"], conflicts_with_all = ["docker", "driver"])]
    between: Vec<String>,
    /// Emulate the wire between two nodes: netem delays every packet a node sends on the
    /// overlay's underlay link (the egress drivers' uplink) by this much (e.g. 50us, 2ms),
    /// so cross-node drivers can be compared with same-node ones. Needs a kernel with netem (sch_netem).
    #[arg(long, value_name = "DURATION", value_parser = lab::netem::parse_wire_duration, conflicts_with_all = ["docker", "between"])]
    underlay_delay: Option<std::time::Duration>,
    /// With --underlay-delay: jitter around that delay (uniform, e.g. 10us).
    #[arg(long, value_name = "DURATION", value_parser = lab::netem::parse_wire_duration, requires = "underlay_delay")]
    underlay_jitter: Option<std::time::Duration>,
    /// Also write a self-contained HTML report (inline SVG charts, no script) to this file.
    #[arg(long, value_name = "FILE")]
    report: Option<std::path::PathBuf>,
    /// Also write the report's charts as one SVG file.
    #[arg(long, value_name = "FILE")]
    svg: Option<std::path::PathBuf>,
    #[command(flatten)]
    output: OutputArgs,
}

#[derive(Args)]
struct ReportArgs {
    /// The JSON file `netpath compare --json` wrote.
    input: std::path::PathBuf,
    /// The HTML file to write.
    #[arg(long, short = 'o', value_name = "FILE")]
    output: Option<std::path::PathBuf>,
    /// The charts as one SVG file.
    #[arg(long, value_name = "FILE")]
    svg: Option<std::path::PathBuf>,
}

#[derive(Args)]
struct DiffArgs {
    /// Saved `netpath compare --json` outputs: A and B, or one file with --driver X --vs Y.
    /// None: measure -d A --vs B now.
    files: Vec<std::path::PathBuf>,
    /// A's driver (in both files when --vs is not given).
    #[arg(long, short = 'd')]
    driver: Option<String>,
    /// B's driver.
    #[arg(long)]
    vs: Option<String>,
    #[command(flatten)]
    traffic: TrafficArgs,
    #[command(flatten)]
    output: OutputArgs,
}

#[derive(Args)]
struct TraceArgs {
    /// Lab topology to build and send request/response traffic through.
    #[arg(long, short = 'd', default_value = "bridge")]
    driver: Driver,
    /// Complete timelines to print (1-100000).
    #[arg(long, short = 'c', default_value_t = 10, value_parser = bounds::int(bounds::TRACE_COUNT))]
    count: usize,
    /// Only this L4 protocol (tcp, udp, icmp or a number).
    #[arg(long)]
    proto: Option<String>,
    /// Only packets from or to this IPv4 address.
    #[arg(long)]
    host: Option<std::net::Ipv4Addr>,
    /// Only packets from or to this port.
    #[arg(long)]
    port: Option<u16>,
    /// Only packets first seen in this netns (lab role such as cli/srv/node, full name, or
    /// a path like /proc/PID/ns/net).
    #[arg(long)]
    netns: Option<String>,
    /// Only packets first seen on this lab interface.
    #[arg(long)]
    iface: Option<String>,
    /// Trace the traffic of running containers (Docker's, containerd's or a pod's: by id, name
    /// or namespace/pod[/container]; repeat for several) instead of building a lab: attaches
    /// to their interfaces and host-side peers only.
    #[arg(long)]
    container: Vec<String>,
    /// With --container: stop after this many seconds even if fewer packets came (0.1-3600).
    #[arg(long, default_value_t = 10.0, value_parser = bounds::float(bounds::TRACE_SECS))]
    duration: f64,
    #[arg(long, value_enum, default_value_t = BackendChoice::Auto)]
    backend: BackendChoice,
    #[command(flatten)]
    output: OutputArgs,
}

#[derive(Args)]
struct ValidateArgs {
    /// Lab drivers, comma-separated (default: bridge,overlay).
    #[arg(long, short = 'd', value_delimiter = ',')]
    driver: Vec<Driver>,
    /// Injected delays in µs, comma-separated (0, the reference, is always measured).
    #[arg(long, value_delimiter = ',', default_value = "0,0.5,1,2,5,10")]
    delays: Vec<f64>,
    /// Where the delay is injected (on receive).
    #[arg(long, value_enum, default_value_t = netpath::validate::At::Server)]
    at: netpath::validate::At,
    #[command(flatten)]
    traffic: TrafficArgs,
    #[command(flatten)]
    output: OutputArgs,
}

#[derive(Args)]
struct BenchArgs {
    /// Rounds per driver (figures are medians over rounds; 1-100).
    #[arg(long, default_value_t = 3, value_parser = bounds::int(bounds::ROUNDS))]
    rounds: usize,
    /// Seconds per sockperf, iperf3 and bulk run (1-600).
    #[arg(long, default_value_t = 3, value_parser = bounds::int(bounds::BENCH_SECS))]
    secs: u64,
    /// Measured requests per request/response run (1-1000000).
    #[arg(long, short = 'n', default_value_t = 20_000, value_parser = bounds::int(bounds::REQUESTS))]
    requests: u64,
    /// Drivers, comma-separated (default: bridge,host).
    #[arg(long, short = 'd', value_delimiter = ',')]
    driver: Vec<Driver>,
    /// Instead: the stability section, five `compare -d host,bridge,overlay --rounds 3`
    /// runs alternating an idle machine and a busy loop on one CPU, and their ratios.
    #[arg(long)]
    stability: bool,
    /// Also write the report as Markdown to this file (`cargo xtask bench` writes
    /// BENCHMARKS.md at the repository root).
    #[arg(long)]
    markdown: Option<std::path::PathBuf>,
    /// One-way journeys of a traced run counting every loss, on the first driver (0: none).
    #[arg(long, default_value_t = 0)]
    journeys: u64,
    /// What else ran on the machine meanwhile, printed in the Markdown report.
    #[arg(long, default_value = "")]
    note: String,
    /// Transport of the latency runs, sockperf's and netpath's: tcp or udp (sockperf's default
    /// mode; the TCP-only bulk and journey runs are skipped). sockperf has no ICMP mode.
    #[arg(long, value_enum, default_value_t = Proto::Tcp)]
    proto: Proto,
    #[command(flatten)]
    output: OutputArgs,
}

#[derive(Args)]
struct InspectArgs {
    container: String,
    #[command(flatten)]
    output: OutputArgs,
}

#[derive(Args)]
struct ServeArgs {
    /// Address to listen on (loopback unless told otherwise).
    #[arg(long, default_value = "127.0.0.1:9433")]
    listen: std::net::SocketAddr,
    /// Follow this container (id, name or namespace/pod[/container], on Docker, containerd or
    /// found by its cgroup; repeat for several); picked up when it starts.
    #[arg(long, conflicts_with = "all")]
    container: Vec<String>,
    /// Follow the running containers with this label (KEY or KEY=VALUE; repeat: all must
    /// match; a pod's labels count for its containers).
    #[arg(long, conflicts_with = "all")]
    label: Vec<String>,
    /// Follow every running container.
    #[arg(long)]
    all: bool,
    /// Seconds between listings of the running containers.
    #[arg(long, default_value_t = 2.0)]
    rescan_secs: f64,
    /// The host's /proc, mounted here, when netpath runs in a PID namespace of its own
    /// (a swarm service: deploy/swarm mounts it at /host/proc).
    #[arg(long)]
    host_proc: Option<std::path::PathBuf>,
    #[arg(long, value_enum, default_value_t = BackendChoice::Auto)]
    backend: BackendChoice,
}

fn require_root() -> Result<()> {
    if !nix::unistd::geteuid().is_root() {
        bail!(
            "netpath needs root (CAP_BPF, CAP_NET_ADMIN, CAP_SYS_ADMIN): run it as root, e.g. `sudo netpath …`"
        );
    }
    Ok(())
}

fn run(cli: Cli) -> Result<()> {
    netpath::report::header::mark_start();
    match cli.cmd {
        // Read files and write others: need no privilege.
        Cmd::Report(a) => return report_file(&a),
        Cmd::Diff(a) if !a.files.is_empty() => return diff_files(&a),
        _ => {}
    }
    require_root()?;
    match cli.cmd {
        Cmd::Report(_) => unreachable!("handled above"),
        Cmd::Tune(args) => netpath::cli::tune::main(args),
        Cmd::Diff(a) => diff_live(a),
        Cmd::Doctor(a) => doctor(a),
        Cmd::Compare(a) => compare(a),
        Cmd::Trace(a) => trace(a),
        Cmd::Bench(a) => bench(a),
        Cmd::Validate(a) => validate(a),
        Cmd::Inspect(a) => {
            let mut node = netpath::runtime::Node::connect()?;
            let r = netpath::runtime::inspect(&mut node, &a.container)?;
            render::emit(a.output.format(), None, &r)
        }
        Cmd::Serve(a) => serve(a),
        Cmd::Image => {
            let engine = netpath::docker::Engine::connect()?;
            println!(
                "{}",
                netpath::docker::image::ensure_agent_image(&engine, true)?
            );
            Ok(())
        }
        Cmd::Cleanup => cleanup(),
    }
}

fn doctor(a: DoctorArgs) -> Result<()> {
    let capabilities = doctor::probe()?;
    let backend = backend::select(BackendChoice::Auto, &capabilities).ok();
    let out = render::doctor::DoctorOutput {
        backend,
        capabilities,
    };
    render::emit(a.output.format(), backend.map(|b| b.name()), &out)
}

fn compare(a: CompareArgs) -> Result<()> {
    let text = a.output.is_text();
    let drivers = if a.driver.is_empty() {
        Driver::ALL.to_vec()
    } else {
        a.driver
    };
    let underlay = a.underlay_delay.map(|delay| lab::netem::WireDelay {
        delay,
        jitter: a.underlay_jitter.unwrap_or_default(),
    });
    let between = !a.between.is_empty();
    // A placement this machine cannot give is said before anything is loaded or built.
    let mut opts = a.traffic.options(drivers, underlay)?;
    netpath::compare_args::set_protocols(&mut opts, &a.proto)?;
    for (flag, p) in [("--report", &a.report), ("--svg", &a.svg)] {
        if let Some(p) = p {
            render::check_output_path(flag, p)?;
        }
    }
    lab::install_signal_cleanup();
    netpath::btf::require()?;
    netpath::progress::enable(text);
    let caps = doctor::probe()?;
    let backend = backend::select(a.traffic.backend, &caps)?;
    // A missing daemon is said before anything else is printed.
    let engine = a
        .docker
        .then(netpath::docker::Engine::connect)
        .transpose()?;
    let node = between.then(netpath::runtime::Node::connect).transpose()?;
    if text {
        render::text::backend_line(backend);
    }
    // Text shows each driver as it is measured (runs are long); JSON waits for the end.
    let sink: &mut dyn netpath::report::Sink = if text {
        &mut render::text::TextSink
    } else {
        &mut netpath::report::Quiet
    };
    let drivers = match (node, &engine, a.between.as_slice()) {
        (Some(mut n), _, [client, server]) => {
            compare::run_between(backend, &opts, &mut n, client, server, sink)?
        }
        (_, Some(e), _) => compare::run_docker(backend, &opts, e, a.lab, sink)?,
        _ => compare::run(backend, &opts, sink)?,
    };
    let out = render::text::CompareOutput { backend, drivers };
    render::emit(a.output.format(), Some(backend.name()), &out)?;
    if a.report.is_some() || a.svg.is_some() {
        let v = netpath::report::header::to_value("compare", Some(backend.name()), &out)?;
        let view = render::CompareView::from_value(v)?;
        render::write_reports(&view, a.report.as_deref(), a.svg.as_deref())?;
    }
    Ok(())
}

fn trace(a: TraceArgs) -> Result<()> {
    lab::install_signal_cleanup();
    netpath::btf::require()?;
    let caps = doctor::probe()?;
    let backend = backend::select(a.backend, &caps)?;
    let o = netpath::trace::TraceOptions {
        driver: a.driver,
        count: a.count,
        proto: a.proto,
        host: a.host,
        port: a.port,
        netns: a.netns,
        iface: a.iface,
    };
    let out = if a.container.is_empty() {
        netpath::trace::run(backend, &o)?
    } else {
        let timeout = std::time::Duration::from_secs_f64(a.duration.max(0.1));
        netpath::trace::run_containers(backend, &a.container, &o, timeout, a.output.is_text())?
    };
    render::emit(a.output.format(), Some(backend.name()), &out)?;
    if out.timelines.is_empty() {
        bail!("no packet matched the filters");
    }
    Ok(())
}

fn bench(a: BenchArgs) -> Result<()> {
    if a.proto == Proto::Icmp {
        bail!("{}", netpath::bench::ICMP_REFUSED);
    }
    if a.stability && a.proto != Proto::Tcp {
        bail!(
            "netpath bench --stability measures compare's TCP ratios and has no --proto; drop \
             --proto {} (or --stability)",
            a.proto
        );
    }
    lab::install_signal_cleanup();
    netpath::btf::require()?;
    if a.stability {
        let r = netpath::stability::run(a.requests.min(10_000), a.output.is_text())?;
        return render::bench::emit_stability(a.output.format(), &r);
    }
    let mut opts = netpath::bench::BenchOptions {
        rounds: a.rounds,
        secs: a.secs,
        requests: a.requests,
        journeys: a.journeys,
        note: a.note,
        proto: a.proto,
        ..Default::default()
    };
    if !a.driver.is_empty() {
        opts.drivers = a.driver;
    }
    let r = netpath::bench::run(&opts)?;
    if let Some(path) = &a.markdown {
        std::fs::write(path, netpath::bench::markdown(&r))
            .map_err(|e| anyhow::anyhow!("writing {}: {e}", path.display()))?;
        eprintln!("bench: wrote {}", path.display());
    }
    render::emit(a.output.format(), Some(r.backend.name()), &r)
}

fn validate(a: ValidateArgs) -> Result<()> {
    let drivers = if a.driver.is_empty() {
        vec![Driver::Bridge, Driver::Overlay]
    } else {
        a.driver
    };
    netpath::validate::check(&a.delays)?;
    let mut compare = a.traffic.options(drivers.clone(), None)?;
    compare.mode.block_line = false;
    lab::install_signal_cleanup();
    netpath::btf::require()?;
    netpath::progress::enable(a.output.is_text());
    let caps = doctor::probe()?;
    let backend = backend::select(a.traffic.backend, &caps)?;
    let mut tracer = netpath::tracer::Tracer::load(backend, &compare.tracer)?;
    let o = netpath::validate::ValidateOptions {
        drivers,
        delays_us: a.delays,
        at: a.at,
        compare,
    };
    let out = netpath::validate::run(&mut tracer, &o)?;
    render::emit(a.output.format(), Some(backend.name()), &out)
}

fn serve(a: ServeArgs) -> Result<()> {
    if a.container.is_empty() && a.label.is_empty() && !a.all {
        bail!(
            "netpath serve: say which containers to follow: --container NAME, --label K=V or --all"
        );
    }
    if let Some(dir) = a.host_proc {
        netpath::docker::set_host_proc(dir)?;
    }
    lab::install_signal_cleanup();
    let mut node = netpath::runtime::Node::connect()?;
    let caps = doctor::probe()?;
    let backend = backend::select(a.backend, &caps)?;
    netpath::serve::run(
        backend,
        &mut node,
        &netpath::serve::ServeOptions {
            listen: a.listen,
            select: netpath::serve::Selection {
                names: a.container,
                labels: a.label,
                all: a.all,
            },
            rescan: std::time::Duration::from_secs_f64(a.rescan_secs.clamp(0.1, 3600.0)),
        },
    )
}

fn cleanup() -> Result<()> {
    let mut removed = lab::cleanup_leftovers()?;
    // Docker objects: through the daemon when one answers, else what can be removed
    // without it (macvlan parents, state files, a second daemon netpath started).
    match netpath::docker::Engine::connect() {
        Ok(engine) => removed.extend(netpath::docker::cleanup_docker(&engine)?),
        Err(_) => removed.extend(netpath::docker::cleanup_docker_host(std::path::Path::new(
            "/proc/self/ns/net",
        ))?),
    }
    if removed.is_empty() {
        println!("nothing of netpath's was left");
    } else {
        for r in removed {
            println!("removed {r}");
        }
    }
    Ok(())
}

/// `diff a.json b.json`: reads files.
fn diff_files(a: &DiffArgs) -> Result<()> {
    if !a.traffic.is_default() {
        bail!(
            "netpath diff: the traffic and mode flags (--rounds, -n, --wait, --cpus, --backend …) are for measuring now; saved files were measured already: drop those flags, or the files to measure -d A --vs B"
        );
    }
    let r = netpath::diff::from_files(&a.files, a.driver.as_deref(), a.vs.as_deref())?;
    render::emit(a.output.format(), None, &r)
}

/// `diff -d A --vs B`: both measured now, interleaved.
fn diff_live(a: DiffArgs) -> Result<()> {
    let (da, db) = live_pair(a.driver.as_deref(), a.vs.as_deref())?;
    let mut opts = a.traffic.options(vec![da, db], None)?;
    // diff compares the runs its tables come from; compare's extra blocking line
    // would cost a run per driver and say nothing here (`--wait block` diffs that).
    opts.mode.block_line = false;
    lab::install_signal_cleanup();
    netpath::btf::require()?;
    netpath::progress::enable(a.output.is_text());
    let caps = doctor::probe()?;
    let backend = backend::select(a.traffic.backend, &caps)?;
    let r = netpath::diff::live(backend, &opts)?;
    render::emit(a.output.format(), Some(backend.name()), &r)
}

/// `diff -d A --vs B`: two different lab drivers.
fn live_pair(a: Option<&str>, b: Option<&str>) -> Result<(Driver, Driver)> {
    let (Some(a), Some(b)) = (a, b) else {
        bail!(
            "netpath diff: give two saved `compare --json` files, or -d A --vs B to measure two drivers now (e.g. -d overlay --vs bridge)"
        );
    };
    let parse = |flag: &str, s: &str| {
        use clap::ValueEnum;
        Driver::from_str(s, false).map_err(|_| {
            let all: Vec<&str> = Driver::ALL.iter().map(|d| d.name()).collect();
            anyhow::anyhow!("{flag} {s}: no such driver; use one of {}", all.join(", "))
        })
    };
    let (a, b) = (parse("--driver", a)?, parse("--vs", b)?);
    if a == b {
        bail!("--driver and --vs both name {a}: diff two different drivers");
    }
    Ok((a, b))
}

fn report_file(a: &ReportArgs) -> Result<()> {
    let (output, svg) = (a.output.as_deref(), a.svg.as_deref());
    if output.is_none() && svg.is_none() {
        bail!("netpath report: nothing to write; give -o out.html and/or --svg out.svg");
    }
    for (flag, p) in [("-o", output), ("--svg", svg)] {
        if let Some(p) = p {
            netpath::render::check_output_path(flag, p)?;
        }
    }
    let view = netpath::render::CompareView::from_file(&a.input)?;
    netpath::render::write_reports(&view, output, svg)
}

fn main() -> ExitCode {
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("warn")).init();
    netpath::render::quiet_broken_pipe();
    // Inside netpath's agent image the binary is the container's traffic agent.
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("agent") {
        return match netpath::docker::agent_main(&args[2..]) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("netpath agent: {e:#}");
                ExitCode::FAILURE
            }
        };
    }
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) if !e.use_stderr() => {
            // --help, --version
            let _ = e.print();
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            eprintln!(
                "netpath: {} (see `netpath --help`)",
                render::output::clap_line(&e)
            );
            return ExitCode::from(2);
        }
    };
    let result = run(cli);
    lab::wait_if_interrupted();
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("netpath: {e:#}");
            ExitCode::FAILURE
        }
    }
}
