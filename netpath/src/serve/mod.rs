//! `netpath serve`: the probes stay attached and follow the traffic of running containers
//! (re-resolved every few seconds, so containers that start are picked up and those that stop
//! dropped, with their series), and Prometheus scrapes the per-hop histograms over HTTP
//! (`http.rs`). One journey in `--sample` is followed (`follow.rs` turns each into series);
//! the others cost the kernel a device lookup and a count.
use std::collections::BTreeMap;
use std::net::{SocketAddr, TcpListener};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result};
use netpath_common::counter;

mod follow;
mod http;

use crate::path::Device;
use crate::probe::backend::Backend;
use crate::probe::tracer::{Tracer, TracerOptions};
use crate::record;
use crate::render::prom::{self, DropLabels, Metrics, NameLabel, ProgLabel};
use crate::runtime::select::units;
use crate::runtime::{Node, Runtime};
use follow::{Followed, Peers, device_set, followed, observe};

pub use crate::runtime::select::Selection;

/// Journeys `serve` follows by default: one in this many (`probe::DEFAULT_SAMPLE`).
pub use crate::probe::DEFAULT_SAMPLE;

pub struct ServeOptions {
    pub listen: SocketAddr,
    pub select: Selection,
    /// How often the running containers are listed again.
    pub rescan: Duration,
    /// Follow one journey in this many (1: all).
    pub sample: u32,
    /// Have the kernel time every BPF program run (`bpf_stats`) for the program cost metrics:
    /// two clock reads more per run of every program on the machine.
    pub program_stats: bool,
    /// The full profile: also the hooks that name no hop (`probes::light_needs`), for the
    /// packets' softirq runs (`netpath_softirq_runs`). Default: light.
    pub full: bool,
}

pub fn run(backend: Backend, node: &mut Node, opts: &ServeOptions) -> Result<()> {
    // A port in use is said before any program is loaded.
    let listener = TcpListener::bind(opts.listen).with_context(|| {
        format!(
            "cannot listen on {}: pick a free address with --listen",
            opts.listen
        )
    })?;
    // No thread of its own is followed: journeys start on the devices and end at the
    // application's read (at the socket's wakeup when one cannot wait there), and the
    // programs only traced threads need stay detached. Its own time is not taken out of the
    // series, so it is not measured.
    let mut tracer = Tracer::load(
        backend,
        &TracerOptions {
            sample_every: opts.sample.max(1),
            trace_any: true,
            prog_stats: opts.program_stats,
            own_every: 0,
            threads: false,
            light: !opts.full,
            ..TracerOptions::default()
        },
    )?;
    let mut m = Metrics::new();
    m.softirq_runs = opts.full;
    let metrics = Arc::new(Mutex::new(m));
    let ready = Arc::new(std::sync::atomic::AtomicBool::new(false));
    http::spawn(listener, metrics.clone(), ready.clone())?;
    eprintln!(
        "netpath serve: metrics on http://{}/metrics (backend {}, {} profile, one journey in {} followed); containers from {}",
        opts.listen,
        backend.name(),
        if opts.full { "full" } else { "light" },
        opts.sample.max(1),
        node.sources()
    );
    let mut followed: Vec<Followed> = Vec::new();
    let mut peers = Peers::default();
    let mut last_scan: Option<Instant> = None;
    let mut down: Vec<Runtime> = Vec::new();
    loop {
        if last_scan.is_none_or(|t| t.elapsed() >= opts.rescan) {
            last_scan = Some(Instant::now());
            let (now, failed) = scan(node, &opts.select);
            say_down_or_up(&mut down, &failed);
            // A runtime restarting: keep what it had followed and try again.
            let now = keep_followed(&mut followed, now, &down);
            peers = Peers::read(&now);
            // Every other device of the node, for the kinds of the hops a journey crosses
            // beyond the followed containers (to a client in another container).
            let known = crate::runtime::node_devices(node);
            let mut m = metrics.lock().unwrap_or_else(|e| e.into_inner());
            follow(&mut tracer, &mut m, &mut followed, now, &known)?;
            ready.store(true, std::sync::atomic::Ordering::SeqCst);
        }
        let mut m = metrics.lock().unwrap_or_else(|e| e.into_inner());
        record(&mut m, &mut tracer, &followed, &peers)?;
        if opts.program_stats {
            program_costs(&m, &tracer);
        }
        drop(m);
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The containers a scan found become the followed set: series of those gone are dropped,
/// the programs follow the new device set and know the kinds of the node's other devices.
fn follow(
    tracer: &mut Tracer,
    m: &mut Metrics,
    followed: &mut Vec<Followed>,
    now: Vec<Followed>,
    known: &[Device],
) -> Result<()> {
    for gone in m.containers_with_series() {
        if !now.iter().any(|f| f.owner == gone) {
            m.forget_container(&gone);
        }
    }
    *followed = now;
    let devices = device_set(followed);
    tracer.set_devices_with_roles(&devices, known)?;
    if !tracer.attached() {
        tracer.attach()?;
        // Journeys start only now, every program attached: none misses a point it crossed.
        tracer.tids.arm(true)?;
    }
    m.containers.set(followed.len() as i64);
    m.devices.set(devices.len() as i64);
    Ok(())
}

/// What the programs saw since the last call, into the metrics.
fn record(
    m: &mut Metrics,
    tracer: &mut Tracer,
    followed: &[Followed],
    peers: &Peers,
) -> Result<()> {
    for s in &tracer.drain_samples() {
        observe(m, s, followed, peers);
    }
    for d in &tracer.drain_drops() {
        let hop = netpath_common::hop::drop_hop(d.last_point, d.last_kind);
        let reason = tracer
            .drop_reasons
            .get(&d.reason)
            .cloned()
            .unwrap_or_else(|| d.reason.to_string());
        m.drops
            .get_or_create(&DropLabels {
                reason,
                hop: hop.name().to_string(),
            })
            .inc();
    }
    update_counters(m, tracer)
}

/// The running containers the selection names, resolved to their devices, and the runtimes
/// that did not answer (with why).
fn scan(node: &mut Node, sel: &Selection) -> (Vec<Followed>, Vec<(Runtime, String)>) {
    let scan = node.scan();
    let units = units(node, &scan, sel);
    let now = units.into_iter().map(|u| followed(node, u)).collect();
    (now, scan.failed)
}

/// Says once that a runtime stopped answering, and once that it answers again.
fn say_down_or_up(down: &mut Vec<Runtime>, failed: &[(Runtime, String)]) {
    for (r, e) in failed {
        if !down.contains(r) {
            down.push(*r);
            log::warn!("{e}; keeping what is followed and retrying");
        }
    }
    down.retain(|r| {
        let still = failed.iter().any(|(f, _)| f == r);
        if !still {
            match r {
                Runtime::Docker => log::warn!("the Docker daemon answers again"),
                _ => log::warn!("{} answers again", r.name()),
            }
        }
        still
    });
}

/// `now` and, of what was followed, what runtimes that are `down` had named (unless `now`
/// has it under another name already).
fn keep_followed(
    followed: &mut Vec<Followed>,
    mut now: Vec<Followed>,
    down: &[Runtime],
) -> Vec<Followed> {
    for f in std::mem::take(followed) {
        let again = now
            .iter()
            .any(|n| n.netns_inum == f.netns_inum || n.ids.iter().any(|i| f.ids.contains(i)));
        if down.contains(&f.runtime) && !again {
            now.push(f);
        }
    }
    now
}

/// The kernel's cumulative counters (lost events, journeys) and bpf_stats, into counters.
fn update_counters(m: &Metrics, tracer: &Tracer) -> Result<()> {
    // The counters alone: the hop histograms (a per-CPU read of every slot) serve does not
    // export, its series come from the sampled timelines.
    let counters = tracer.counters()?;
    for &c in &record::LOST {
        let name = counter::NAMES[c as usize].to_string();
        prom::raise_to(
            &m.lost.get_or_create(&NameLabel { name }),
            counters[c as usize],
        );
    }
    for c in [counter::STARTED, counter::COMPLETED, counter::SAMPLES] {
        let name = counter::NAMES[c as usize].to_string();
        prom::raise_to(
            &m.journeys.get_or_create(&NameLabel { name }),
            counters[c as usize],
        );
    }
    Ok(())
}

/// bpf_stats' cumulative run counts and times per program, into counters.
fn program_costs(m: &Metrics, tracer: &Tracer) {
    let mut by_prog: BTreeMap<String, (u64, u64)> = BTreeMap::new();
    for (program, runs, ns) in tracer.prog_costs() {
        let e = by_prog.entry(program).or_default();
        e.0 += runs;
        e.1 += ns;
    }
    for (program, (runs, ns)) in by_prog {
        let l = ProgLabel { program };
        prom::raise_to(&m.prog_runs.get_or_create(&l), runs);
        let secs = m.prog_seconds.get_or_create(&l);
        let total = ns as f64 / 1e9;
        if total > secs.get() {
            secs.inc_by(total - secs.get());
        }
    }
}
