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
pub fn emit_stability(o: &super::OutputArgs, r: &StabilityReport) -> anyhow::Result<()> {
    let mut text = Vec::new();
    stability(&mut text, r)?;
    o.emit_plain(
        &String::from_utf8_lossy(&text),
        &serde_json::to_string_pretty(r)?,
    )
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
    let rows = r.drivers.iter().flat_map(latency).collect();
    let header = ["driver", "", "p50", "p99", "mean", "p50", "p99", "mean", ""];
    super::table::write(w, "", &header, rows, &[0, 1, 8])?;
    writeln!(w)?;
    let rows = r.drivers.iter().flat_map(kernel_cost).collect();
    super::table::write(w, "", &[], rows, &[0, 1, 2])?;
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

/// One driver's latency rows: sockperf, netpath untraced and traced, naive bpftrace; each
/// after the first with its ratios to the run it is compared with.
fn latency(d: &DriverBench) -> Vec<Vec<String>> {
    let (l, b) = (&d.latency, &d.latency.block);
    let row = |name: &str, v: &Rtt, ratio: Option<(&Ratios, &str)>| {
        let mut r = vec![String::new(), name.to_string()];
        r.extend([v.p50_us, v.p99_us, v.mean_us].map(|x| format!("{x:.1}")));
        match ratio {
            Some((q, what)) => r.extend([x(q.p50), x(q.p99), x(q.mean), what.to_string()]),
            None => r.extend(std::iter::repeat_n(String::new(), 4)),
        }
        r
    };
    let sockperf = match d.proto {
        crate::harness::Proto::Tcp => "sockperf pp --tcp -m 1024",
        _ => "sockperf pp (udp) -m 1024",
    };
    let naive = "rr under naive bpftrace (4 tps)";
    let mut rows = vec![
        row(sockperf, &l.sockperf.median, None),
        row(
            "netpath rr, untraced",
            &b.untraced.median,
            Some((&l.netpath_vs_sockperf.median, "vs sockperf")),
        ),
        row(
            "netpath rr, traced",
            &b.traced.median,
            Some((&b.traced_vs_untraced.median, "vs untraced")),
        ),
    ];
    rows.push(match (&d.naive_tracer.runs, &d.naive_tracer.vs_untraced) {
        (Some(m), Some(q)) => row(naive, &m.median, Some((&q.median, "vs untraced"))),
        // Not run: why, in the last column (its figures would be blank).
        _ => {
            let mut r = vec![String::new(); 9];
            r[1] = naive.to_string();
            r[8] = d.naive_tracer.status.clone();
            r
        }
    });
    rows[0][0] = d.driver.name().to_string();
    rows
}

/// The kernel-cost run's rows of a driver: what it says, and its figures in words.
fn kernel_cost(d: &DriverBench) -> Vec<Vec<String>> {
    let (l, k) = (&d.latency, &d.kernel_cost);
    let top: Vec<String> = k
        .programs
        .iter()
        .take(4)
        .map(|p| format!("{} {:.1}×{:.0}", p.program, p.runs_per_rtt, p.avg_ns))
        .collect();
    let lost: u64 = k.losses.values().sum();
    let rows = [
        (
            "kernel cost of the programs",
            format!(
                "{:.0} ns per RTT = {:.0}% of the untraced p50 (traced − untraced p50: {:.0} ns); {:.1} hop events per RTT",
                k.ns_per_rtt,
                100.0 * k.share_of_untraced_p50,
                1000.0 * l.traced_minus_untraced_p50_us,
                l.block.hop_events_per_rtt.median,
            ),
        ),
        (
            "  netpath CPU per RTT",
            format!(
                "{:.0} ns: the programs' work {:.0} (the floor per run out) + dispatch {:.0} (empty programs' spin p50 − untraced)",
                k.cpu_ns_per_rtt, k.body_ns_per_rtt, k.dispatch_ns_per_rtt,
            ),
        ),
        ("  top programs, runs/RTT × ns", top.join(", ")),
        (
            "  floors",
            format!(
                "{:.0} ns per run on net_dev_queue (empty programs, same run: {}); hot programs {:.0} ns over their hooks' floors",
                k.floor_ns,
                (k.floors.iter())
                    .map(|p| format!("{} {:.0}", p.program, p.avg_ns))
                    .collect::<Vec<_>>()
                    .join(", "),
                k.hot_over_floors_ns
            ),
        ),
        (
            "  that run",
            format!(
                "{} of {} round trips; journeys {} sent, {} completed, {} counted lost",
                k.round_trips, k.requests, k.journeys_sent, k.journeys_completed, lost
            ),
        ),
        (
            "  per-round p50 ratios",
            format!(
                "traced/untraced {}; untraced/sockperf {}",
                list(l.block.traced_vs_untraced.rounds.iter().map(|q| q.p50)),
                list(l.netpath_vs_sockperf.rounds.iter().map(|q| q.p50)),
            ),
        ),
    ];
    let mut rows: Vec<Vec<String>> = rows
        .into_iter()
        .map(|(what, figure)| vec![String::new(), what.to_string(), figure])
        .collect();
    rows[0][0] = d.driver.name().to_string();
    rows
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
    let rows = with()
        .map(|(d, t)| {
            let found = if t.traced_threads_found {
                ""
            } else {
                "(bulk threads not found for tracing in some round)"
            };
            let mut r = vec![d.driver.name().to_string()];
            r.extend(
                [&t.iperf3, &t.untraced, &t.attached, &t.traced]
                    .map(|g| format!("{:.2}", g.median.gbit_per_s)),
            );
            r.extend([
                x(t.netpath_vs_iperf3.median),
                x(t.attached_vs_untraced.median),
                x(t.traced_vs_untraced.median),
                format!("{:.0}", t.traced_hop_events.median),
                found.to_string(),
            ]);
            r
        })
        .collect();
    let header = [
        "driver",
        "iperf3",
        "untraced",
        "attached",
        "traced",
        "np/iperf3",
        "att/untr",
        "trc/untr",
        "traced hops",
        "",
    ];
    super::table::write(w, "", &header, rows, &[0, 9])?;
    let rows = with()
        .map(|(d, t)| {
            vec![
                d.driver.name().to_string(),
                list(t.netpath_vs_iperf3.rounds.iter().copied()),
                list(t.attached_vs_untraced.rounds.iter().copied()),
                list(t.traced_vs_untraced.rounds.iter().copied()),
            ]
        })
        .collect();
    let header = ["per round", "np/iperf3", "att/untr", "trc/untr"];
    super::table::write(w, "", &header, rows, &[0, 1, 2, 3])?;
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
    let x = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.2}×"));
    let rows = (r.runs.iter().enumerate())
        .map(|(i, run)| {
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
            vec![
                (i + 1).to_string(),
                run.load.to_string(),
                x(run.bridge_host_p50),
                x(run.overlay_bridge_p50),
                format!("{:.1}", run.host_p50_us),
                format!("{:.1}", run.bridge_p50_us),
                format!("{:.1}", run.overlay_p50_us),
                m,
            ]
        })
        .collect();
    let header = [
        "run",
        "load",
        "bridge/host",
        "overlay/bridge",
        "host µs",
        "bridge µs",
        "overlay µs",
        "machine",
    ];
    super::table::write(w, "   ", &header, rows, &[0, 1, 7])?;
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

#[cfg(test)]
mod tests;
