//! `netpath compare`: per driver, build the lab, run the harness without and then with the
//! probes, and report the per-hop attribution.
use anyhow::{Context as _, Result};

pub use crate::measure::interleave::CompareOptions;
use crate::{
    driver::Driver,
    harness, lab,
    lab::netem::{self, WireDelay},
    path::NetPath,
    probe::backend::Backend,
    probe::tracer::Tracer,
    record::{DriverReport, Sink},
};

pub fn run_driver(
    tracer: &mut Tracer,
    driver: Driver,
    opts: &CompareOptions,
) -> Result<DriverReport> {
    let (lab, wire) = build_lab(driver, opts)?;
    let result = measure(tracer, &lab, opts);
    let torn = lab.teardown();
    let mut r = result?;
    torn?;
    if let Some(c) = r.context.as_mut() {
        c.wire = wire;
    }
    Ok(r)
}

/// Measures one path that already exists: interleaved rounds on it alone (see `rounds`).
pub fn measure(tracer: &mut Tracer, lab: &NetPath, opts: &CompareOptions) -> Result<DriverReport> {
    measure_as(tracer, lab, lab.driver.name(), opts)
}

/// `measure`, the row named `label`.
fn measure_as(
    tracer: &mut Tracer,
    path: &NetPath,
    label: &str,
    opts: &CompareOptions,
) -> Result<DriverReport> {
    let mut out =
        crate::measure::interleave::run(tracer, &[(path, label.to_string(), opts.proto())], opts)?;
    Ok(out.remove(0))
}

/// Measures `opts.drivers` on the embedded lab, each record handed to `sink` as it is made.
pub fn run(
    backend: Backend,
    opts: &CompareOptions,
    sink: &mut dyn Sink,
) -> Result<Vec<DriverReport>> {
    if let Some(w) = &opts.underlay {
        check_underlay(w, &opts.drivers)?;
    }
    if let [d] = opts.drivers.as_slice() {
        for &p in &opts.protos {
            harness::supported::check(*d, p)?;
        }
    }
    let mut tracer = Tracer::load(backend, &opts.tracer())?;
    // Every lab exists for the whole run: the rounds visit them in turn.
    let mut labs = Vec::new();
    let mut skipped = 0;
    let built = opts.drivers.iter().try_for_each(|d| {
        match build_lab(*d, opts) {
            Ok(l) => labs.push(l),
            Err(e) => skip_or_fail(opts, *d, e, &mut skipped)?,
        }
        Ok::<_, anyhow::Error>(())
    });
    let built = built.and_then(|()| all_skipped(labs.len(), skipped));
    let result = built.and_then(|()| {
        // Several protocols: each driver's lab carries each of them, a row per protocol.
        let paths: Vec<_> = labs
            .iter()
            .flat_map(|(l, _)| rows(l, l.driver.name(), opts))
            .collect();
        let blocking = proxy_blocking(opts);
        let sides: Vec<_> = paths
            .iter()
            .map(|(path, label, proto)| crate::measure::interleave::Side {
                path,
                label: label.clone(),
                proto: *proto,
                opts: match &blocking {
                    Some(b) if path.driver.facts().relay => b,
                    _ => opts,
                },
                enter: None,
            })
            .collect();
        crate::measure::interleave::run_sides(&mut tracer, &sides)
    });
    let mut torn = Ok(());
    let mut wires = Vec::new();
    for (l, w) in labs {
        torn = torn.and(l.teardown());
        wires.push(w);
    }
    let mut out = result?;
    torn?;
    let per_lab = opts.protos.len();
    for (i, r) in out.iter_mut().enumerate() {
        if let Some(c) = r.context.as_mut() {
            c.wire = wires[i / per_lab].clone();
        }
    }
    for r in &out {
        sink.driver(r);
    }
    summarise(sink, &out);
    Ok(out)
}

/// A relayed driver's options (published-proxy's) in spin mode on a machine of 2 CPUs or
/// fewer: its relay needs a CPU of its own beside the two spinning sides, so spin mode
/// measures the scheduler, not the path. It is measured blocking (the summary says so).
fn proxy_blocking(opts: &CompareOptions) -> Option<CompareOptions> {
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    (cpus <= 2
        && opts.mode.wait == harness::WaitMode::Spin
        && opts.drivers.iter().any(|d| d.facts().relay))
    .then(|| {
        let mut o = opts.clone();
        o.mode.wait = harness::WaitMode::Block;
        o.mode.also_block = false;
        o
    })
}

/// A path's rows: one per protocol asked, named `name` (and the protocol when several).
fn rows<'a>(
    path: &'a NetPath,
    name: &str,
    opts: &CompareOptions,
) -> Vec<(&'a NetPath, String, harness::Proto)> {
    let many = opts.protos.len() > 1;
    opts.protos
        .iter()
        .map(|&p| {
            let label = if many {
                format!("{name} {p}")
            } else {
                name.to_string()
            };
            (path, label, p)
        })
        .collect()
}

/// One driver's lab, with the emulated wire when asked (and its description).
fn build_lab(driver: Driver, opts: &CompareOptions) -> Result<(NetPath, Option<String>)> {
    for &p in &opts.protos {
        harness::supported::check(driver, p)?;
    }
    let lab = lab::build(driver)?;
    let wire = match &opts.underlay {
        Some(w) => netem::delay_wire(&lab, w),
        None => Ok(None),
    };
    match wire {
        Ok(w) => Ok((lab, w)),
        Err(e) => {
            let _ = lab.teardown();
            Err(e)
        }
    }
}

/// A driver this machine cannot build (a kernel without ipvlan or netkit, a lab-only driver
/// asked of Docker) skips its row with one line when other drivers were asked too; asked
/// alone, its error is the run's. Any other error fails the run.
fn skip_or_fail(
    opts: &CompareOptions,
    d: Driver,
    e: anyhow::Error,
    skipped: &mut usize,
) -> Result<()> {
    match crate::driver::unavailable(&e) {
        Some(why) if opts.drivers.len() > 1 => {
            eprintln!("skipped {d}: {why}");
            *skipped += 1;
            Ok(())
        }
        _ => Err(e),
    }
}

fn all_skipped(built: usize, skipped: usize) -> Result<()> {
    if built == 0 && skipped > 0 {
        anyhow::bail!("none of the drivers asked for can be built here (see the lines above)");
    }
    Ok(())
}

/// `--underlay-delay` needs a driver with an underlay and a kernel with netem: said in one
/// line before anything is built.
fn check_underlay(w: &WireDelay, drivers: &[Driver]) -> Result<()> {
    if !drivers.iter().any(|d| d.facts().crosses_nodes) {
        let asked: Vec<&str> = drivers.iter().map(|d| d.name()).collect();
        anyhow::bail!(
            "--underlay-delay ({}) applies to cross-node drivers (overlay, egress, host-egress), \
             and none of {} is one: add -d overlay",
            w.describe(),
            asked.join(", ")
        );
    }
    netem::check_netem(w)
}

/// The summary is of several drivers: one has nothing to sum up.
fn summarise(sink: &mut dyn Sink, out: &[DriverReport]) {
    if out.len() > 1 {
        sink.summary(out);
    }
}

/// `compare --docker`: the same measurement on real Docker networks and containers, and with
/// `with_lab` the embedded lab's version of each driver right after it, so both rows come from
/// one run. Docker rows are named `docker:<driver>`.
pub fn run_docker(
    backend: Backend,
    opts: &CompareOptions,
    engine: &crate::docker::Engine,
    with_lab: bool,
    sink: &mut dyn Sink,
) -> Result<Vec<DriverReport>> {
    let check = |d: Driver| -> Result<()> {
        for &p in &opts.protos {
            harness::supported::check_docker(d, p)?;
        }
        Ok(())
    };
    if let [d] = opts.drivers.as_slice() {
        check(*d)?;
    }
    let mut tracer = Tracer::load(backend, &opts.tracer())?;
    let mut out = Vec::new();
    let mut skipped = 0;
    for d in &opts.drivers {
        if let Err(e) = check(*d) {
            skip_or_fail(opts, *d, e, &mut skipped)?;
            continue;
        }
        let dl = match crate::docker::DockerLab::build(engine, *d, &Default::default()) {
            Ok(dl) => dl,
            Err(e) => {
                let e = e.context(format!("building the Docker {d} network"));
                skip_or_fail(opts, *d, e, &mut skipped)?;
                continue;
            }
        };
        // With the lab: both built, their rounds interleaved.
        let lab = if with_lab {
            match build_lab(*d, opts) {
                Ok(l) => Some(l),
                Err(e) => {
                    let _ = dl.teardown();
                    return Err(e);
                }
            }
        } else {
            None
        };
        let mut paths = rows(&dl.path, &format!("docker:{}", d.name()), opts);
        if let Some((l, _)) = &lab {
            paths.extend(rows(l, d.name(), opts));
        }
        let r = crate::measure::interleave::run(&mut tracer, &paths, opts);
        drop(paths);
        let torn_lab = lab.map(|(l, _)| l.teardown()).unwrap_or(Ok(()));
        let torn = dl.teardown();
        let r = r.with_context(|| format!("measuring Docker {d}"))?;
        torn?;
        torn_lab?;
        for x in r {
            sink.driver(&x);
            out.push(x);
        }
    }
    all_skipped(out.len(), skipped)?;
    summarise(sink, &out);
    Ok(out)
}

/// `compare --between A B`: the harness between two running containers (client in A, server
/// in B), traced on their paths only, in one row named after them.
pub fn run_between(
    backend: Backend,
    opts: &CompareOptions,
    node: &mut crate::runtime::Node,
    client: &str,
    server: &str,
    sink: &mut dyn Sink,
) -> Result<Vec<DriverReport>> {
    // Resolve the containers first: a typo fails before any program is loaded.
    let b = crate::runtime::between(node, client, server)?;
    for &p in &opts.protos {
        harness::supported::check_docker(b.path.driver, p)?;
    }
    let mut tracer = Tracer::load(backend, &opts.tracer())?;
    let r = crate::measure::interleave::run(&mut tracer, &rows(&b.path, &b.label, opts), opts)
        .with_context(|| format!("measuring {client} → {server}"))?;
    for x in &r {
        sink.driver(x);
    }
    summarise(sink, &r);
    Ok(r)
}
