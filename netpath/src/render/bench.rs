//! `netpath bench`'s text: the compact tables (latency, throughput, memory) and the goals.
use crate::bench::stability::StabilityReport;
use crate::bench::{BenchReport, DriverBench, Ratios, Rtt};
use std::io::Write;

impl super::Render for BenchReport {
    const KIND: &'static str = "bench";
    fn text(&self, w: &mut dyn Write) -> std::io::Result<()> {
        print(w, self)
    }
}

/// `bench --stability`: its table, or its JSON as it has always been, without the header
/// (`cargo xtask bench` reads it as is).
pub fn emit_stability(format: super::Format, r: &StabilityReport) -> anyhow::Result<()> {
    let w = &mut std::io::stdout().lock();
    match format {
        super::Format::Json => writeln!(w, "{}", serde_json::to_string_pretty(r)?)?,
        _ => stability(w, r)?,
    }
    Ok(())
}

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

/// The compact tables, then the goals.
pub fn print(w: &mut dyn Write, r: &BenchReport) -> std::io::Result<()> {
    heading(w, r)?;
    writeln!(w)?;
    writeln!(
        w,
        "latency, round trip in µs (sockperf prints one-way latency = RTT/2: doubled here)"
    )?;
    writeln!(
        w,
        "{:<9} {:<34} {:>8} {:>8} {:>8}   {:>6} {:>6} {:>6}",
        "driver", "", "p50", "p99", "mean", "p50", "p99", "mean"
    )?;
    for d in &r.drivers {
        latency(w, d)?;
    }
    writeln!(w)?;
    if r.drivers.iter().any(|d| d.throughput.is_some()) {
        throughput(w, r)?;
        writeln!(w)?;
    }
    for line in &r.skipped {
        writeln!(w, "{line}")?;
    }
    memory(w, r)?;
    writeln!(w, "bench took {:.0} s", r.elapsed_s)?;
    writeln!(w)?;
    write!(w, "{}", super::markdown::goals_table(r))?;
    Ok(())
}

fn heading(w: &mut dyn Write, r: &BenchReport) -> std::io::Result<()> {
    writeln!(
        w,
        "netpath bench ({}): backend {}, kernel {}, {} CPUs online, {} rounds, {} requests per run, {} s per tool run",
        r.proto,
        r.backend.name(),
        r.kernel,
        r.online_cpus,
        r.rounds,
        r.requests,
        r.secs
    )?;
    writeln!(
        w,
        "load average {} at start, {} at end; ratios are medians of per-round ratios (each pair measured back to back)",
        r.loadavg_start, r.loadavg_end
    )?;
    if r.bpf_stats_enabled_during_rounds {
        writeln!(
            w,
            "warning: kernel.bpf_stats_enabled was 1 during the rounds (someone else enabled BPF statistics): traced figures include its cost"
        )?;
    }
    Ok(())
}

/// One driver's latency rows: sockperf, netpath untraced and traced, naive bpftrace, the
/// kernel cost of the programs.
fn latency(w: &mut dyn Write, d: &DriverBench) -> std::io::Result<()> {
    let l = &d.latency;
    let row = |w: &mut dyn Write,
               name: &str,
               v: &Rtt,
               ratio: Option<(&Ratios, &str)>,
               first: bool|
     -> std::io::Result<()> {
        let (a, b, c, what) = match ratio {
            Some((q, w)) => (x(q.p50), x(q.p99), x(q.mean), w),
            None => (String::new(), String::new(), String::new(), ""),
        };
        writeln!(
            w,
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
        )
    };
    let sockperf = match d.proto {
        crate::harness::Proto::Tcp => "sockperf pp --tcp -m 1024",
        _ => "sockperf pp (udp) -m 1024",
    };
    row(w, sockperf, &l.sockperf_median, None, true)?;
    row(
        w,
        "netpath rr, untraced",
        &l.untraced_median,
        Some((&l.netpath_vs_sockperf, "vs sockperf")),
        false,
    )?;
    row(
        w,
        "netpath rr, traced",
        &l.traced_median,
        Some((&l.traced_vs_untraced, "vs untraced")),
        false,
    )?;
    match (&d.naive_tracer.median, &d.naive_tracer.vs_untraced) {
        (Some(m), Some(q)) => row(
            w,
            "rr under naive bpftrace (4 tps)",
            m,
            Some((q, "vs untraced")),
            false,
        ),
        _ => writeln!(
            w,
            "{:<9} {:<34} {}",
            "", "rr under naive bpftrace (4 tps)", d.naive_tracer.status
        ),
    }?;
    kernel_cost(w, d)?;
    Ok(())
}

/// The kernel-cost run's lines under a driver's latency rows.
fn kernel_cost(w: &mut dyn Write, d: &DriverBench) -> std::io::Result<()> {
    let (l, k) = (&d.latency, &d.kernel_cost);
    let top: Vec<String> = k
        .programs
        .iter()
        .take(4)
        .map(|p| format!("{} {:.1}×{:.0}", p.program, p.runs_per_rtt, p.avg_ns))
        .collect();
    writeln!(
        w,
        "{:<9} {:<34} {:.0} ns per RTT = {:.0}% of the untraced p50 (traced − untraced p50: {:.0} ns); {:.1} hop events per RTT",
        "",
        "kernel cost of the programs",
        k.ns_per_rtt,
        100.0 * k.share_of_untraced_p50,
        1000.0 * l.traced_minus_untraced_p50_us,
        l.hop_events_per_rtt,
    )?;
    writeln!(
        w,
        "{:<9} {:<34} {}",
        "",
        "  top programs, runs/RTT × ns",
        top.join(", ")
    )?;
    writeln!(
        w,
        "{:<9} {:<34} {:.0} ns per run (an empty program on net_dev_queue, same run)",
        "", "  floor", k.floor_ns
    )?;
    let lost: u64 = k.losses.values().sum();
    writeln!(
        w,
        "{:<9} {:<34} {} of {} round trips; journeys {} sent, {} completed, {} counted lost",
        "", "  that run", k.round_trips, k.requests, k.journeys_sent, k.journeys_completed, lost
    )?;
    writeln!(
        w,
        "{:<9} {:<34} traced/untraced {}; untraced/sockperf {}",
        "",
        "  per-round p50 ratios",
        list(l.traced_vs_untraced_rounds.iter().map(|q| q.p50)),
        list(l.netpath_vs_sockperf_rounds.iter().map(|q| q.p50)),
    )?;
    Ok(())
}

fn throughput(w: &mut dyn Write, r: &BenchReport) -> std::io::Result<()> {
    writeln!(
        w,
        "throughput, one stream, 128 KiB writes, Gbit/s (sender side)"
    )?;
    let with = || {
        r.drivers
            .iter()
            .filter_map(|d| Some((d, d.throughput.as_ref()?)))
    };
    for (i, (d, t)) in with().enumerate() {
        if i == 0 {
            writeln!(
                w,
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
            )?;
        }
        writeln!(
            w,
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
        )?;
    }
    for (d, t) in with() {
        writeln!(
            w,
            "{:<9} per round: np/iperf3 {}; att/untr {}; trc/untr {}",
            d.driver.name(),
            list(t.netpath_vs_iperf3_rounds.iter().copied()),
            list(t.attached_vs_untraced_rounds.iter().copied()),
            list(t.traced_vs_untraced_rounds.iter().copied()),
        )?;
    }
    writeln!(
        w,
        "(attached: probes in, no thread traced, i.e. netpath's cost to traffic it does not follow; traced: the bulk threads traced too)"
    )?;
    Ok(())
}

fn memory(w: &mut dyn Write, r: &BenchReport) -> std::io::Result<()> {
    let m = &r.memory;
    writeln!(
        w,
        "memory: peak RSS {} (RSS {} at start, {} before loading the eBPF object, {} after)",
        kib(m.peak_rss_kib * 1024),
        kib(m.rss_at_start_kib * 1024),
        kib(m.rss_before_load_kib * 1024),
        kib(m.rss_after_load_kib * 1024)
    )?;
    writeln!(
        w,
        "        BPF maps {} in {} maps, of which per-CPU {} ({} per possible CPU × {}); at 64 CPUs {}; {} programs {}",
        kib(m.maps_bytes),
        m.maps.len(),
        kib(m.per_cpu_bytes),
        kib(m.per_cpu_bytes_each),
        r.possible_cpus,
        kib(m.maps_bytes_at_64_cpus),
        m.programs,
        kib(m.programs_bytes)
    )?;
    let big: Vec<String> = m
        .maps
        .iter()
        .take(5)
        .map(|mm| format!("{} {}", mm.name, kib(mm.bytes)))
        .collect();
    writeln!(w, "        largest maps: {}", big.join(", "))?;
    Ok(())
}

fn stability(w: &mut dyn Write, r: &StabilityReport) -> std::io::Result<()> {
    writeln!(
        w,
        "== stability: {} × compare -d host,bridge,overlay --rounds 3 (wait spin, cpus split)",
        crate::bench::stability::RUNS
    )?;
    writeln!(
        w,
        "   {:<3} {:<20} {:>12} {:>15} {:>8} {:>9} {:>10}  machine",
        "run", "load", "bridge/host", "overlay/bridge", "host µs", "bridge µs", "overlay µs"
    )?;
    let x = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.2}×"));
    for (i, run) in r.runs.iter().enumerate() {
        let m = run
            .machine
            .as_ref()
            .map(|m| {
                format!(
                    "busy {:.0}%, steal {:.1}%, load {}",
                    m.busy_pct, m.steal_pct, m.loadavg
                )
            })
            .unwrap_or_default();
        writeln!(
            w,
            "   {:<3} {:<20} {:>12} {:>15} {:>8.1} {:>9.1} {:>10.1}  {m}",
            i + 1,
            run.load,
            x(run.bridge_host_p50),
            x(run.overlay_bridge_p50),
            run.host_p50_us,
            run.bridge_p50_us,
            run.overlay_p50_us
        )?;
    }
    writeln!(
        w,
        "   range over the runs (max − min over median): bridge/host {:.1}%, overlay/bridge {:.1}% (goal: ≤ 10%, i.e. ±5%)",
        r.bridge_host_range_pct, r.overlay_bridge_range_pct
    )?;
    if let Some(m) = r.runs.first().and_then(|x| x.machine.as_ref()) {
        writeln!(w, "   {}", m.line())?;
    }
    Ok(())
}
