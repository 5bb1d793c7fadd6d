//! `netpath bench`: netpath's own cost, as ratios measured in one process run on the same lab
//! path, never as absolute thresholds (the figures of a shared, noisy machine move; ratios of
//! runs taken seconds apart on the same path move much less).
//!
//! Per driver (default bridge and host), `rounds` times:
//!
//! 1. latency: `sockperf ping-pong` over TCP with 1 KiB messages, then netpath's request/response
//!    harness untraced and traced (probes attached, the harness threads traced, as in
//!    `compare`), the last two in alternating order (ABBA) so drift cancels;
//! 2. optionally the same with a naive `bpftrace` script running (hash map keyed by skb address
//!    on four net tracepoints) when bpftrace is installed;
//! 3. throughput: `iperf3` (one stream, 128 KiB writes), then netpath's bulk harness (one
//!    stream, 128 KiB writes) untraced, with the probes attached but no thread traced (what
//!    netpath costs other traffic), and with the bulk threads traced.
//!
//! Ratios are computed per round (each pair measured back to back) and the median over rounds
//! is reported. Then one more traced request/response run with the kernel's BPF run-time
//! statistics enabled gives each program's cost per round trip (kept out of the ratio rounds:
//! the statistics themselves cost two clock reads per program run), and the process's peak
//! RSS and the kernel memory of its BPF maps and programs are read.
//!
//! All external tools run on the lab's own addresses (`server_bind`, `connect_to`), one after the
//! other, so they cross exactly the devices the harness crosses; each tool has its own port
//! ([`SOCKPERF_PORT`], [`IPERF3_PORT`]) because sockperf's server does not set SO_REUSEADDR and
//! cannot bind a port that a harness connection left in TIME_WAIT. Drivers whose client reaches
//! the server through a port mapping (published-proxy, published-nat) are therefore refused.

use std::collections::BTreeMap;
use std::io::{BufRead as _, BufReader, Read as _};
use std::net::{IpAddr, Ipv4Addr, SocketAddrV4};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, bail};
use serde::Serialize;

use crate::{
    backend::{self, Backend, BackendChoice},
    driver::Driver,
    harness::{self, BulkConfig, NoPhases, Phases as _, RrConfig, RrResult},
    lab,
    netns::Netns,
    path::NetPath,
    report::{ProgCost, RttSummary},
    tracer::{Tracer, TracerOptions},
};

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
        }
    }
}

#[derive(Clone, Debug, Serialize)]
pub struct BenchReport {
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
    /// Wall time of the whole bench.
    pub elapsed_s: f64,
}

#[derive(Clone, Debug, Serialize)]
pub struct DriverBench {
    pub driver: Driver,
    /// Client source address → server address, as the tools used them.
    pub client: Ipv4Addr,
    pub server: SocketAddrV4,
    pub latency: Latency,
    pub naive_tracer: NaiveTracer,
    pub throughput: Throughput,
    pub kernel_cost: KernelCost,
}

/// Round-trip figures of one run, µs.
#[derive(Clone, Copy, Debug, Default, Serialize)]
pub struct Rtt {
    pub p50_us: f64,
    pub p99_us: f64,
    pub mean_us: f64,
}

impl Rtt {
    fn of(r: &RrResult) -> Rtt {
        let s = RttSummary::from_rr(r);
        Rtt {
            p50_us: s.p50_us,
            p99_us: s.p99_us,
            mean_us: s.mean_us,
        }
    }
}

#[derive(Clone, Debug, Serialize)]
pub struct Latency {
    /// sockperf ping-pong per round, as round trips: sockperf reports one-way latency, i.e.
    /// RTT/2, so its figures are doubled here.
    pub sockperf: Vec<Rtt>,
    pub untraced: Vec<Rtt>,
    pub traced: Vec<Rtt>,
    /// Medians over rounds.
    pub sockperf_median: Rtt,
    pub untraced_median: Rtt,
    pub traced_median: Rtt,
    /// netpath untraced / sockperf, median of the per-round ratios.
    pub netpath_vs_sockperf: Ratios,
    /// netpath traced / untraced, median of the per-round ratios.
    pub traced_vs_untraced: Ratios,
    /// The per-round ratios behind the medians (their spread shows the noise).
    pub netpath_vs_sockperf_rounds: Vec<Ratios>,
    pub traced_vs_untraced_rounds: Vec<Ratios>,
    /// Traced p50 − untraced p50, µs, median over rounds (compare with the kernel cost).
    pub traced_minus_untraced_p50_us: f64,
    /// Hop events the kernel recorded per traced round trip (shows tracing was live).
    pub hop_events_per_rtt: f64,
}

#[derive(Clone, Copy, Debug, Default, Serialize)]
pub struct Ratios {
    pub p50: f64,
    pub p99: f64,
    pub mean: f64,
}

impl Ratios {
    fn of(num: &Rtt, den: &Rtt) -> Ratios {
        Ratios {
            p50: num.p50_us / den.p50_us,
            p99: num.p99_us / den.p99_us,
            mean: num.mean_us / den.mean_us,
        }
    }

    fn median(all: &[Ratios]) -> Ratios {
        Ratios {
            p50: median(all.iter().map(|r| r.p50)),
            p99: median(all.iter().map(|r| r.p99)),
            mean: median(all.iter().map(|r| r.mean)),
        }
    }
}

/// A naive tracer for reference: bpftrace, hash map keyed by skb address on four net
/// tracepoints, running during an untraced harness run.
#[derive(Clone, Debug, Serialize)]
pub struct NaiveTracer {
    /// "ran", "not installed", or why it failed.
    pub status: String,
    pub script: String,
    pub runs: Vec<Rtt>,
    pub median: Option<Rtt>,
    /// bpftrace-running / untraced, median of the per-round ratios (untraced of the same round).
    pub vs_untraced: Option<Ratios>,
}

#[derive(Clone, Copy, Debug, Serialize)]
pub struct Bulk {
    pub gbit_per_s: f64,
    pub retransmits: u64,
}

#[derive(Clone, Debug, Serialize)]
pub struct Throughput {
    /// iperf3 sender figure (end.sum_sent) per round.
    pub iperf3: Vec<Bulk>,
    pub untraced: Vec<Bulk>,
    /// Probes attached, no thread traced: what netpath costs traffic it does not follow.
    pub attached: Vec<Bulk>,
    /// Probes attached and both bulk threads traced.
    pub traced: Vec<Bulk>,
    /// Whether the bulk threads were found and traced in every traced round.
    pub traced_threads_found: bool,
    /// Hop events the kernel recorded per traced bulk run (median; shows tracing was live).
    pub traced_hop_events: f64,
    pub traced_hop_events_rounds: Vec<u64>,
    pub iperf3_median_gbit: f64,
    pub untraced_median_gbit: f64,
    pub attached_median_gbit: f64,
    pub traced_median_gbit: f64,
    /// Medians of the per-round ratios.
    pub netpath_vs_iperf3: f64,
    pub attached_vs_untraced: f64,
    pub traced_vs_untraced: f64,
    /// The per-round ratios behind the medians.
    pub netpath_vs_iperf3_rounds: Vec<f64>,
    pub attached_vs_untraced_rounds: Vec<f64>,
    pub traced_vs_untraced_rounds: Vec<f64>,
}

/// Kernel run time of the programs during one traced request/response run with BPF run-time
/// statistics on (a separate run, not one of the ratio rounds).
#[derive(Clone, Debug, Serialize)]
pub struct KernelCost {
    pub rtt: Rtt,
    pub round_trips: u64,
    pub programs: Vec<ProgCost>,
    /// Mean ns per run of an empty program on `net_dev_queue` in the same run: what any
    /// program costs there (dispatch and the statistics' own clock reads).
    pub floor_ns: f64,
    /// Σ runs × mean run time / round trips, ns.
    pub ns_per_rtt: f64,
    /// The same as a share of the untraced RTT (median over rounds of its p50, and of its mean;
    /// the mean of a busy machine carries its preemptions).
    pub share_of_untraced_p50: f64,
    pub share_of_untraced_mean: f64,
}

#[derive(Clone, Debug, Default, Serialize)]
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

#[derive(Clone, Debug, Serialize)]
pub struct MapMem {
    pub name: String,
    pub map_type: u32,
    pub per_cpu: bool,
    pub max_entries: u32,
    pub value_size: u32,
    pub bytes: u64,
}

/// Runs the whole bench (as root).
pub fn run(opts: &BenchOptions) -> Result<BenchReport> {
    let t0 = Instant::now();
    let rss_at_start_kib = proc_status_kib("VmRSS").unwrap_or(0);
    if opts.drivers.is_empty() {
        bail!("no driver to bench");
    }
    for tool in ["sockperf", "iperf3"] {
        if which(tool).is_none() {
            bail!("{tool} is not installed (`cargo xtask setup` installs it)");
        }
    }
    let loadavg_start = loadavg();
    let caps = crate::doctor::probe()?;
    let backend = backend::select(opts.backend, &caps)?;
    let rss_before_load_kib = proc_status_kib("VmRSS").unwrap_or(0);
    let mut tracer = Tracer::load(backend, &TracerOptions::default())?;
    let rss_after_load_kib = proc_status_kib("VmRSS").unwrap_or(0);
    let stats_on = bpf_stats_enabled();

    let mut drivers = Vec::new();
    for &d in &opts.drivers {
        progress(opts, &format!("{d}: building the lab"));
        let lab = lab::build(d).with_context(|| format!("building the {d} lab"))?;
        let r = bench_driver(&mut tracer, &lab, opts);
        let _ = tracer.detach();
        let torn = lab.teardown();
        drivers.push(r.with_context(|| format!("benchmarking the {d} lab"))?);
        torn?;
    }

    let mut memory = bpf_memory().context("reading the BPF objects' memory")?;
    memory.rss_at_start_kib = rss_at_start_kib;
    memory.rss_before_load_kib = rss_before_load_kib;
    memory.rss_after_load_kib = rss_after_load_kib;
    memory.peak_rss_kib = proc_status_kib("VmHWM").unwrap_or(0);
    drop(tracer);
    Ok(BenchReport {
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
        elapsed_s: t0.elapsed().as_secs_f64(),
    })
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
        requests: opts.requests,
        ..RrConfig::default()
    };
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
    let connect = lab.connect_to;
    let client = source_addr(&lab.client_ns, connect)?;
    let on = |port: u16| SocketAddrV4::new(*server.ip(), port);
    let bpftrace = which("bpftrace");
    let mut naive = NaiveTracer {
        status: if bpftrace.is_some() {
            "ran".into()
        } else {
            "not installed".into()
        },
        script: NAIVE_SCRIPT.trim().to_string(),
        runs: Vec::new(),
        median: None,
        vs_untraced: None,
    };
    let mut naive_ratios = Vec::new();

    let (mut sp, mut un, mut tr) = (Vec::new(), Vec::new(), Vec::new());
    let (mut ip, mut bu, mut ba, mut bt) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let mut threads_found = true;
    let mut bulk_events = Vec::new();
    let mut hop_events = Vec::new();
    let rounds = opts.rounds.max(1);
    for round in 0..rounds {
        progress(opts, &format!("{d}: round {}/{rounds}", round + 1));
        // Latency: sockperf, then the harness pair in ABBA order.
        sp.push(sockperf(lab, on(SOCKPERF_PORT), secs)?);
        let (u, t, ev) = if round % 2 == 0 {
            let u = harness::run_rr(lab, &rr, &NoPhases).context("untraced run")?;
            let (t, ev) = rr_traced(tracer, lab, &rr, false)?;
            (u, t, ev)
        } else {
            let (t, ev) = rr_traced(tracer, lab, &rr, false)?;
            let u = harness::run_rr(lab, &rr, &NoPhases).context("untraced run")?;
            (u, t, ev)
        };
        un.push(Rtt::of(&u));
        tr.push(Rtt::of(&t));
        hop_events.push(ev as f64 / t.count.max(1) as f64);
        if let Some(bin) = &bpftrace
            && naive.status == "ran"
        {
            match rr_under_bpftrace(bin, lab, &rr) {
                Ok(r) => {
                    let r = Rtt::of(&r);
                    naive_ratios.push(Ratios::of(&r, un.last().unwrap()));
                    naive.runs.push(r);
                }
                Err(e) => naive.status = format!("failed: {e:#}"),
            }
        }

        // Throughput: iperf3, then untraced / attached / traced (order rotated per round).
        ip.push(iperf3(lab, on(IPERF3_PORT), client, secs)?);
        let order: [u8; 3] = match round % 3 {
            0 => [0, 1, 2],
            1 => [2, 0, 1],
            _ => [1, 2, 0],
        };
        let mut got: [Option<Bulk>; 3] = [None; 3];
        for k in order {
            got[k as usize] = Some(match k {
                0 => bulk_of(&harness::run_bulk(lab, &bulk).context("untraced bulk")?),
                1 => {
                    tracer.reset()?;
                    tracer.attach()?;
                    let r = harness::run_bulk(lab, &bulk);
                    tracer.detach()?;
                    bulk_of(&r.context("bulk with probes attached")?)
                }
                _ => {
                    let (r, found, ev) = bulk_traced(tracer, lab, &bulk)?;
                    threads_found &= found;
                    bulk_events.push(ev);
                    r
                }
            });
        }
        bu.push(got[0].unwrap());
        ba.push(got[1].unwrap());
        bt.push(got[2].unwrap());
    }

    // Kernel cost: one traced run with BPF run-time statistics on.
    progress(opts, &format!("{d}: program costs"));
    let stats = aya::sys::enable_stats(aya::sys::Stats::RunTime)
        .context("enabling BPF run-time statistics")?;
    let before = tracer.prog_costs();
    // The floor program (empty, on net_dev_queue) runs beside the others in this same run.
    let costed = rr_traced(tracer, lab, &rr, true);
    let after = tracer.prog_costs();
    drop(stats);
    let (costed, _) = costed?;
    let (floor, programs): (Vec<ProgCost>, Vec<ProgCost>) =
        prog_costs(&before, &after, costed.count)
            .into_iter()
            .partition(|p| p.program.starts_with("floor_"));
    let floor_ns = floor.first().map_or(0.0, |p| p.avg_ns);
    let ns_per_rtt: f64 = programs.iter().map(|p| p.avg_ns * p.runs_per_rtt).sum();

    let latency = {
        let per_round = |f: fn(&Rtt) -> f64, v: &[Rtt]| median(v.iter().map(f));
        let med = |v: &[Rtt]| Rtt {
            p50_us: per_round(|r| r.p50_us, v),
            p99_us: per_round(|r| r.p99_us, v),
            mean_us: per_round(|r| r.mean_us, v),
        };
        let vs_sp: Vec<Ratios> = un.iter().zip(&sp).map(|(u, s)| Ratios::of(u, s)).collect();
        let vs_un: Vec<Ratios> = tr.iter().zip(&un).map(|(t, u)| Ratios::of(t, u)).collect();
        if !naive.runs.is_empty() {
            naive.median = Some(med(&naive.runs));
            naive.vs_untraced = Some(Ratios::median(&naive_ratios));
        }
        let diff = median(tr.iter().zip(&un).map(|(t, u)| t.p50_us - u.p50_us));
        Latency {
            traced_minus_untraced_p50_us: diff,
            netpath_vs_sockperf_rounds: vs_sp.clone(),
            traced_vs_untraced_rounds: vs_un.clone(),
            sockperf_median: med(&sp),
            untraced_median: med(&un),
            traced_median: med(&tr),
            netpath_vs_sockperf: Ratios::median(&vs_sp),
            traced_vs_untraced: Ratios::median(&vs_un),
            hop_events_per_rtt: median(hop_events.into_iter()),
            sockperf: sp,
            untraced: un,
            traced: tr,
        }
    };
    let gbit = |v: &[Bulk]| median(v.iter().map(|b| b.gbit_per_s));
    let ratios = |a: &[Bulk], b: &[Bulk]| -> Vec<f64> {
        a.iter()
            .zip(b)
            .map(|(a, b)| a.gbit_per_s / b.gbit_per_s)
            .collect()
    };
    let ratio = |a: &[Bulk], b: &[Bulk]| median(ratios(a, b).into_iter());
    let throughput = Throughput {
        iperf3_median_gbit: gbit(&ip),
        untraced_median_gbit: gbit(&bu),
        attached_median_gbit: gbit(&ba),
        traced_median_gbit: gbit(&bt),
        netpath_vs_iperf3: ratio(&bu, &ip),
        attached_vs_untraced: ratio(&ba, &bu),
        traced_vs_untraced: ratio(&bt, &bu),
        netpath_vs_iperf3_rounds: ratios(&bu, &ip),
        attached_vs_untraced_rounds: ratios(&ba, &bu),
        traced_vs_untraced_rounds: ratios(&bt, &bu),
        traced_threads_found: threads_found,
        traced_hop_events: median(bulk_events.iter().map(|&e| e as f64)),
        traced_hop_events_rounds: bulk_events,
        iperf3: ip,
        untraced: bu,
        attached: ba,
        traced: bt,
    };
    let kernel_cost = KernelCost {
        rtt: Rtt::of(&costed),
        round_trips: costed.count,
        share_of_untraced_p50: ns_per_rtt / 1000.0 / latency.untraced_median.p50_us,
        share_of_untraced_mean: ns_per_rtt / 1000.0 / latency.untraced_median.mean_us,
        ns_per_rtt,
        floor_ns,
        programs,
    };
    Ok(DriverBench {
        driver: d,
        client,
        server: connect,
        latency,
        naive_tracer: naive,
        throughput,
        kernel_cost,
    })
}

/// One traced request/response run as `compare` does it: probes attached, the harness threads
/// traced after warm-up. Also returns the hop events the kernel recorded.
fn rr_traced(
    tracer: &mut Tracer,
    lab: &NetPath,
    cfg: &RrConfig,
    floor: bool,
) -> Result<(RrResult, u64)> {
    tracer.reset()?;
    tracer.attach()?;
    if floor {
        tracer.attach_floor()?;
    }
    let phases = tracer.tids.clone();
    phases.set_relays(lab.proxy_pid.into_iter().collect());
    let r = harness::run_rr(lab, cfg, phases.as_ref());
    tracer.detach()?;
    let r = r.context("traced run")?;
    let events = tracer.snapshot()?.stats.iter().map(|s| s.count).sum();
    Ok((r, events))
}

/// Bulk run with the probes attached and the bulk threads traced: `run_bulk` has no phase
/// hooks, so a watcher thread finds its threads by name and registers them.
fn bulk_traced(tracer: &mut Tracer, lab: &NetPath, cfg: &BulkConfig) -> Result<(Bulk, bool, u64)> {
    tracer.reset()?;
    tracer.attach()?;
    let tids = tracer.tids.clone();
    let stop = AtomicBool::new(false);
    let (r, found) = std::thread::scope(|s| {
        let watcher = s.spawn(|| -> Result<bool> {
            let mut cli: Vec<u32> = Vec::new();
            let mut srv: Vec<u32> = Vec::new();
            let mut pairs: Vec<(u32, u32)> = Vec::new();
            let mut both_since: Option<Instant> = None;
            while !stop.load(Ordering::Relaxed) {
                let (c, v) = threads_named(
                    harness::bulk::BULK_CLIENT_COMM,
                    harness::bulk::BULK_SERVER_COMM,
                );
                for t in c {
                    if !cli.contains(&t) {
                        cli.push(t);
                    }
                }
                for t in v {
                    if !srv.contains(&t) {
                        srv.push(t);
                    }
                }
                if !cli.is_empty() && !srv.is_empty() {
                    for &c in &cli {
                        for &v in &srv {
                            if !pairs.contains(&(c, v)) {
                                tids.measure_start(c, v)?;
                                pairs.push((c, v));
                            }
                        }
                    }
                    // Keep looking a little longer for the per-connection server thread.
                    let since = *both_since.get_or_insert_with(Instant::now);
                    if since.elapsed() > Duration::from_millis(20) {
                        return Ok(true);
                    }
                }
                std::thread::sleep(Duration::from_micros(500));
            }
            Ok(!cli.is_empty() && !srv.is_empty())
        });
        let r = harness::run_bulk(lab, cfg);
        stop.store(true, Ordering::Relaxed);
        let found = watcher
            .join()
            .unwrap_or_else(|_| Ok(false))
            .unwrap_or(false);
        (r, found)
    });
    let _ = tids.measure_end(0, 0);
    tracer.detach()?;
    let r = r.context("traced bulk")?;
    let events = tracer.snapshot()?.stats.iter().map(|s| s.count).sum();
    Ok((bulk_of(&r), found, events))
}

/// Threads of this process whose name is `a` or `b`.
fn threads_named(a: &str, b: &str) -> (Vec<u32>, Vec<u32>) {
    let (mut va, mut vb) = (Vec::new(), Vec::new());
    let Ok(dir) = std::fs::read_dir("/proc/self/task") else {
        return (va, vb);
    };
    for e in dir.flatten() {
        let Some(tid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        let comm = std::fs::read_to_string(e.path().join("comm")).unwrap_or_default();
        match comm.trim_end() {
            c if c == a => va.push(tid),
            c if c == b => vb.push(tid),
            _ => {}
        }
    }
    (va, vb)
}

fn bulk_of(b: &harness::BulkResult) -> Bulk {
    Bulk {
        gbit_per_s: b.gbit_per_s,
        retransmits: b.retransmits,
    }
}

fn prog_costs(
    before: &[(String, u64, u64)],
    after: &[(String, u64, u64)],
    rtts: u64,
) -> Vec<ProgCost> {
    let mut out: Vec<ProgCost> = after
        .iter()
        .filter_map(|(name, runs, ns)| {
            let (_, r0, n0) = before.iter().find(|(n, _, _)| n == name)?;
            let runs = runs.saturating_sub(*r0);
            (runs > 0).then(|| ProgCost {
                program: name.clone(),
                runs,
                avg_ns: ns.saturating_sub(*n0) as f64 / runs as f64,
                runs_per_rtt: runs as f64 / rtts.max(1) as f64,
            })
        })
        .collect();
    out.sort_by(|a, b| {
        (b.avg_ns * b.runs_per_rtt)
            .partial_cmp(&(a.avg_ns * a.runs_per_rtt))
            .unwrap_or(std::cmp::Ordering::Equal)
    });
    out
}

// ---------------------------------------------------------------------------------------------
// External tools.

/// A child process that is killed and reaped when dropped.
struct Reaped(Option<Child>);

impl Reaped {
    fn pid(&self) -> u32 {
        self.0.as_ref().map_or(0, |c| c.id())
    }

    /// Waits up to `limit` for it to exit on its own, then kills it; returns its output.
    fn finish(mut self, limit: Duration) -> (String, String) {
        let mut child = self.0.take().expect("child");
        let end = Instant::now() + limit;
        while Instant::now() < end {
            if let Ok(Some(_)) = child.try_wait() {
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let _ = child.kill();
        let _ = child.wait();
        let mut out = String::new();
        let mut err = String::new();
        if let Some(mut o) = child.stdout.take() {
            let _ = o.read_to_string(&mut out);
        }
        if let Some(mut e) = child.stderr.take() {
            let _ = e.read_to_string(&mut err);
        }
        (out, err)
    }
}

impl Drop for Reaped {
    fn drop(&mut self) {
        if let Some(c) = self.0.as_mut() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Starts `cmd` in `ns` (the child inherits the spawning thread's netns).
fn spawn_in(ns: &Netns, mut cmd: Command) -> Result<Reaped> {
    let shown = format!("{cmd:?}");
    let child = ns
        .run(move || Ok(cmd.spawn()?))
        .with_context(|| format!("starting {shown} in {}", ns.name))?;
    Ok(Reaped(Some(child)))
}

/// Runs `cmd` to completion in `ns`; stdout and stderr, or an error if it failed.
fn output_in(ns: &Netns, mut cmd: Command) -> Result<(String, String)> {
    let shown = format!("{cmd:?}");
    let out = ns
        .run(move || Ok(cmd.stdin(Stdio::null()).output()?))
        .with_context(|| format!("running {shown} in {}", ns.name))?;
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    if !out.status.success() {
        bail!(
            "{shown} failed ({}): {}{}",
            out.status,
            last_lines(&stdout, 3),
            last_lines(&stderr, 3)
        );
    }
    Ok((stdout, stderr))
}

fn last_lines(s: &str, n: usize) -> String {
    let lines: Vec<&str> = s.lines().filter(|l| !l.trim().is_empty()).collect();
    lines[lines.len().saturating_sub(n)..].join(" / ")
}

/// Waits until process `pid` (in the server's netns) has a TCP socket listening on `port`.
fn wait_listening(server: &mut Reaped, port: u16, what: &str) -> Result<()> {
    let end = Instant::now() + Duration::from_secs(10);
    let path = format!("/proc/{}/net/tcp", server.pid());
    while Instant::now() < end {
        if let Some(c) = server.0.as_mut()
            && let Ok(Some(st)) = c.try_wait()
        {
            bail!("{what} exited before listening ({st})");
        }
        let tcp = std::fs::read_to_string(&path).unwrap_or_default();
        if listening_on(&tcp, port) {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    bail!("{what} is not listening on port {port} after 10 s")
}

/// Whether `/proc/net/tcp` text has a socket in LISTEN (0A) on `port`.
fn listening_on(proc_net_tcp: &str, port: u16) -> bool {
    let want = format!(":{port:04X}");
    proc_net_tcp.lines().skip(1).any(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        f.len() > 3 && f[1].ends_with(&want) && f[3] == "0A"
    })
}

/// `sockperf sr` in the server netns on `server` (the lab server's address), `sockperf pp` to it
/// from the client netns.
fn sockperf(lab: &NetPath, server: SocketAddrV4, secs: u64) -> Result<Rtt> {
    let connect = server;
    let mut sr = Command::new("sockperf");
    sr.args(["sr", "--tcp", "-i", &server.ip().to_string()])
        .args(["-p", &server.port().to_string()])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    let mut srv = spawn_in(&lab.server_ns, sr)?;
    wait_listening(&mut srv, server.port(), "sockperf server")?;
    let mut pp = Command::new("sockperf");
    pp.args(["pp", "--tcp", "-i", &connect.ip().to_string()])
        .args(["-p", &connect.port().to_string()])
        .args(["-m", "1024", "-t", &secs.to_string()]);
    let out = output_in(&lab.client_ns, pp);
    drop(srv);
    let (stdout, stderr) = out?;
    let r = parse_sockperf(&format!("{stdout}\n{stderr}"))?;
    Ok(r.rtt())
}

/// `iperf3 -s -1` in the server netns on `server` (the lab server's address), `iperf3 -c -J` to
/// it from the client netns, bound to the client's address.
fn iperf3(lab: &NetPath, server: SocketAddrV4, client: Ipv4Addr, secs: u64) -> Result<Bulk> {
    let connect = server;
    let mut s = Command::new("iperf3");
    s.args(["-s", "-B", &server.ip().to_string()])
        .args(["-p", &server.port().to_string(), "-1"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    let mut srv = spawn_in(&lab.server_ns, s)?;
    wait_listening(&mut srv, server.port(), "iperf3 server")?;
    let mut c = Command::new("iperf3");
    c.args(["-c", &connect.ip().to_string(), "-B", &client.to_string()])
        .args(["-p", &connect.port().to_string()])
        .args(["-t", &secs.to_string(), "-J"]);
    let shown = format!("{c:?}");
    // iperf3 -J exits non-zero on errors but still prints JSON with an "error" field.
    let out = lab
        .client_ns
        .run(move || Ok(c.stdin(Stdio::null()).output()?))
        .with_context(|| format!("running {shown}"))?;
    srv.finish(Duration::from_secs(2));
    let r = parse_iperf3(&String::from_utf8_lossy(&out.stdout))
        .with_context(|| format!("{shown} ({})", out.status))?;
    Ok(Bulk {
        gbit_per_s: r.bits_per_second / 1e9,
        retransmits: r.retransmits,
    })
}

/// The naive tracer: one hash map keyed by skb address, updated on four net tracepoints, with
/// the time since the previous point in a histogram (what a first bpftrace attempt looks like).
pub const NAIVE_SCRIPT: &str = r#"
tracepoint:net:net_dev_queue,
tracepoint:net:net_dev_start_xmit,
tracepoint:net:netif_rx,
tracepoint:net:netif_receive_skb
{
  $t = @ts[args->skbaddr];
  if ($t) { @hop = hist(nsecs - $t); }
  @ts[args->skbaddr] = nsecs;
}
END { clear(@ts); }
"#;

/// An untraced harness run with the naive bpftrace script attached.
fn rr_under_bpftrace(bin: &Path, lab: &NetPath, cfg: &RrConfig) -> Result<RrResult> {
    let mut cmd = Command::new(bin);
    cmd.args(["-e", NAIVE_SCRIPT])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = Reaped(Some(cmd.spawn().context("starting bpftrace")?));
    // Both pipes are drained by threads so bpftrace never blocks on a full pipe.
    let stderr = child.0.as_mut().and_then(|c| c.stderr.take());
    let err_reader = std::thread::spawn(move || {
        let mut s = String::new();
        if let Some(mut e) = stderr {
            let _ = e.read_to_string(&mut s);
        }
        s
    });
    // bpftrace prints "Attaching N probes..." once the probes are in.
    let stdout = child.0.as_mut().and_then(|c| c.stdout.take());
    let (tx, rx) = std::sync::mpsc::channel();
    if let Some(out) = stdout {
        std::thread::spawn(move || {
            for l in BufReader::new(out).lines() {
                let Ok(l) = l else { break };
                if l.starts_with("Attaching") {
                    let _ = tx.send(());
                }
            }
        });
    }
    if rx.recv_timeout(Duration::from_secs(30)).is_err() {
        child.finish(Duration::ZERO);
        let err = err_reader.join().unwrap_or_default();
        bail!("bpftrace did not attach: {}", last_lines(&err, 3));
    }
    // Let the attach settle (bpftrace prints before the last link is in).
    std::thread::sleep(Duration::from_millis(500));
    let r = harness::run_rr(lab, cfg, &NoPhases);
    // SIGINT so it exits cleanly (prints its maps, which we discard).
    let _ = nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.pid() as i32),
        nix::sys::signal::Signal::SIGINT,
    );
    child.finish(Duration::from_secs(10));
    let _ = err_reader.join();
    r.context("run under bpftrace")
}

// ---------------------------------------------------------------------------------------------
// Parsers.

/// What `sockperf ping-pong` prints, in its units: one-way latency (RTT/2), µs.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Sockperf {
    pub observations: u64,
    pub avg_us: f64,
    pub min_us: f64,
    pub max_us: f64,
    /// (percentile, µs), as printed (25 … 99.999).
    pub percentiles: Vec<(f64, f64)>,
}

impl Sockperf {
    pub fn percentile(&self, q: f64) -> Option<f64> {
        self.percentiles
            .iter()
            .find(|(p, _)| (p - q).abs() < 1e-9)
            .map(|(_, v)| *v)
    }

    /// As round trips: sockperf's latency is half the round trip, so everything doubles.
    pub fn rtt(&self) -> Rtt {
        Rtt {
            p50_us: 2.0 * self.percentile(50.0).unwrap_or(f64::NAN),
            p99_us: 2.0 * self.percentile(99.0).unwrap_or(f64::NAN),
            mean_us: 2.0 * self.avg_us,
        }
    }
}

/// Removes ANSI colour sequences (sockperf colours its summary lines).
fn strip_ansi(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut it = s.chars().peekable();
    while let Some(c) = it.next() {
        if c == '\x1b' {
            if it.peek() == Some(&'[') {
                it.next();
                for c in it.by_ref() {
                    if c.is_ascii_alphabetic() {
                        break;
                    }
                }
            }
            continue;
        }
        out.push(c);
    }
    out
}

/// Parses `sockperf pp` output (stdout and stderr together).
pub fn parse_sockperf(text: &str) -> Result<Sockperf> {
    let text = strip_ansi(text);
    let num = |s: &str| -> Option<f64> { s.trim().parse::<f64>().ok() };
    let mut r = Sockperf {
        observations: 0,
        avg_us: f64::NAN,
        min_us: f64::NAN,
        max_us: f64::NAN,
        percentiles: Vec::new(),
    };
    for line in text.lines() {
        let line = line.trim_start_matches("sockperf:").trim();
        if let Some(rest) = line.strip_prefix("====> avg-latency=") {
            r.avg_us = num(rest.split_whitespace().next().unwrap_or("")).unwrap_or(f64::NAN);
        } else if let Some(rest) = line.strip_prefix("Total ") {
            if let Some(n) = rest.split_whitespace().next().and_then(|n| n.parse().ok()) {
                r.observations = n;
            }
        } else if let Some(rest) = line.strip_prefix("---> percentile ") {
            if let Some((p, v)) = rest.split_once('=')
                && let (Some(p), Some(v)) = (num(p), num(v))
            {
                r.percentiles.push((p, v));
            }
        } else if let Some(rest) = line.strip_prefix("---> <MAX> observation =") {
            r.max_us = num(rest).unwrap_or(f64::NAN);
        } else if let Some(rest) = line.strip_prefix("---> <MIN> observation =") {
            r.min_us = num(rest).unwrap_or(f64::NAN);
        }
    }
    if r.percentile(50.0).is_none() || r.percentile(99.0).is_none() || r.avg_us.is_nan() {
        bail!(
            "no latency percentiles in sockperf's output: {}",
            last_lines(&text, 4)
        );
    }
    Ok(r)
}

/// The sender summary of `iperf3 -c … -J`.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Iperf3 {
    pub bits_per_second: f64,
    pub retransmits: u64,
    pub bytes: u64,
    pub seconds: f64,
    /// end.sum_received.bits_per_second.
    pub received_bits_per_second: f64,
}

pub fn parse_iperf3(json: &str) -> Result<Iperf3> {
    let v: serde_json::Value =
        serde_json::from_str(json).context("iperf3 did not print JSON (-J)")?;
    if let Some(e) = v.get("error").and_then(|e| e.as_str()) {
        bail!("iperf3: {e}");
    }
    let sent = v
        .pointer("/end/sum_sent")
        .context("iperf3 JSON has no end.sum_sent")?;
    let f = |o: &serde_json::Value, k: &str| o.get(k).and_then(|x| x.as_f64());
    Ok(Iperf3 {
        bits_per_second: f(sent, "bits_per_second")
            .context("iperf3 JSON has no end.sum_sent.bits_per_second")?,
        retransmits: sent
            .get("retransmits")
            .and_then(|x| x.as_u64())
            .unwrap_or(0),
        bytes: sent.get("bytes").and_then(|x| x.as_u64()).unwrap_or(0),
        seconds: f(sent, "seconds").unwrap_or(0.0),
        received_bits_per_second: v
            .pointer("/end/sum_received/bits_per_second")
            .and_then(|x| x.as_f64())
            .unwrap_or(f64::NAN),
    })
}

// ---------------------------------------------------------------------------------------------
// Memory.

fn proc_status_kib(field: &str) -> Option<u64> {
    let s = std::fs::read_to_string("/proc/self/status").ok()?;
    s.lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
}

/// `key:\tvalue` lines of an fdinfo file.
fn fdinfo(text: &str) -> BTreeMap<&str, &str> {
    text.lines()
        .filter_map(|l| {
            let (k, v) = l.split_once(':')?;
            Some((k.trim(), v.trim()))
        })
        .collect()
}

/// BPF map types whose values are per CPU.
fn per_cpu_type(t: u32) -> bool {
    // PERCPU_HASH, PERCPU_ARRAY, LRU_PERCPU_HASH, PERCPU_CGROUP_STORAGE
    matches!(t, 5 | 6 | 10 | 21)
}

/// The maps and programs this process holds (only netpath's: it holds no other BPF objects),
/// from `/proc/self/fdinfo`, deduplicated by id.
fn bpf_memory() -> Result<Memory> {
    let ncpu = aya::util::nr_cpus().unwrap_or(1) as u64;
    let mut maps: BTreeMap<u32, MapMem> = BTreeMap::new();
    let mut progs: BTreeMap<u32, u64> = BTreeMap::new();
    for e in std::fs::read_dir("/proc/self/fd")?.flatten() {
        let Ok(target) = std::fs::read_link(e.path()) else {
            continue;
        };
        let target = target.to_string_lossy().into_owned();
        let is_map = target == "anon_inode:bpf-map";
        if !is_map && target != "anon_inode:bpf-prog" {
            continue;
        }
        let path = PathBuf::from("/proc/self/fdinfo").join(e.file_name());
        let Ok(text) = std::fs::read_to_string(&path) else {
            continue;
        };
        let info = fdinfo(&text);
        let get = |k: &str| info.get(k).and_then(|v| v.parse::<u64>().ok());
        let bytes = get("memlock").unwrap_or(0);
        if is_map {
            let Some(id) = get("map_id") else { continue };
            let map_type = get("map_type").unwrap_or(0) as u32;
            let name = aya::maps::MapInfo::from_id(id as u32)
                .ok()
                .and_then(|i| i.name_as_str().map(str::to_string))
                .unwrap_or_default();
            maps.insert(
                id as u32,
                MapMem {
                    name,
                    map_type,
                    per_cpu: per_cpu_type(map_type),
                    max_entries: get("max_entries").unwrap_or(0) as u32,
                    value_size: get("value_size").unwrap_or(0) as u32,
                    bytes,
                },
            );
        } else if let Some(id) = get("prog_id") {
            progs.insert(id as u32, bytes);
        }
    }
    let mut maps: Vec<MapMem> = maps.into_values().collect();
    maps.sort_by_key(|m| std::cmp::Reverse(m.bytes));
    let maps_bytes = maps.iter().map(|m| m.bytes).sum();
    // Per-CPU part: each per-CPU map holds max_entries values (rounded up to 8 bytes) per
    // possible CPU.
    let per_cpu_bytes_each: u64 = maps
        .iter()
        .filter(|m| m.per_cpu)
        .map(|m| u64::from(m.max_entries) * u64::from(m.value_size).next_multiple_of(8))
        .sum();
    let per_cpu_bytes = (per_cpu_bytes_each * ncpu).min(maps_bytes);
    Ok(Memory {
        maps_bytes_at_64_cpus: maps_bytes - per_cpu_bytes + 64 * per_cpu_bytes_each,
        maps,
        maps_bytes,
        per_cpu_bytes,
        per_cpu_bytes_each,
        programs: progs.len(),
        programs_bytes: progs.values().sum(),
        ..Memory::default()
    })
}

// ---------------------------------------------------------------------------------------------
// Small helpers.

fn median(v: impl Iterator<Item = f64>) -> f64 {
    let mut v: Vec<f64> = v.filter(|x| x.is_finite()).collect();
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

fn which(tool: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(tool))
        .find(|p| p.is_file())
}

fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .unwrap_or_default()
        .split_whitespace()
        .take(3)
        .collect::<Vec<_>>()
        .join(" ")
}

fn bpf_stats_enabled() -> bool {
    std::fs::read_to_string("/proc/sys/kernel/bpf_stats_enabled").is_ok_and(|s| s.trim() == "1")
}

/// The source address the client namespace uses towards `to` (route lookup: an unbound UDP
/// socket is connected, which sends nothing).
fn source_addr(client: &Netns, to: SocketAddrV4) -> Result<Ipv4Addr> {
    client.run(|| {
        use nix::sys::socket::{
            AddressFamily, SockFlag, SockType, SockaddrIn, connect, getsockname, socket,
        };
        let fd = socket(
            AddressFamily::Inet,
            SockType::Datagram,
            SockFlag::SOCK_CLOEXEC,
            None,
        )?;
        connect(std::os::fd::AsRawFd::as_raw_fd(&fd), &SockaddrIn::from(to))?;
        let local: SockaddrIn = getsockname(std::os::fd::AsRawFd::as_raw_fd(&fd))?;
        match IpAddr::V4(local.ip()) {
            IpAddr::V4(a) => Ok(a),
            IpAddr::V6(_) => unreachable!(),
        }
    })
}

// ---------------------------------------------------------------------------------------------
// Output.

fn x(r: f64) -> String {
    if r.is_finite() {
        format!("{r:.2}x")
    } else {
        "-".into()
    }
}

fn list(v: impl Iterator<Item = f64>) -> String {
    v.map(|r| format!("{r:.2}")).collect::<Vec<_>>().join(" ")
}

fn kib(b: u64) -> String {
    if b >= 1024 * 1024 {
        format!("{:.1} MiB", b as f64 / 1024.0 / 1024.0)
    } else {
        format!("{:.1} KiB", b as f64 / 1024.0)
    }
}

/// The compact table.
pub fn print(r: &BenchReport) {
    println!(
        "netpath bench: backend {}, kernel {}, {} CPUs online, {} rounds, {} requests per run, {} s per tool run",
        r.backend.name(),
        r.kernel,
        r.online_cpus,
        r.rounds,
        r.requests,
        r.secs
    );
    println!(
        "load average {} at start, {} at end; ratios are medians of per-round ratios (each pair measured back to back)",
        r.loadavg_start, r.loadavg_end
    );
    if r.bpf_stats_enabled_during_rounds {
        println!(
            "warning: kernel.bpf_stats_enabled was 1 during the rounds (someone else enabled BPF statistics): traced figures include its cost"
        );
    }
    println!();
    println!("latency, round trip in µs (sockperf prints one-way latency = RTT/2: doubled here)");
    println!(
        "{:<9} {:<34} {:>8} {:>8} {:>8}   {:>6} {:>6} {:>6}",
        "driver", "", "p50", "p99", "mean", "p50", "p99", "mean"
    );
    for d in &r.drivers {
        let l = &d.latency;
        let row = |name: &str, v: &Rtt, ratio: Option<(&Ratios, &str)>, first: bool| {
            let (a, b, c, what) = match ratio {
                Some((q, w)) => (x(q.p50), x(q.p99), x(q.mean), w),
                None => (String::new(), String::new(), String::new(), ""),
            };
            println!(
                "{:<9} {:<34} {:>8.1} {:>8.1} {:>8.1}   {:>6} {:>6} {:>6} {}",
                if first { d.driver.name() } else { "" },
                name,
                v.p50_us,
                v.p99_us,
                v.mean_us,
                a,
                b,
                c,
                what
            );
        };
        row("sockperf pp --tcp -m 1024", &l.sockperf_median, None, true);
        row(
            "netpath rr, untraced",
            &l.untraced_median,
            Some((&l.netpath_vs_sockperf, "vs sockperf")),
            false,
        );
        row(
            "netpath rr, traced",
            &l.traced_median,
            Some((&l.traced_vs_untraced, "vs untraced")),
            false,
        );
        match (&d.naive_tracer.median, &d.naive_tracer.vs_untraced) {
            (Some(m), Some(q)) => row(
                "rr under naive bpftrace (4 tps)",
                m,
                Some((q, "vs untraced")),
                false,
            ),
            _ => println!(
                "{:<9} {:<34} {}",
                "", "rr under naive bpftrace (4 tps)", d.naive_tracer.status
            ),
        }
        let k = &d.kernel_cost;
        let top: Vec<String> = k
            .programs
            .iter()
            .take(4)
            .map(|p| format!("{} {:.1}×{:.0}", p.program, p.runs_per_rtt, p.avg_ns))
            .collect();
        println!(
            "{:<9} {:<34} {:.0} ns per RTT = {:.0}% of the untraced p50 (traced − untraced p50: {:.0} ns); {:.1} hop events per RTT",
            "",
            "kernel cost of the programs",
            k.ns_per_rtt,
            100.0 * k.share_of_untraced_p50,
            1000.0 * l.traced_minus_untraced_p50_us,
            l.hop_events_per_rtt,
        );
        println!(
            "{:<9} {:<34} {}",
            "",
            "  top programs, runs/RTT × ns",
            top.join(", ")
        );
        println!(
            "{:<9} {:<34} {:.0} ns per run (an empty program on net_dev_queue, same run)",
            "", "  floor", k.floor_ns
        );
        println!(
            "{:<9} {:<34} traced/untraced {}; untraced/sockperf {}",
            "",
            "  per-round p50 ratios",
            list(l.traced_vs_untraced_rounds.iter().map(|q| q.p50)),
            list(l.netpath_vs_sockperf_rounds.iter().map(|q| q.p50)),
        );
    }
    println!();
    println!("throughput, one stream, 128 KiB writes, Gbit/s (sender side)");
    for (i, d) in r.drivers.iter().enumerate() {
        let t = &d.throughput;
        if i == 0 {
            println!(
                "{:<9} {:>8} {:>9} {:>9} {:>9}   {:>10} {:>10} {:>10}  {:>12}",
                "driver",
                "iperf3",
                "untraced",
                "attached",
                "traced",
                "np/iperf3",
                "att/untr",
                "trc/untr",
                "traced hops"
            );
        }
        println!(
            "{:<9} {:>8.2} {:>9.2} {:>9.2} {:>9.2}   {:>10} {:>10} {:>10}  {:>12.0}{}",
            d.driver.name(),
            t.iperf3_median_gbit,
            t.untraced_median_gbit,
            t.attached_median_gbit,
            t.traced_median_gbit,
            x(t.netpath_vs_iperf3),
            x(t.attached_vs_untraced),
            x(t.traced_vs_untraced),
            t.traced_hop_events,
            if t.traced_threads_found {
                ""
            } else {
                "  (bulk threads not found for tracing in some round)"
            }
        );
    }
    for d in &r.drivers {
        let t = &d.throughput;
        println!(
            "{:<9} per round: np/iperf3 {}; att/untr {}; trc/untr {}",
            d.driver.name(),
            list(t.netpath_vs_iperf3_rounds.iter().copied()),
            list(t.attached_vs_untraced_rounds.iter().copied()),
            list(t.traced_vs_untraced_rounds.iter().copied()),
        );
    }
    println!(
        "(attached: probes in, no thread traced, i.e. netpath's cost to traffic it does not follow; traced: the bulk threads traced too)"
    );
    println!();
    let m = &r.memory;
    println!(
        "memory: peak RSS {} (RSS {} at start, {} before loading the eBPF object, {} after)",
        kib(m.peak_rss_kib * 1024),
        kib(m.rss_at_start_kib * 1024),
        kib(m.rss_before_load_kib * 1024),
        kib(m.rss_after_load_kib * 1024)
    );
    println!(
        "        BPF maps {} in {} maps, of which per-CPU {} ({} per possible CPU × {}); at 64 CPUs {}; {} programs {}",
        kib(m.maps_bytes),
        m.maps.len(),
        kib(m.per_cpu_bytes),
        kib(m.per_cpu_bytes_each),
        r.possible_cpus,
        kib(m.maps_bytes_at_64_cpus),
        m.programs,
        kib(m.programs_bytes)
    );
    let big: Vec<String> = m
        .maps
        .iter()
        .take(5)
        .map(|mm| format!("{} {}", mm.name, kib(mm.bytes)))
        .collect();
    println!("        largest maps: {}", big.join(", "));
    println!("bench took {:.0} s", r.elapsed_s);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `sockperf pp --tcp -i 127.0.0.1 -p 12345 -m 1024 -t 2`, sockperf 3.7 (Debian 12),
    /// stdout and stderr as captured, colour codes included.
    const SOCKPERF_OUT: &str = include_str!("../tests/data/sockperf-3.7-pp-tcp.txt");

    /// `iperf3 -c 127.0.0.1 -B 127.0.0.1 -p 12346 -t 1 -J`, iperf 3.12 (Debian 12).
    const IPERF3_JSON: &str = include_str!("../tests/data/iperf3-3.12-client.json");

    #[test]
    fn parses_sockperf_ping_pong() {
        let s = parse_sockperf(SOCKPERF_OUT).unwrap();
        assert_eq!(s.observations, 206658);
        assert_eq!(s.avg_us, 3.729);
        assert_eq!(s.max_us, 2586.734);
        assert_eq!(s.min_us, 2.097);
        assert_eq!(s.percentiles.len(), 8);
        assert_eq!(s.percentile(50.0), Some(2.383));
        assert_eq!(s.percentile(99.0), Some(5.565));
        assert_eq!(s.percentile(99.9), Some(54.708));
        // One-way latency doubles into round trips.
        let r = s.rtt();
        assert_eq!(r.p50_us, 4.766);
        assert_eq!(r.p99_us, 11.13);
        assert_eq!(r.mean_us, 7.458);
    }

    #[test]
    fn sockperf_without_results_is_an_error() {
        let e = parse_sockperf(
            "sockperf: ERROR: Failed to connect to 10.1.2.3:11111 (Connection refused)\n",
        )
        .unwrap_err();
        assert!(e.to_string().contains("Connection refused"), "{e}");
    }

    #[test]
    fn parses_iperf3_json() {
        let r = parse_iperf3(IPERF3_JSON).unwrap();
        assert_eq!(r.bits_per_second, 20820714242.577553);
        assert_eq!(r.retransmits, 0);
        assert_eq!(r.bytes, 2602958848);
        assert_eq!(r.seconds, 1.000142);
        assert_eq!(r.received_bits_per_second, 20775980130.51096);
    }

    #[test]
    fn iperf3_error_json_is_an_error() {
        let e = parse_iperf3(
            "{\n\t\"start\":\t{},\n\t\"intervals\":\t[],\n\t\"end\":\t{},\n\t\"error\":\t\"unable to connect to server: Connection refused\"\n}\n",
        )
        .unwrap_err();
        assert!(e.to_string().contains("unable to connect"), "{e}");
        assert!(parse_iperf3("iperf3: error - unable to connect").is_err());
    }

    #[test]
    fn finds_listening_sockets() {
        let tcp = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0300A80A:2B67 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 123 1 0 100 0 0 10 0
   1: 0300A80A:2B67 0200A80A:9C40 01 00000000:00000000 00:00000000 00000000     0        0 124 1 0 100 0 0 10 0
";
        assert!(listening_on(tcp, 11111));
        assert!(!listening_on(tcp, 11112));
        assert!(!listening_on(tcp, 40000));
    }

    #[test]
    fn fdinfo_and_medians() {
        let f = fdinfo("pos:\t0\nmap_type:\t6\nmemlock:\t4096\nmap_id:\t17\n");
        assert_eq!(f["map_type"], "6");
        assert_eq!(f["memlock"], "4096");
        assert!(per_cpu_type(6) && !per_cpu_type(1));
        assert_eq!(median([3.0, 1.0, 2.0].into_iter()), 2.0);
        assert_eq!(median([4.0, 1.0, 2.0, 3.0].into_iter()), 2.5);
        assert!(median(std::iter::empty()).is_nan());
        assert_eq!(strip_ansi("a\x1b[2;35mb\x1b[0mc"), "abc");
    }
}
