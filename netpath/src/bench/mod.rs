//! `netpath bench`: netpath's own cost, as ratios measured in one process run on the same lab
//! path, never as absolute thresholds (the figures of a shared, noisy machine move; ratios of
//! runs taken seconds apart on the same path move much less).
//!
//! Per driver, `rounds` times: latency (sockperf against the harness, untraced and traced,
//! and under a naive bpftrace script), throughput (iperf3 against the bulk harness three
//! ways), then the programs' kernel cost and the memory; see [`run`].

use std::collections::BTreeMap;
use std::io::{BufRead as _, BufReader, Read as _};
use std::net::{IpAddr, Ipv4Addr, SocketAddrV4};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, bail};

use crate::harness::{Cpus, WaitMode};
use serde::Serialize;

use crate::{
    driver::Driver,
    harness::{self, BulkConfig, NoPhases, Phases as _, Proto, RrConfig, RrLoad, RrResult},
    lab,
    path::NetPath,
    probe::backend::{self, Backend, BackendChoice},
    probe::tracer::{Tracer, TracerOptions},
    record::ProgCost,
    sys::netns::Netns,
};

mod figures;
mod gather;
mod journeys;
mod memory;
mod modes;
pub mod proof;
pub mod serve_cpu;
pub mod serve_on;
pub mod stability;
mod tools;
mod traced;

use crate::sys::machine::loadavg;
pub use figures::{Bulk, Median, Ratios, Rounds, Rtt};
use gather::{BulkRounds, LatencyRounds, kernel_cost};
pub use journeys::JourneyRun;
use memory::*;
pub use modes::ModeLatency;
use tools::*;
use traced::*;

/// Port of the sockperf server (on the lab server's address).
pub const SOCKPERF_PORT: u16 = crate::lab::LAB_PORT + 1;
/// Port of the iperf3 server (on the lab server's address).
pub const IPERF3_PORT: u16 = crate::lab::LAB_PORT + 2;

/// What to run.
#[derive(Clone, Debug)]
pub struct BenchOptions {
    /// Rounds per driver; every figure is the median over rounds.
    pub rounds: usize,
    /// Seconds per sockperf, iperf3 and bulk run.
    pub secs: u64,
    /// Measured requests per netpath request/response run.
    pub requests: u64,
    pub drivers: Vec<Driver>,
    pub backend: BackendChoice,
    /// Print progress lines on stderr.
    pub progress: bool,
    /// One-way journeys of the journey-count run on the first driver (0: none).
    pub journeys: u64,
    /// What else ran on the machine, in the operator's words (printed in BENCHMARKS.md).
    pub note: String,
    /// Transport of the latency runs (tcp or udp; sockperf has no ICMP mode).
    pub proto: Proto,
    /// Also the "hops you can prove" section (`proof.rs`): the lab drivers' hop sums against
    /// their untraced RTT and `validate`'s injected delays (TCP only).
    pub proof: bool,
    /// Also the "serve left on" section (`serve_on.rs`): redis in two containers, serve off,
    /// following another container, following the server.
    pub serve_on: bool,
}

impl Default for BenchOptions {
    fn default() -> Self {
        BenchOptions {
            rounds: 3,
            secs: 3,
            requests: 20_000,
            drivers: vec![Driver::Bridge, Driver::Host],
            backend: BackendChoice::Auto,
            progress: true,
            journeys: 0,
            note: String::new(),
            proto: Proto::Tcp,
            proof: false,
            serve_on: false,
        }
    }
}

#[derive(Clone, Debug, Serialize, schemars::JsonSchema)]
pub struct BenchReport {
    /// Transport of the latency runs: sockperf and netpath's harness both used it.
    pub proto: Proto,
    /// Why a part was not run (e.g. throughput and journeys under `--proto udp`), one line each.
    pub skipped: Vec<String>,
    pub backend: Backend,
    pub kernel: String,
    pub online_cpus: usize,
    pub possible_cpus: usize,
    pub rounds: usize,
    pub secs: u64,
    pub requests: u64,
    /// `/proc/loadavg` before and after: how busy the machine was meanwhile.
    pub loadavg_start: String,
    pub loadavg_end: String,
    /// `kernel.bpf_stats_enabled` during the ratio rounds (1 means someone else enabled BPF
    /// statistics, which makes every program run cost two more clock reads).
    pub bpf_stats_enabled_during_rounds: bool,
    pub drivers: Vec<DriverBench>,
    pub memory: Memory,
    /// The journey-count run (on the first driver), if asked.
    pub journeys: Option<JourneyRun>,
    /// Hop sums against untraced RTTs, and injected delays recovered, if asked.
    pub proof: Option<proof::Proof>,
    pub serve_on: Option<serve_on::ServeOn>,
    /// Idle configuration and CPU time during the whole bench.
    pub machine: crate::sys::machine::MachineState,
    /// The busiest other processes at the end (`ps`, by CPU share), and the operator's note.
    pub others: Vec<String>,
    pub note: String,
    /// Wall time of the whole bench.
    pub elapsed_s: f64,
}

#[derive(Clone, Debug, Serialize, schemars::JsonSchema)]
pub struct DriverBench {
    pub driver: Driver,
    /// Transport of its latency runs (the report's).
    pub proto: Proto,
    /// Client source address → server address, as the tools used them.
    pub client: Ipv4Addr,
    pub server: SocketAddrV4,
    pub latency: Latency,
    pub naive_tracer: NaiveTracer,
    /// Bulk throughput; TCP only (absent under `--proto udp`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub throughput: Option<Throughput>,
    pub kernel_cost: KernelCost,
}

#[derive(Clone, Debug, Serialize, schemars::JsonSchema)]
pub struct Latency {
    /// sockperf ping-pong per round, as round trips: sockperf reports one-way latency, i.e.
    /// RTT/2, so its figures are doubled here.
    pub sockperf: Rounds<Rtt>,
    /// netpath untraced (`block.untraced`, blocking like sockperf) / sockperf, per round.
    pub netpath_vs_sockperf: Rounds<Ratios>,
    /// `block`'s traced p50 − untraced p50, µs, median over rounds (compare with the kernel
    /// cost).
    pub traced_minus_untraced_p50_us: f64,
    /// Per wait mode: blocking (placement left to the scheduler, as sockperf's runs) and
    /// spinning (client and server on different CPUs, both kept busy).
    pub block: ModeLatency,
    pub spin: ModeLatency,
}

/// A naive tracer for reference: bpftrace, hash map keyed by skb address on four net
/// tracepoints, running during an untraced harness run.
#[derive(Clone, Debug, Serialize, schemars::JsonSchema)]
pub struct NaiveTracer {
    /// "ran", "not installed", or why it failed.
    pub status: String,
    pub script: String,
    /// Its runs, when it ran.
    pub runs: Option<Rounds<Rtt>>,
    /// bpftrace-running / untraced, each against the blocking untraced run of its round.
    pub vs_untraced: Option<Rounds<Ratios>>,
}

#[derive(Clone, Debug, Serialize, schemars::JsonSchema)]
pub struct Throughput {
    /// iperf3 sender figure (end.sum_sent) per round.
    pub iperf3: Rounds<Bulk>,
    pub untraced: Rounds<Bulk>,
    /// Probes attached, no thread traced: what netpath costs traffic it does not follow.
    pub attached: Rounds<Bulk>,
    /// Probes attached and both bulk threads traced.
    pub traced: Rounds<Bulk>,
    /// Rates against each other, each round's runs against the same round's.
    pub netpath_vs_iperf3: Rounds<f64>,
    pub attached_vs_untraced: Rounds<f64>,
    pub traced_vs_untraced: Rounds<f64>,
    /// Whether the bulk threads were found and traced in every traced round.
    pub traced_threads_found: bool,
    /// Hop events the kernel recorded per traced bulk run (shows tracing was live).
    pub traced_hop_events: Rounds<f64>,
}

/// Kernel run time of the programs during one traced request/response run with BPF run-time
/// statistics on (a separate run, not one of the ratio rounds).
#[derive(Clone, Debug, Serialize, schemars::JsonSchema)]
pub struct KernelCost {
    pub rtt: Rtt,
    /// Measured round trips asked for, and completed (a UDP run fails on the first datagram
    /// that does not come back, so equal when the run succeeded).
    pub requests: u64,
    pub round_trips: u64,
    /// One-way journeys of this traced run (2 per round trip), the kernel's completed ones, and
    /// every loss counter: completed + losses ≥ sent when every loss was counted.
    pub journeys_sent: u64,
    pub journeys_completed: u64,
    #[schemars(with = "crate::record::schema_parts::Lost")]
    pub losses: BTreeMap<&'static str, u64>,
    pub programs: Vec<ProgCost>,
    /// Mean ns per run of an empty program on `net_dev_queue` in the same run: what any
    /// program costs there (dispatch and the statistics' own clock reads).
    pub floor_ns: f64,
    /// Σ runs × mean run time / round trips, ns.
    pub ns_per_rtt: f64,
    /// `ns_per_rtt` less the floor once per run: the programs' own work, without the
    /// dispatch and the statistics' clock reads every run pays (`floor_ns`).
    pub body_ns_per_rtt: f64,
    /// The dispatch the statistics do not see: the spinning round trip with one empty program
    /// on each hook, less the untraced one (medians over rounds, ns; spin: every ns on the
    /// path is a CPU's).
    pub dispatch_ns_per_rtt: f64,
    /// netpath's CPU per round trip: `body_ns_per_rtt` + `dispatch_ns_per_rtt`.
    pub cpu_ns_per_rtt: f64,
    /// Mean ns per run over the hot programs (those running at least once per round trip),
    /// weighted by their runs: the cost of one tracked hop event.
    pub hot_ns_per_event: f64,
    /// The same, each program less the floor of its own hook (`floors`).
    pub hot_over_floors_ns: f64,
    /// Empty programs beside the others in the same run, one per hook measured
    /// (`floor_<hook>`): a program's cost on a hook is read against its hook's floor, or
    /// `net_dev_queue`'s where its hook has none.
    pub floors: Vec<ProgCost>,
    /// A run with the probes attached and nothing followed (stats on, floor attached): mean ns
    /// per program run, and the floor of that same run.
    pub untracked_ns_per_run: f64,
    pub untracked_floor_ns: f64,
    /// Mean ns per run of that run's programs less each one's hook floor.
    pub untracked_over_floors_ns: f64,
    pub untracked_programs: Vec<ProgCost>,
    pub untracked_floors: Vec<ProgCost>,
    /// The same as a share of the untraced RTT (median over rounds of its p50, and of its mean;
    /// the mean of a busy machine carries its preemptions).
    pub share_of_untraced_p50: f64,
    pub share_of_untraced_mean: f64,
}

#[derive(Clone, Debug, Default, Serialize, schemars::JsonSchema)]
pub struct Memory {
    /// VmRSS when the bench started, before the eBPF object was loaded (after reading the
    /// kernel's capabilities), after, and the process peak (VmHWM) at the end.
    pub rss_at_start_kib: u64,
    pub rss_before_load_kib: u64,
    pub rss_after_load_kib: u64,
    pub peak_rss_kib: u64,
    /// Kernel memory of netpath's BPF maps (`memlock` of each map fd this process holds).
    pub maps: Vec<MapMem>,
    pub maps_bytes: u64,
    /// The part of `maps_bytes` that is per-CPU (per-CPU maps' values, one copy per possible
    /// CPU), and its size per CPU.
    pub per_cpu_bytes: u64,
    pub per_cpu_bytes_each: u64,
    /// Maps at 64 possible CPUs: fixed part + 64 × per-CPU part.
    pub maps_bytes_at_64_cpus: u64,
    /// Kernel memory of netpath's loaded programs (`memlock` of each program fd).
    pub programs: usize,
    pub programs_bytes: u64,
}

#[derive(Clone, Debug, Serialize, schemars::JsonSchema)]
pub struct MapMem {
    pub name: String,
    pub map_type: u32,
    pub per_cpu: bool,
    pub max_entries: u32,
    pub value_size: u32,
    pub bytes: u64,
}

/// The options of a `compare` the bench runs itself (the consistency proof, the stability
/// section): TCP, untraced twins, compare's default mode (spin on split CPUs), no timelines or
/// counters kept beyond the tables.
fn compare_options(
    drivers: Vec<Driver>,
    rounds: usize,
    rr: RrLoad,
) -> Result<crate::measure::interleave::CompareOptions> {
    let cpus = harness::Cpus::Split;
    Ok(crate::measure::interleave::CompareOptions {
        drivers,
        protos: vec![Proto::Tcp],
        rr,
        untraced: true,
        tracer: TracerOptions::default(),
        tc_counters: false,
        parts: false,
        keep_timelines: 0,
        rounds,
        bulk: None,
        burst: None,
        underlay: None,
        mode: crate::sys::runmode::RunMode {
            wait: harness::WaitMode::Spin,
            also_block: false,
            cpus,
            pin: cpus.resolve()?,
            idle: Default::default(),
        },
    })
}

/// What must hold before anything is loaded or built: drivers, protocol, the tools.
fn preflight(opts: &BenchOptions) -> Result<()> {
    if opts.drivers.is_empty() {
        bail!("no driver to bench");
    }
    if opts.proto == Proto::Icmp {
        bail!("{ICMP_REFUSED}");
    }
    for &d in &opts.drivers {
        harness::supported::check(d, opts.proto)?;
    }
    let tools: &[&str] = if opts.proto == Proto::Tcp {
        &["sockperf", "iperf3"]
    } else {
        &["sockperf"]
    };
    for &tool in tools {
        if which(tool).is_none() {
            bail!("{tool} is not installed (`cargo xtask setup --bench` installs it)");
        }
    }
    Ok(())
}

/// Runs the whole bench (as root).
///
/// Per driver (default bridge and host), `rounds` times:
///
/// 1. latency: `sockperf ping-pong` over TCP with 1 KiB messages, then netpath's request/response
///    harness untraced and traced (probes attached, the harness threads traced, as in
///    `compare`), the last two in alternating order (ABBA) so drift cancels;
/// 2. optionally the same with a naive `bpftrace` script running (hash map keyed by skb address
///    on four net tracepoints) when bpftrace is installed;
/// 3. throughput: `iperf3` (one stream, 128 KiB writes), then netpath's bulk harness (one
///    stream, 128 KiB writes) untraced, with the probes attached but no thread traced (what
///    netpath costs other traffic), and with the bulk threads traced.
///
/// `--proto udp`: the latency side runs sockperf's UDP ping-pong (its default mode) against
/// netpath's UDP request/response harness, the tracer loaded for datagrams; the bulk harness
/// and the journey-count run are TCP streams, so both are skipped (and said so).
///
/// Ratios are computed per round (each pair measured back to back) and the median over rounds
/// is reported. Then one more traced request/response run with the kernel's BPF run-time
/// statistics enabled gives each program's cost per round trip (kept out of the ratio rounds:
/// the statistics themselves cost two clock reads per program run), and the process's peak
/// RSS and the kernel memory of its BPF maps and programs are read.
///
/// All external tools run on the lab's own addresses (`server_bind`, `connect_to`), one after the
/// other, so they cross exactly the devices the harness crosses; each tool has its own port
/// ([`SOCKPERF_PORT`], [`IPERF3_PORT`]) because sockperf's server does not set SO_REUSEADDR and
/// cannot bind a port that a harness connection left in TIME_WAIT. Drivers whose client reaches
/// the server through a port mapping (published-proxy, published-nat) are therefore refused.
pub fn run(opts: &BenchOptions) -> Result<BenchReport> {
    let t0 = Instant::now();
    let rss_at_start_kib = rss_kib().0;
    preflight(opts)?;
    let tcp = opts.proto == Proto::Tcp;
    let loadavg_start = loadavg();
    let cpu_start = crate::sys::machine::CpuTimes::now();
    let caps = crate::probe::doctor::probe()?;
    let backend = backend::select(opts.backend, &caps)?;
    let rss_before_load_kib = rss_kib().0;
    let topts = TracerOptions {
        proto: opts.proto,
        ..TracerOptions::default()
    };
    let mut tracer = Tracer::load(backend, &topts)?;
    let rss_after_load_kib = rss_kib().0;
    let stats_on = bpf_stats_enabled();

    let mut drivers = Vec::new();
    let mut journeys = None;
    for &d in &opts.drivers {
        progress(opts, &format!("{d}: building the lab"));
        let lab = lab::build(d).with_context(|| format!("building the {d} lab"))?;
        let mut r = bench_driver(&mut tracer, &lab, opts);
        if r.is_ok() && journeys.is_none() && opts.journeys > 0 && tcp {
            progress(opts, &format!("{d}: {} journeys", opts.journeys));
            match journeys::run(&mut tracer, &lab, opts.journeys) {
                Ok(j) => journeys = Some(j),
                Err(e) => r = Err(e),
            }
        }
        let _ = tracer.detach();
        let torn = lab.teardown();
        drivers.push(r.with_context(|| format!("benchmarking the {d} lab"))?);
        torn?;
    }

    let mut memory = bpf_memory().context("reading the BPF objects' memory")?;
    memory.rss_at_start_kib = rss_at_start_kib;
    memory.rss_before_load_kib = rss_before_load_kib;
    memory.rss_after_load_kib = rss_after_load_kib;
    memory.peak_rss_kib = rss_kib().1;
    drop(tracer);
    let proof = if opts.proof && tcp {
        progress(
            opts,
            "hops you can prove: the lab drivers' hop sums, then validate",
        );
        Some(proof::run(
            backend,
            opts.rounds.max(1),
            opts.requests.min(10_000),
        )?)
    } else {
        None
    };
    let serve_on = serve_section(opts);
    Ok(BenchReport {
        proto: opts.proto,
        skipped: skipped(opts),
        backend,
        kernel: std::fs::read_to_string("/proc/sys/kernel/osrelease")
            .unwrap_or_default()
            .trim()
            .to_string(),
        online_cpus: std::thread::available_parallelism().map_or(0, |n| n.get()),
        possible_cpus: aya::util::nr_cpus().unwrap_or(0),
        rounds: opts.rounds.max(1),
        secs: opts.secs.max(1),
        requests: opts.requests,
        loadavg_start,
        loadavg_end: loadavg(),
        bpf_stats_enabled_during_rounds: stats_on,
        drivers,
        memory,
        journeys,
        proof,
        serve_on,
        machine: crate::sys::machine::MachineState::since(
            cpu_start,
            Default::default(),
            Default::default(),
            Default::default(),
        ),
        others: busiest_processes(6),
        note: opts.note.clone(),
        elapsed_s: t0.elapsed().as_secs_f64(),
    })
}

/// `--proto icmp`, refused: what and how to fix.
pub const ICMP_REFUSED: &str = "bench --proto icmp: sockperf has no ICMP mode, so there \
     is nothing to compare netpath's echo with; use --proto tcp or udp here (and `netpath \
     compare --proto icmp` for echo round trips)";

/// The parts `opts.proto` leaves out, one line each (printed in the text and Markdown).
fn skipped(opts: &BenchOptions) -> Vec<String> {
    if opts.proto == Proto::Tcp {
        return Vec::new();
    }
    let mut v = vec![format!(
        "throughput (iperf3 and netpath's bulk harness) skipped: it is a TCP stream, and this \
         bench measured --proto {}",
        opts.proto
    )];
    if opts.journeys > 0 {
        v.push(format!(
            "journey-count run skipped: it counts TCP request/response journeys (--proto {} \
             asked)",
            opts.proto
        ));
    }
    v
}

/// The serve-left-on section if asked; a failure (no Docker daemon, say) is printed and the
/// section left out rather than losing the rest of the bench.
fn serve_section(opts: &BenchOptions) -> Option<serve_on::ServeOn> {
    if !opts.serve_on {
        return None;
    }
    progress(opts, "serve left on: redis in two containers");
    serve_on::run(
        opts.rounds.max(1),
        opts.requests.max(1000) * serve_on::GETS_PER_REQUEST,
    )
    .inspect_err(|e| eprintln!("bench: serve left on skipped: {e:#}"))
    .ok()
}

fn progress(opts: &BenchOptions, msg: &str) {
    if opts.progress {
        eprintln!("bench: {msg}");
    }
}

fn bench_driver(tracer: &mut Tracer, lab: &NetPath, opts: &BenchOptions) -> Result<DriverBench> {
    let d = lab.driver;
    tracer.set_devices(&lab.devices)?;
    tracer.detach()?;
    let secs = opts.secs.max(1);
    let rr = RrConfig {
        load: RrLoad {
            requests: opts.requests,
            ..RrLoad::default()
        },
        proto: opts.proto,
        // Blocking receives, as sockperf's (the runs it is compared with) are.
        wait: WaitMode::Block,
        ..RrConfig::default()
    };
    let tcp = opts.proto == Proto::Tcp;
    let bulk = BulkConfig {
        duration: Duration::from_secs(secs),
        ..BulkConfig::default()
    };
    if lab.server_bind != lab.connect_to {
        bail!(
            "the {d} lab reaches its server through a port mapping ({} → {}): sockperf and iperf3 \
             cannot follow it on their own ports; bench drivers where the client connects straight \
             to the server (bridge, host, none, macvlan, overlay)",
            lab.connect_to,
            lab.server_bind
        );
    }
    let server = lab.server_bind;
    let client = source_addr(&lab.client_ns, lab.connect_to)?;
    let on = |port: u16| SocketAddrV4::new(*server.ip(), port);
    let mut lat = LatencyRounds::new(which("bpftrace"));
    let mut thr = BulkRounds::default();
    let rounds = opts.rounds.max(1);
    for round in 0..rounds {
        progress(opts, &format!("{d}: round {}/{rounds}", round + 1));
        // Latency: sockperf, then untraced / traced / attached per wait mode.
        lat.sockperf
            .push(sockperf(lab, on(SOCKPERF_PORT), secs, opts.proto)?);
        lat.round(tracer, lab, &rr, round)?;
        // Throughput (TCP only): iperf3, then untraced / attached / traced (order rotated).
        if tcp {
            thr.iperf3.push(iperf3(lab, on(IPERF3_PORT), client, secs)?);
            thr.round(tracer, lab, &bulk, round)?;
        }
    }
    progress(opts, &format!("{d}: program costs"));
    let (latency, naive_tracer) = lat.finish();
    let kernel_cost = kernel_cost(tracer, lab, &rr, &latency, opts)?;
    Ok(DriverBench {
        driver: d,
        proto: opts.proto,
        client,
        server: lab.connect_to,
        latency,
        naive_tracer,
        throughput: tcp.then(|| thr.finish()),
        kernel_cost,
    })
}
