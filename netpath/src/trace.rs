//! `netpath trace`: per-packet timelines, one line per point with the time since the previous
//! one, the device, netns and the hop the segment belongs to, like pwru but with hops. Filters
//! are applied in the kernel when a packet is first seen.
use std::net::Ipv4Addr;

use anyhow::{Context as _, Result, bail};
use netpath_common::devrole;
use serde::Serialize;

use crate::{
    driver::Driver,
    harness::{self, Proto, RrConfig, RrLoad, WaitMode, proto::L4},
    lab,
    path::{Device, NetPath},
    probe::backend::Backend,
    probe::tracer::{Filter, Tracer, TracerOptions},
    record::{self, Timeline},
};

#[derive(Clone)]
pub struct TraceOptions {
    pub driver: Driver,
    /// Complete timelines to print.
    pub count: usize,
    pub proto: Option<L4>,
    pub host: Option<Ipv4Addr>,
    pub port: Option<u16>,
    /// Lab netns (full name or role suffix such as `cli`, `srv`, `node`) or a netns file path
    /// such as `/proc/<pid>/ns/net`.
    pub netns: Option<String>,
    pub iface: Option<String>,
    /// Netfilter parts in the timelines (`--parts`).
    pub parts: bool,
}

#[derive(Serialize, schemars::JsonSchema)]
pub struct TraceOutput {
    pub driver: String,
    /// What netpath's harness sent (none when tracing traffic it did not generate).
    pub proto: Option<Proto>,
    pub backend: &'static str,
    pub timelines: Vec<Timeline>,
    #[schemars(with = "crate::record::schema_parts::Lost")]
    pub lost: std::collections::BTreeMap<&'static str, u64>,
    /// Losses this kernel does not count (see `Tracer::uncounted`).
    pub uncounted: Vec<&'static str>,
    /// Raw tracepoints that did not attach, with why: their points are absent from timelines.
    pub missing_tracepoints: Vec<String>,
    /// With `--container`: the containers followed, who runs each and its pod.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub containers: Vec<crate::runtime::Container>,
}

/// Resolves the `--netns`/`--iface` filters against the lab.
fn resolve(lab: &NetPath, o: &TraceOptions) -> Result<(Option<u32>, Option<u32>)> {
    let netns = match &o.netns {
        None => None,
        Some(n) if n.starts_with('/') => Some(crate::sys::netns::ns_inum(std::path::Path::new(n))?),
        Some(n) => {
            let ns = lab
                .namespaces()
                .into_iter()
                .find(|ns| &ns.name == n || ns.name.ends_with(&format!("-{n}")))
                .with_context(|| {
                    let names: Vec<String> = lab.netns_names();
                    format!("no lab netns {n:?}: choose one of {}", names.join(", "))
                })?;
            Some(ns.inum)
        }
    };
    let ifindex = match &o.iface {
        None => None,
        Some(i) => {
            let devs: Vec<_> = lab
                .devices
                .iter()
                .filter(|d| &d.name == i && netns.is_none_or(|n| d.netns_inum == n))
                .collect();
            match devs.as_slice() {
                [d] => Some(d.ifindex),
                [] => bail!("no lab device {i:?} (in that netns)"),
                _ => bail!("device name {i:?} exists in several lab namespaces: add --netns"),
            }
        }
    };
    Ok((netns, ifindex))
}

/// What the harness sends under `trace -d DRIVER --proto P`: P is also the filter.
fn harness_proto(p: Option<L4>) -> Result<Proto> {
    match p {
        None => Ok(Proto::Tcp),
        Some(L4::Harness(p)) => Ok(p),
        Some(L4::Number(n)) => bail!(
            "--filter-proto {n}: the lab's harness sends tcp, udp or icmp (--proto); a protocol number filters only traffic netpath does not generate (with --container)"
        ),
    }
}

pub fn run(backend: Backend, o: &TraceOptions) -> Result<TraceOutput> {
    let harness_proto = harness_proto(o.proto)?;
    harness::supported::check(o.driver, harness_proto)?;
    harness::supported::check_sizes(harness_proto, 1024, 1024)?;
    let lab = lab::build(o.driver).with_context(|| format!("building the {} lab", o.driver))?;
    let result = run_on(backend, &lab, o);
    let torn = lab.teardown();
    let out = result?;
    torn?;
    Ok(out)
}

/// `run` on a lab built already (`o.driver` names it): its harness traffic, traced.
pub fn run_on(backend: Backend, lab: &NetPath, o: &TraceOptions) -> Result<TraceOutput> {
    let proto = o.proto.map(L4::number);
    let harness_proto = harness_proto(o.proto)?;
    let (netns, ifindex) = resolve(lab, o)?;
    let mut tracer = Tracer::load(
        backend,
        &TracerOptions {
            sample_every: 1,
            detail: true,
            filter: Filter {
                port: o.port,
                also_port: None,
                also_addr: None,
                addr: o.host,
                proto,
                netns,
                ifindex,
            },
            proto: harness_proto,
            parts: o.parts,
            ..TracerOptions::default()
        },
    )?;
    tracer.set_devices(&lab.devices)?;
    tracer.attach()?;
    let placement = o.parts.then(|| link_parts(&mut tracer, lab)).transpose()?;
    // Each request yields two journeys (request and response); a filter may keep either.
    let rr = RrConfig {
        load: RrLoad {
            requests: o.count.max(1) as u64,
            warmup: 10,
            ..RrLoad::default()
        },
        proto: harness_proto,
        // Blocking: the timelines show the receiver's wakeup, as an application has it.
        wait: WaitMode::Block,
        ..RrConfig::default()
    };
    let phases = tracer.tids.clone();
    phases.set_relays(lab.proxy_pid.into_iter().collect());
    let ran = harness::run_rr(lab, &rr, phases.as_ref());
    tracer.unlink_parts();
    ran?;
    tracer.detach()?;
    let samples = tracer.drain_samples();
    let snap = tracer.snapshot()?;
    let mut timelines: Vec<Timeline> = samples
        .iter()
        .take(o.count)
        .map(|s| record::timeline(s, &lab.devices))
        .collect();
    if let Some(p) = &placement {
        record::parts::annotate(&mut timelines, p);
    }
    let lost = crate::record::lost_counters(&snap);
    Ok(TraceOutput {
        driver: o.driver.to_string(),
        proto: Some(harness_proto),
        backend: backend.name(),
        timelines,
        lost,
        uncounted: tracer.uncounted.clone(),
        missing_tracepoints: tracer.missing.clone(),
        containers: Vec::new(),
    })
}

/// `--parts`: boundaries placed from the lab's rulesets and linked for the run.
fn link_parts(tracer: &mut Tracer, lab: &NetPath) -> Result<crate::path::parts::Placement> {
    let placement = crate::path::parts::of_path(lab)?;
    tracer.link_parts(&placement)?;
    Ok(placement)
}

/// How often passive tracing lists the node's devices again, so a container that starts
/// meanwhile has its devices named.
const RESCAN: std::time::Duration = std::time::Duration::from_secs(2);

/// Traces whatever crosses `devices` (traffic netpath does not generate, e.g. between
/// containers it did not start) until `count` timelines arrived or `timeout` passed. Journeys
/// start at the first watched device and end when the application's receive consumed them
/// (on kernels without `sk_data_ready`, at the copy to the reader). `known` lists every other
/// device of the node (at the start and every [`RESCAN`]): their kinds name the hops a journey
/// crosses beyond the watched devices, their names its points.
#[allow(clippy::too_many_arguments)]
pub fn run_passive(
    backend: Backend,
    label: &str,
    devices: &[(Device, u32)],
    filter: Filter,
    relays: &[u32],
    count: usize,
    timeout: std::time::Duration,
    known: &mut dyn FnMut() -> Vec<Device>,
) -> Result<TraceOutput> {
    let mut tracer = Tracer::load(
        backend,
        &TracerOptions {
            sample_every: 1,
            detail: true,
            filter,
            trace_any: true,
            ..TracerOptions::default()
        },
    )?;
    let watched: Vec<Device> = devices.iter().map(|(d, _)| d.clone()).collect();
    let mut names = crate::runtime::with_known(&watched, &known());
    tracer.set_devices_with_roles(devices, &names)?;
    tracer.attach()?;
    // docker-proxy of a published port: its receive continues a journey as its next send.
    tracer.tids.set_relays(relays.to_vec());
    tracer.tids.start_relays()?;
    // Journeys start only now, every program attached: none misses a point it crossed.
    tracer.tids.arm(true)?;
    let deadline = std::time::Instant::now() + timeout;
    let mut listed = std::time::Instant::now();
    let mut samples = Vec::new();
    while samples.len() < count && std::time::Instant::now() < deadline {
        samples.extend(tracer.drain_samples());
        if listed.elapsed() >= RESCAN {
            names = crate::runtime::with_known(&watched, &known());
            tracer.set_devices_with_roles(devices, &names)?;
            listed = std::time::Instant::now();
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    tracer.tids.arm(false)?;
    samples.extend(tracer.drain_samples());
    tracer.detach()?;
    let snap = tracer.snapshot()?;
    let lost = crate::record::lost_counters(&snap);
    Ok(TraceOutput {
        driver: label.to_string(),
        proto: None,
        backend: backend.name(),
        timelines: samples
            .iter()
            .take(count)
            .map(|s| record::timeline(s, &names))
            .collect(),
        lost,
        uncounted: tracer.uncounted.clone(),
        missing_tracepoints: tracer.missing.clone(),
        containers: Vec::new(),
    })
}

/// `trace --container`: the traffic of running containers (Docker's, containerd's, pods'), on
/// their interfaces and host-side peers (and, on Docker, a published port's loopback leg and
/// docker-proxy with `--port`). `text`: the containers and the published legs found are said
/// first.
pub fn run_containers(
    backend: Backend,
    names: &[String],
    o: &TraceOptions,
    timeout: std::time::Duration,
    text: bool,
) -> Result<TraceOutput> {
    let mut node = crate::runtime::Node::connect()?;
    let mut devices = Vec::new();
    let mut published = Vec::new();
    let mut records = Vec::new();
    for c in names {
        let r = node.resolve(c)?;
        let net = r.net;
        if net.networks.iter().all(|n| n.ip.is_none()) && !net.host_network {
            bail!(
                "container {c} is on no network (--network none?): nothing of its \
                 traffic leaves it; trace a container on a bridge, overlay or macvlan network"
            );
        }
        let leg = match o.port {
            Some(p) if r.record.runtime == crate::runtime::Runtime::Docker => {
                crate::docker::published_leg(node.engine()?, &net, p)?
            }
            _ => None,
        };
        records.push(r.record);
        // Each device's role: a journey starts where a packet enters or leaves the container
        // (as serve's), so one already on its way when the programs were armed is not shown
        // cut short. A host-network container and a published port's loopback leg have no
        // inside and outside: there any point starts one.
        let own = net.devices().into_iter().map(|d| {
            let r = if net.host_network {
                devrole::ANY
            } else {
                net.role(&d)
            };
            (d, r)
        });
        let host_lo = leg.as_ref().map(|l| (l.host_lo.clone(), devrole::ANY));
        devices.extend(own.chain(host_lo));
        published.extend(leg);
    }
    if text {
        for l in &published {
            println!("{}", l.describe());
        }
        // Who runs a container and its pod, where Docker's name alone does not say it.
        for r in &records {
            if r.runtime != crate::runtime::Runtime::Docker || r.pod.is_some() {
                println!("following {}", r.describe());
            }
        }
    }
    let devices = crate::probe::tracer::watched_once(devices);
    let relays: Vec<u32> = published.iter().flat_map(|l| l.relay_pids()).collect();
    let filter = Filter {
        port: o.port,
        also_port: published.first().map(|l| l.container_port),
        also_addr: published.first().and_then(|l| l.gateway),
        addr: o.host,
        proto: o.proto.map(L4::number),
        ..Default::default()
    };
    let mut out = run_passive(
        backend,
        &names.join(","),
        &devices,
        filter,
        &relays,
        o.count,
        timeout,
        &mut || crate::runtime::node_devices(&mut node),
    )?;
    out.containers = records;
    Ok(out)
}
