//! Privileged tests of what the kernel side follows and what it counts when it cannot: only the
//! traced threads' own packets start journeys, sampled timelines arrive from the whole of a long
//! run, and a flight table too small for the packets in flight counts its collisions. Run as root.
mod common;
use std::io::{Read as _, Write as _};
use std::net::{SocketAddrV4, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use netpath::{
    driver::Driver,
    harness::{self, Phases as _, RrConfig},
    lab,
    path::NetPath,
    probe::tracer::{Snapshot, Tracer, TracerOptions},
};
use netpath_common::{SkbState, counter};

/// Port of the second request/response pair, beside the harness's `LAB_PORT`.
const SIDE_PORT: u16 = lab::LAB_PORT + 7;

fn rr(requests: u64) -> RrConfig {
    RrConfig {
        load: netpath::harness::RrLoad {
            requests,
            warmup: 50,
            ..Default::default()
        },
        wait: netpath::harness::WaitMode::Block,
        ..RrConfig::default()
    }
}

/// A second request/response pair on the lab, on its own port, with netpath's harness left
/// out: 64-byte messages until `stop`. Its threads' ids are published so a test may trace them.
struct SidePair {
    stop: Arc<AtomicBool>,
    round_trips: Arc<AtomicU64>,
    tids: Arc<Mutex<(u32, u32)>>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

impl SidePair {
    fn start(lab: &NetPath) -> SidePair {
        let stop = Arc::new(AtomicBool::new(false));
        let round_trips = Arc::new(AtomicU64::new(0));
        let tids = Arc::new(Mutex::new((0, 0)));
        let addr = SocketAddrV4::new(*lab.server_bind.ip(), SIDE_PORT);
        let listening = Arc::new(AtomicBool::new(false));
        let server = {
            let (ns, tids, listening) = (lab.server_ns.clone(), tids.clone(), listening.clone());
            std::thread::spawn(move || {
                ns.run(|| {
                    let l = TcpListener::bind(addr)?;
                    listening.store(true, Ordering::SeqCst);
                    let (mut c, _) = l.accept()?;
                    tids.lock().unwrap().1 = unsafe { libc::gettid() } as u32;
                    let mut buf = [0u8; 64];
                    while c.read_exact(&mut buf).is_ok() && c.write_all(&buf).is_ok() {}
                    Ok(())
                })
                .unwrap()
            })
        };
        while !listening.load(Ordering::SeqCst) {
            std::thread::sleep(Duration::from_millis(5));
        }
        let client = {
            let ns = lab.client_ns.clone();
            let (stop, n, tids) = (stop.clone(), round_trips.clone(), tids.clone());
            std::thread::spawn(move || {
                ns.run(|| {
                    let mut c = TcpStream::connect(addr)?;
                    c.set_nodelay(true)?;
                    tids.lock().unwrap().0 = unsafe { libc::gettid() } as u32;
                    let mut buf = [7u8; 64];
                    while !stop.load(Ordering::Relaxed) {
                        c.write_all(&buf)?;
                        c.read_exact(&mut buf)?;
                        n.fetch_add(1, Ordering::Relaxed);
                    }
                    Ok(())
                })
                .unwrap()
            })
        };
        let p = SidePair {
            stop,
            round_trips,
            tids,
            threads: vec![server, client],
        };
        let t0 = Instant::now();
        while p.round_trips.load(Ordering::Relaxed) < 100 {
            assert!(t0.elapsed() < Duration::from_secs(10), "side pair stuck");
            std::thread::sleep(Duration::from_millis(5));
        }
        p
    }

    /// Stops the pair; returns its round trips.
    fn stop(self) -> u64 {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads {
            t.join().unwrap();
        }
        self.round_trips.load(Ordering::Relaxed)
    }
}

/// Builds a bridge lab, attaches, runs `f` with the lab and the tracer, detaches, tears down:
/// returns what the programs counted and the timelines they delivered.
fn traced_run(tracer: &mut Tracer, f: impl FnOnce(&NetPath, &Tracer)) -> (Snapshot, Vec<SkbState>) {
    let lab = lab::build(Driver::Bridge).expect("bridge lab");
    tracer.set_devices(&lab.devices).unwrap();
    tracer.reset().unwrap();
    tracer.attach().unwrap();
    f(&lab, tracer);
    tracer.detach().unwrap();
    let snap = tracer.snapshot().unwrap();
    let samples = tracer.drain_samples();
    lab.teardown().unwrap();
    (snap, samples)
}

/// A traced run of `requests` round trips (`traced_run`) with a `SidePair` running beside it;
/// with `trace_side` the side pair's threads are traced as well. Returns the side pair's round
/// trips, what the programs counted and the timelines they delivered.
fn traced_beside_a_side_pair(
    tracer: &mut Tracer,
    requests: u64,
    trace_side: bool,
) -> (u64, Snapshot, Vec<SkbState>) {
    let mut side_trips = 0;
    let (snap, samples) = traced_run(tracer, |lab, tracer| {
        let side = SidePair::start(lab);
        if trace_side {
            let (cli, srv) = *side.tids.lock().unwrap();
            tracer.tids.measure_start(cli, srv).unwrap();
        }
        let r = harness::run_rr(lab, &rr(requests), tracer.tids.as_ref());
        side_trips = side.stop();
        r.expect("traced pair");
    });
    (side_trips, snap, samples)
}

/// A tracer that samples every journey's timeline (the default samples one in many).
fn sampling_every_journey() -> Tracer {
    common::load_tracer(&TracerOptions {
        sample_every: 1,
        ..TracerOptions::default()
    })
}

fn ports(s: &SkbState) -> [u16; 2] {
    [u16::from_be(s.sport), u16::from_be(s.dport)]
}

fn c(snap: &Snapshot, k: u32) -> u64 {
    snap.counters[k as usize]
}

#[test]
fn only_the_traced_pair_starts_journeys() {
    let _g = common::need_root();
    let mut tracer = sampling_every_journey();
    let (side_trips, snap, samples) = traced_beside_a_side_pair(&mut tracer, 1000, false);
    assert!(side_trips > 100, "the untraced pair ran: {side_trips}");
    // Every packet followed was sampled: each timeline belongs to the traced pair's connection.
    assert_eq!(c(&snap, counter::SAMPLES), samples.len() as u64);
    assert!(samples.len() >= 1000, "{} timelines", samples.len());
    let other: Vec<[u16; 2]> = samples
        .iter()
        .map(ports)
        .filter(|p| !p.contains(&lab::LAB_PORT))
        .collect();
    assert!(other.is_empty(), "journeys of other traffic: {other:?}");
    // What did not start is counted, not lost: every journey started is accounted for.
    let started = c(&snap, counter::STARTED);
    let done = c(&snap, counter::COMPLETED);
    assert!(started <= 2 * (1000 + 1), "{started} started");
    assert!(done >= 2 * 1000 * 99 / 100, "{done} completed");
    eprintln!(
        "side pair: {side_trips} round trips untraced; foreign skbs refused in traced sends: {}",
        c(&snap, counter::FOREIGN)
    );
}

#[test]
fn a_long_run_delivers_timelines_from_its_whole_length() {
    let _g = common::need_root();
    let mut tracer = sampling_every_journey();
    // 8,000 journeys: the 1 MiB ring holds about 1,200 timelines at once.
    let n = 4000;
    let (snap, samples) = traced_run(&mut tracer, |lab, tracer| {
        harness::run_rr(lab, &rr(n), tracer.tids.as_ref()).expect("traced run");
    });
    let done = c(&snap, counter::COMPLETED);
    let lost = c(&snap, counter::RINGBUF_LOST);
    assert_eq!(c(&snap, counter::SAMPLES), samples.len() as u64);
    // Each completed journey's timeline arrived, or its loss was counted.
    assert!(
        samples.len() as u64 + lost >= done,
        "{} timelines + {lost} lost < {done} journeys",
        samples.len()
    );
    assert!(samples.len() > 4 * 1200, "{} timelines", samples.len());
    // From the whole run: the last journeys' timelines are there too (they started after
    // the first 1,200 had filled the ring several times over).
    let first = samples.iter().map(|s| s.first_ts).min().unwrap();
    let last = samples.iter().map(|s| s.first_ts).max().unwrap();
    let late = samples
        .iter()
        .filter(|s| s.first_ts > first + (last - first) * 9 / 10)
        .count();
    assert!(
        late > 100,
        "{late} timelines from the last tenth of the run"
    );
}

#[test]
fn a_tiny_flight_table_counts_its_collisions() {
    let _g = common::need_root();
    // One slot: two traced pairs' packets in flight at once collide.
    let mut tracer = common::load_tracer(&TracerOptions {
        flight_slots: 1,
        ..TracerOptions::default()
    });
    let (side_trips, snap, _) = traced_beside_a_side_pair(&mut tracer, 2000, true);
    assert!(side_trips > 100);
    let collisions = c(&snap, counter::SLOT_COLLISION);
    let started = c(&snap, counter::STARTED);
    let done = c(&snap, counter::COMPLETED);
    assert!(collisions > 0, "no collision counted in a one-slot table");
    assert!(
        done > 0,
        "journeys still complete in the slot when it is free"
    );
    // Not followed means not started: the collisions are the journeys missing, and no
    // journey completes that did not start.
    assert!(done <= started, "{done} completed of {started} started");
    eprintln!("one-slot table: {started} started, {done} completed, {collisions} collisions");
    // Bad sizes are refused with one line.
    let backend = common::backend();
    let e = Tracer::load(
        backend,
        &TracerOptions {
            flight_slots: 3,
            ..TracerOptions::default()
        },
    )
    .err()
    .expect("3 slots refused");
    assert!(e.to_string().contains("power of two"), "{e}");
}

/// `validate`'s delay program loads on this kernel and holds each data packet on its device
/// for at least the time asked (what it measured itself), and passes the short ones.
#[test]
fn the_delay_program_holds_data_packets_for_the_time_asked() {
    let _g = common::need_root();
    let lab = lab::build(Driver::Bridge).unwrap();
    let mut tracer = common::load_tracer(&TracerOptions::default());
    let dev = netpath::validate::At::Server
        .device(&lab)
        .cloned()
        .expect("the server's interface");
    lab.server_ns
        .run_here(|| tracer.attach_delay_here(&dev.name))
        .unwrap();
    tracer.set_delay(5_000, 200).unwrap();
    let (h0, ns0) = tracer.delay_held().unwrap();
    let r = harness::run_rr(&lab, &rr(100), &harness::NoPhases).unwrap();
    let (h1, ns1) = tracer.delay_held().unwrap();
    tracer.set_delay(0, 200).unwrap();
    tracer.detach_delay();
    lab.teardown().unwrap();
    let held = h1 - h0;
    // Every 1 KiB request (warm-up included) crossed the server's interface once; its ACKs
    // are short and passed.
    assert!(held >= r.count, "held {held} of {} requests", r.count);
    assert!(
        held <= r.count + 50 + 10,
        "held {held}: short packets were held too"
    );
    assert!(
        (ns1 - ns0) / held >= 5_000,
        "held {} ns each",
        (ns1 - ns0) / held
    );
}
