//! `netpath serve`: the probes stay attached and follow the traffic of running containers
//! (re-resolved every few seconds, so containers that start are picked up and those that stop
//! dropped, with their series), and Prometheus scrapes the per-hop histograms over HTTP.
use std::collections::BTreeMap;
use std::io::{BufRead as _, BufReader, Write as _};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result};
use bollard::query_parameters::InspectNetworkOptions;
use netpath_common::{Hop, SkbState, counter};

use crate::docker::Engine;
use crate::path::Device;
use crate::probe::backend::Backend;
use crate::probe::tracer::{Tracer, TracerOptions};
use crate::record;
use crate::render::prom::{
    self, DropLabels, HopLabels, Metrics, NameLabel, Owner, PathLabels, ProgLabel,
};
use crate::runtime::select::{Unit, driver_of, units};
use crate::runtime::{Node, Runtime};

pub use crate::runtime::select::Selection;

pub struct ServeOptions {
    pub listen: SocketAddr,
    pub select: Selection,
    /// How often the running containers are listed again.
    pub rescan: Duration,
}

/// A followed container (or pod): whose it is (the `namespace`, `pod` and `container`
/// labels), who runs it, its network driver and devices.
struct Followed {
    owner: Owner,
    runtime: Runtime,
    ids: Vec<String>,
    driver: String,
    netns_inum: u32,
    devices: Vec<Device>,
}

pub fn run(backend: Backend, node: &mut Node, opts: &ServeOptions) -> Result<()> {
    // A port in use is said before any program is loaded.
    let listener = TcpListener::bind(opts.listen).with_context(|| {
        format!(
            "cannot listen on {}: pick a free address with --listen",
            opts.listen
        )
    })?;
    let mut tracer = Tracer::load(
        backend,
        &TracerOptions {
            sample_every: 1,
            trace_any: true,
            prog_stats: true,
            ..TracerOptions::default()
        },
    )?;
    let metrics = Arc::new(Mutex::new(Metrics::new()));
    let ready = Arc::new(std::sync::atomic::AtomicBool::new(false));
    spawn_http(listener, metrics.clone(), ready.clone())?;
    eprintln!(
        "netpath serve: metrics on http://{}/metrics (backend {}); containers from {}",
        opts.listen,
        backend.name(),
        node.sources()
    );
    let mut followed: Vec<Followed> = Vec::new();
    let mut last_scan: Option<Instant> = None;
    let mut down: Vec<Runtime> = Vec::new();
    loop {
        if last_scan.is_none_or(|t| t.elapsed() >= opts.rescan) {
            last_scan = Some(Instant::now());
            let (now, failed) = scan(node, &opts.select);
            say_down_or_up(&mut down, &failed);
            // A runtime restarting: keep what it had followed and try again.
            let now = keep_followed(&mut followed, now, &down);
            // Every other device of the node, for the kinds of the hops a journey crosses
            // beyond the followed containers (to a client in another container).
            let known = crate::runtime::node_devices(node);
            let mut m = metrics.lock().unwrap_or_else(|e| e.into_inner());
            follow(&mut tracer, &mut m, &mut followed, now, &known)?;
            ready.store(true, std::sync::atomic::Ordering::SeqCst);
        }
        let mut m = metrics.lock().unwrap_or_else(|e| e.into_inner());
        record(&mut m, &mut tracer, &followed)?;
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
    tracer.set_devices_known(&devices, known)?;
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
fn record(m: &mut Metrics, tracer: &mut Tracer, followed: &[Followed]) -> Result<()> {
    for s in &tracer.drain_samples() {
        observe(m, s, followed);
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

fn device_set(f: &[Followed]) -> Vec<Device> {
    let mut v: Vec<Device> = Vec::new();
    for d in f.iter().flat_map(|f| &f.devices) {
        if !v
            .iter()
            .any(|x| x.netns_inum == d.netns_inum && x.ifindex == d.ifindex)
        {
            v.push(d.clone());
        }
    }
    v.sort_by_key(|d| (d.netns_inum, d.ifindex));
    v
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

fn followed(node: &mut Node, u: Unit) -> Followed {
    let net = &u.net;
    let driver = match u.runtime {
        Runtime::Docker if net.host_network => "host".to_string(),
        Runtime::Docker => node
            .engine()
            .ok()
            .and_then(|e| docker_driver(e, &net.networks.first()?.network_id))
            .unwrap_or_else(|| net.network_mode.clone()),
        _ => driver_of(net),
    };
    Followed {
        owner: Owner {
            namespace: u.namespace,
            pod: u.pod,
            container: u.container,
        },
        runtime: u.runtime,
        ids: u.ids,
        driver,
        netns_inum: net.netns_inum,
        devices: net.devices(),
    }
}

/// The driver of a Docker network.
fn docker_driver(engine: &Engine, network_id: &str) -> Option<String> {
    engine
        .block_on(
            engine
                .docker()
                .inspect_network(network_id, None::<InspectNetworkOptions>),
        )
        .ok()?
        .driver
}

/// The container a journey belongs to: the first followed container whose namespace it
/// touched, else the owner of the first followed device it crossed.
fn owner<'a>(s: &SkbState, followed: &'a [Followed]) -> Option<&'a Followed> {
    let n = (s.npoints as usize).min(s.points.len());
    let pts = &s.points[..n];
    pts.iter()
        .find_map(|p| followed.iter().find(|f| f.netns_inum == p.netns))
        .or_else(|| {
            pts.iter().find_map(|p| {
                followed.iter().find(|f| {
                    f.devices
                        .iter()
                        .any(|d| d.netns_inum == p.netns && d.ifindex == p.ifindex)
                })
            })
        })
}

fn observe(m: &mut Metrics, s: &SkbState, followed: &[Followed]) {
    let Some(f) = owner(s, followed) else {
        return;
    };
    let t = record::timeline(s, &f.devices);
    let direction = t.dir.to_string();
    // Consecutive segments of one hop are one crossing (the hop model merges them).
    let mut crossings: Vec<(&str, f64)> = Vec::new();
    for p in t.points.iter().skip(1) {
        match crossings.last_mut() {
            Some((h, us)) if *h == p.hop => *us += p.since_prev_us,
            _ => crossings.push((p.hop, p.since_prev_us)),
        }
    }
    for (hop, us) in crossings {
        if hop == Hop::OneWay.name() {
            continue;
        }
        m.observe_hop(
            HopLabels {
                hop: hop.to_string(),
                direction: direction.clone(),
                driver: f.driver.clone(),
                owner: f.owner.clone(),
            },
            us / 1e6,
        );
    }
    m.observe_path(
        PathLabels {
            direction,
            driver: f.driver.clone(),
            owner: f.owner.clone(),
        },
        t.total_us / 1e6,
        t.rx_passes,
        t.softirq_runs,
    );
}

/// The kernel's cumulative counters (lost events, journeys) and bpf_stats, into counters.
fn update_counters(m: &Metrics, tracer: &Tracer) -> Result<()> {
    let snap = tracer.snapshot()?;
    for &c in &record::LOST {
        let name = counter::NAMES[c as usize].to_string();
        prom::raise_to(
            &m.lost.get_or_create(&NameLabel { name }),
            snap.counters[c as usize],
        );
    }
    for c in [counter::STARTED, counter::COMPLETED, counter::SAMPLES] {
        let name = counter::NAMES[c as usize].to_string();
        prom::raise_to(
            &m.journeys.get_or_create(&NameLabel { name }),
            snap.counters[c as usize],
        );
    }
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
    Ok(())
}

/// GET /metrics (the text format), GET /ready (200 once the first container scan is done,
/// for a readiness probe); anything else 404. One short request per connection.
fn spawn_http(
    listener: TcpListener,
    metrics: Arc<Mutex<Metrics>>,
    ready: Arc<std::sync::atomic::AtomicBool>,
) -> Result<()> {
    std::thread::Builder::new()
        .name("np-serve-http".into())
        .spawn(move || {
            for conn in listener.incoming().flatten() {
                let _ = conn.set_read_timeout(Some(Duration::from_secs(5)));
                if let Err(e) = answer(conn, &metrics, &ready) {
                    log::debug!("http: {e}");
                }
            }
        })?;
    Ok(())
}

fn answer(
    conn: TcpStream,
    metrics: &Mutex<Metrics>,
    ready: &std::sync::atomic::AtomicBool,
) -> std::io::Result<()> {
    let mut reader = BufReader::new(conn.try_clone()?);
    let mut line = String::new();
    reader.read_line(&mut line)?;
    // Of the headers only Accept matters: Prometheus asks for OpenMetrics.
    let mut h = String::new();
    let mut openmetrics = false;
    while reader.read_line(&mut h)? > 2 {
        let lower = h.to_ascii_lowercase();
        openmetrics |=
            lower.starts_with("accept:") && lower.contains("application/openmetrics-text");
        h.clear();
    }
    let path = line.split_whitespace().nth(1).unwrap_or("");
    let (status, ctype, body) = match path.split('?').next() {
        Some("/metrics") => {
            let m = metrics.lock().unwrap_or_else(|e| e.into_inner());
            if openmetrics {
                let ct = "application/openmetrics-text; version=1.0.0; charset=utf-8";
                ("200 OK", ct, m.encode())
            } else {
                let ct = "text/plain; version=0.0.4; charset=utf-8";
                ("200 OK", ct, m.encode_classic())
            }
        }
        Some("/ready") if ready.load(std::sync::atomic::Ordering::SeqCst) => {
            ("200 OK", "text/plain", "ready\n".to_string())
        }
        Some("/ready") => ("503 Service Unavailable", "text/plain", "starting\n".into()),
        _ => ("404 Not Found", "text/plain", "see /metrics\n".into()),
    };
    let mut conn = conn;
    write!(
        conn,
        "HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )?;
    conn.flush()
}
