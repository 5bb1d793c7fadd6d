//! bench's text and Markdown on a made-up report: every part present (two drivers, one
//! without naive bpftrace, bulk, journeys, the proof and serve-left-on sections), so each
//! table is drawn; the figures are arbitrary.
use std::collections::BTreeMap;

use crate::bench::proof::{Proof, SumRow};
use crate::bench::serve_on::{CpuPerRequest, ModeRow, ServeOn};
use crate::bench::*;
use crate::driver::Driver;
use crate::harness::{Cpus, Proto, WaitMode};
use crate::record::own::PairCheck;
use crate::record::{ProgCost, Spread};
use crate::validate::{At, Case, ValidateOutput};

fn rtt(p50_us: f64) -> Rtt {
    Rtt {
        p50_us,
        p99_us: 2.0 * p50_us,
        mean_us: 1.1 * p50_us,
    }
}

fn ratios(r: f64) -> Ratios {
    Ratios {
        p50: r,
        p99: r + 0.1,
        mean: r + 0.05,
    }
}

/// Two rounds: the median is halfway between them.
fn two<T: Median + Default>(lo: T, hi: T) -> Rounds<T> {
    Rounds::of(vec![lo, hi])
}

fn mode(wait: WaitMode, cpus: Cpus) -> ModeLatency {
    let mut m = ModeLatency::new(wait, cpus);
    m.untraced = two(rtt(9.5), rtt(10.5));
    m.traced = two(rtt(10.5), rtt(11.5));
    m.attached = two(rtt(10.1), rtt(10.3));
    m.empty = two(rtt(10.0), rtt(10.2));
    m.traced_vs_untraced = m.traced.vs(&m.untraced);
    m.attached_vs_untraced = m.attached.vs(&m.untraced);
    m.empty_vs_untraced = m.empty.vs(&m.untraced);
    m.hop_events_per_rtt = two(23.0, 25.0);
    m
}

fn driver(driver: Driver, naive: bool) -> DriverBench {
    let (block, spin) = (
        mode(WaitMode::Block, Cpus::Auto),
        mode(WaitMode::Spin, Cpus::Split),
    );
    let sockperf = two(rtt(8.5), rtt(9.5));
    let latency = Latency {
        netpath_vs_sockperf: block.untraced.vs(&sockperf),
        sockperf,
        traced_minus_untraced_p50_us: 1.0,
        block,
        spin,
    };
    let programs = ["sock_recv_length", "net_dev_queue"].map(|p| ProgCost {
        program: p.to_string(),
        runs: 1000,
        avg_ns: 120.0,
        runs_per_rtt: 3.0,
    });
    let gbit = |gbit_per_s| Bulk {
        gbit_per_s,
        retransmits: 0,
    };
    let (iperf3, untraced) = (two(gbit(19.0), gbit(21.0)), two(gbit(19.0), gbit(20.0)));
    let (attached, traced) = (two(gbit(19.2), gbit(19.6)), two(gbit(17.5), gbit(18.5)));
    let throughput = Throughput {
        netpath_vs_iperf3: untraced.vs(&iperf3),
        attached_vs_untraced: attached.vs(&untraced),
        traced_vs_untraced: traced.vs(&untraced),
        iperf3,
        untraced,
        attached,
        traced,
        traced_threads_found: naive,
        traced_hop_events: two(12000.0, 12690.0),
    };
    DriverBench {
        driver,
        proto: Proto::Tcp,
        client: "10.0.0.2".parse().unwrap(),
        server: "10.0.0.3:11111".parse().unwrap(),
        latency,
        naive_tracer: NaiveTracer {
            status: if naive { "ran" } else { "not installed" }.into(),
            script: String::new(),
            runs: naive.then(|| two(rtt(13.5), rtt(14.5))),
            vs_untraced: naive.then(|| two(ratios(1.3), ratios(1.5))),
        },
        throughput: Some(throughput),
        kernel_cost: KernelCost {
            rtt: rtt(11.0),
            requests: 10000,
            round_trips: 10000,
            journeys_sent: 20000,
            journeys_completed: 20000,
            losses: BTreeMap::from([("dropped", 0), ("stale", 1)]),
            programs: programs.to_vec(),
            floor_ns: 50.0,
            ns_per_rtt: 720.0,
            body_ns_per_rtt: 570.0,
            dispatch_ns_per_rtt: 400.0,
            cpu_ns_per_rtt: 970.0,
            hot_ns_per_event: 70.0,
            hot_over_floors_ns: 20.0,
            floors: vec![],
            untracked_ns_per_run: 55.0,
            untracked_floor_ns: 50.0,
            untracked_over_floors_ns: 5.0,
            untracked_programs: vec![],
            untracked_floors: vec![],
            share_of_untraced_p50: 0.072,
            share_of_untraced_mean: 0.065,
        },
    }
}

fn proof() -> Proof {
    let case = |d: f64| Case {
        driver: "bridge".into(),
        device: "eth0".into(),
        hop: "receiver-stack",
        dir: "request",
        injected_us: d,
        held_us: d + 0.05,
        recovered_us: d - 0.1,
        error_us: -0.15,
        recovered_spread: Spread {
            median: d,
            min: d - 0.2,
            max: d + 0.2,
        },
        largest_other_hop: "wakeup".into(),
        largest_other_us: 0.3,
        untraced_rtt_delta_us: d + 0.4,
        held: 3000,
    };
    Proof {
        rounds: 3,
        requests: 10000,
        sums: vec![SumRow {
            driver: "bridge".into(),
            untraced_mean_us: 12.0,
            raw_sum_us: 15.0,
            own_us: 3.2,
            edges_us: Some(1.5),
            edges_own_us: Some(0.6),
            compensated_sum_us: 12.7,
            error_pct: -1.7,
            error_rounds_median_pct: Some(-0.9),
            untraced_range_pct: 4.2,
            run_cost_ns: 130.0,
        }],
        pairs: vec![PairCheck {
            driver: "bridge".into(),
            reference: "host".into(),
            untraced_delta_us: 3.0,
            compensated_delta_us: 2.8,
            raw_delta_us: 4.0,
            within_tolerance: true,
            untraced_delta_range_us: 0.4,
            error_rounds_median_us: Some(-0.1),
        }],
        validate: ValidateOutput {
            at: Some(At::Server),
            rounds: 3,
            requests: 10000,
            run_cost_ns: 130.0,
            cases: vec![case(1.0), case(5.0)],
            chain: None,
            rule_cases: Vec::new(),
        },
    }
}

fn report() -> BenchReport {
    let serve = |mode: &str, cpu: Option<f64>| ModeRow {
        mode: mode.into(),
        rps: Rounds::of(vec![49000.0, 50000.0, 51000.0]),
        p50_ms: Rounds::of(vec![0.301, 0.311, 0.321]),
        rps_ratio: Rounds::of(vec![0.97, 0.98, 0.99]),
        p50_ratio: Rounds::of(vec![1.01, 1.02, 1.03]),
        serve_cpu_pct_per_core: cpu,
    };
    BenchReport {
        proto: Proto::Tcp,
        skipped: vec![],
        backend: crate::probe::backend::Backend::Tracepoint,
        kernel: "6.18.0-test".into(),
        online_cpus: 2,
        possible_cpus: 2,
        rounds: 2,
        secs: 3,
        requests: 10000,
        loadavg_start: "0.10 0.20 0.30".into(),
        loadavg_end: "0.40 0.50 0.60".into(),
        bpf_stats_enabled_during_rounds: false,
        drivers: vec![driver(Driver::Bridge, false), driver(Driver::Host, true)],
        memory: Memory {
            maps: vec![MapMem {
                name: "SKBS".into(),
                map_type: 1,
                per_cpu: false,
                max_entries: 65536,
                value_size: 64,
                bytes: 4 << 20,
            }],
            ..Default::default()
        },
        journeys: Some(JourneyRun {
            driver: Driver::Bridge,
            requests: 500000,
            journeys_sent: 1000000,
            journeys_completed: 1000000,
            packets_started: 1000000,
            samples_submitted: 15625,
            samples_received: 15625,
            losses: BTreeMap::from([("ringbuf_lost", 0), ("skb_map_full", 0)]),
            elapsed_s: 40.0,
        }),
        proof: Some(proof()),
        serve_on: Some(ServeOn {
            rounds: 3,
            requests: 100000,
            sample: 64,
            rows: vec![
                serve("serve off", None),
                serve("following the server", Some(3.5)),
            ],
            cpu_per_request: Some(CpuPerRequest {
                runs: 4.0,
                programs_ns: 310.0,
                floor_ns: 200.0,
                body_ns: 110.0,
                serve_ns: 20.0,
                app_ns: 9000.0,
                busy_ns: 30000.0,
                netpath_pct_of_busy: 1.1,
            }),
            cpu_rounds: Vec::new(),
        }),
        machine: Default::default(),
        others: vec!["cc1 50%".into()],
        note: "idle".into(),
        elapsed_s: 600.0,
    }
}

/// Pipes that are not escaped: the cell borders of a Markdown row.
fn borders(line: &str) -> usize {
    line.replace("\\|", "").matches('|').count()
}

#[test]
fn markdown_tables_are_well_formed() {
    let md = crate::render::markdown::markdown(&report());
    // Each table: a header, a separator of dashes, rows with as many cells as the header.
    let lines: Vec<&str> = md.lines().collect();
    let mut tables = 0;
    for (i, l) in lines.iter().enumerate() {
        let starts = l.starts_with('|') && (i == 0 || !lines[i - 1].starts_with('|'));
        if !starts {
            continue;
        }
        tables += 1;
        let cells = borders(l);
        let sep = lines[i + 1];
        assert!(
            sep.trim_matches('|')
                .split('|')
                .all(|c| !c.is_empty() && c.chars().all(|x| x == '-')),
            "{sep}"
        );
        assert_eq!(borders(sep), cells, "{sep}");
        for row in lines[i + 2..].iter().take_while(|r| r.starts_with('|')) {
            assert_eq!(borders(row), cells, "{l}\n{row}");
            assert!(row.ends_with('|'), "{row}");
        }
    }
    // Goals, wait modes and programs twice (two drivers), proof (3), journeys, serve on and its
    // CPU per request.
    assert_eq!(tables, 1 + 2 * 2 + 3 + 1 + 2, "{md}");
    let cpu = "| 4.0 | 310 ns | 200 ns | 110 ns | 20 ns | 130 ns | 9000 ns | 30000 ns | 1.10% | not met |";
    let flat = md
        .split(' ')
        .filter(|w| !w.is_empty())
        .collect::<Vec<_>>()
        .join(" ");
    assert!(flat.contains(cpu), "{md}");
    assert!(md.contains("| program "), "{md}");
    assert!(md.contains("| following the server "), "{md}");
    // The empty programs' runs: a column of each wait mode's table, and the spin goal's bound.
    assert!(md.contains("| empty/untraced p50 / p99 |"), "{md}");
    let empty = mode(WaitMode::Spin, Cpus::Split)
        .empty_vs_untraced
        .median
        .p50;
    let bound = format!("empty programs on the same hooks alone: {empty:.3}");
    assert!(md.contains(&bound), "{bound}: {md}");
}

#[test]
fn text_tables_align_without_trailing_spaces() {
    let mut out = Vec::new();
    super::print(&mut out, &report()).unwrap();
    let text = String::from_utf8(out).unwrap();
    assert!(text.lines().all(|l| l == l.trim_end()), "{text}");
    let line = |start: &str| {
        text.lines()
            .find(|l| l.starts_with(start))
            .unwrap_or_else(|| panic!("no {start}: {text}"))
    };
    // The latency header's figure columns end where the rows' figures do.
    let header = line("driver ");
    let sockperf = line("bridge ");
    let end = |l: &str, x: &str| l.find(x).unwrap() + x.len();
    assert_eq!(end(header, "p50"), end(sockperf, "9.0"), "{text}");
    // naive bpftrace not run: its status, not figures.
    assert!(
        text.lines()
            .any(|l| l.contains("rr under naive bpftrace (4 tps)") && l.ends_with("not installed")),
        "{text}"
    );
    assert!(line("bridge ").contains("sockperf pp --tcp -m 1024"));
    assert!(text.contains("kernel cost of the programs"), "{text}");
    assert!(line("per round ").contains("np/iperf3"), "{text}");
    // The last text table's column ("traced hops" is right-aligned under its header).
    let bulk = line("driver  iperf3");
    let host = text
        .lines()
        .filter(|l| l.starts_with("host "))
        .find(|l| l.contains("12345"))
        .unwrap();
    assert_eq!(end(bulk, "traced hops"), end(host, "12345"), "{text}");
}
