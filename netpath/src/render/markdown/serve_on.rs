//! `BENCHMARKS.md`'s "Serve left on" section (alone with `bench --only-serve-left-on`): redis
//! throughput and p50 per serve mode against serve off, and the goals of following a server.
use std::fmt::Write as _;

use crate::render::table;

/// The serve-left-on section: redis throughput and p50 per mode, against serve off.
pub fn serve_on(s: &mut String, o: &crate::bench::serve_on::ServeOn) {
    use crate::bench::serve_on::{CONNECTIONS, GOAL_P50, GOAL_THROUGHPUT};
    let _ = writeln!(
        s,
        "## Serve left on\n\nredis-server in one container, redis-benchmark ({CONNECTIONS} \
         connections, {} GETs per run) in another, on a Docker bridge network of their own; \
         {} rounds, the modes interleaved, medians; ×off is the median of each round's \
         ratio to that round's serve off (the ratios of every round beside it); `serve` at its \
         default --sample-every {}. *Empty programs on serve's hooks*: `serve` following the server \
         with one empty program on each of its hooks instead of its own, the least any program \
         there costs. Goals when following the server: throughput ≥ {GOAL_THROUGHPUT}×, \
         p50 ≤ {GOAL_P50}× of serve off. CPU: the serve process's user+system time over the \
         run, per core.\n",
        o.requests, o.rounds, o.sample
    );
    let met = |ok: bool| if ok { "met" } else { "not met" };
    let rows = (o.rows.iter())
        .map(|r| {
            // The goals are for following the server; the other modes are references.
            let goal = if r.mode.ends_with("the server") {
                format!(
                    "throughput {}, p50 {}",
                    met(r.rps_ratio.median >= GOAL_THROUGHPUT),
                    met(r.p50_ratio.median <= GOAL_P50)
                )
            } else {
                String::new()
            };
            let cpu = r
                .serve_cpu_pct_per_core
                .map_or("–".to_string(), |c| format!("{c:.1}%"));
            let rounds = |v: &[f64]| {
                let each: Vec<String> = v.iter().map(|x| format!("{x:.3}")).collect();
                each.join(" ")
            };
            vec![
                r.mode.clone(),
                format!("{:.0}", r.rps.median),
                format!("{:.3}", r.rps_ratio.median),
                rounds(&r.rps_ratio.rounds),
                format!("{:.3} ms", r.p50_ms.median),
                format!("{:.3}", r.p50_ratio.median),
                rounds(&r.p50_ratio.rounds),
                cpu,
                goal,
            ]
        })
        .collect();
    let header = [
        "mode",
        "requests/s",
        "×off",
        "per round",
        "p50",
        "×off",
        "per round",
        "serve CPU per core",
        "goal",
    ];
    s.push_str(&table::markdown(&header, rows));
    let _ = writeln!(s);
    if let Some(c) = &o.cpu_per_request {
        cpu_per_request(s, c, o.cpu_rounds.len());
    }
}

/// netpath's CPU against the application's, per request, with serve following the server.
fn cpu_per_request(s: &mut String, c: &crate::bench::serve_on::CpuPerRequest, rounds: usize) {
    use crate::bench::serve_on::GOAL_CPU_PCT;
    let _ = writeln!(
        s,
        "CPU per GET with serve following the server, its programs' run time counted by the \
         kernel's BPF statistics (`serve --prog-stats`, a mode of its own: the statistics' clock \
         reads are not in the throughput above); median of {rounds} rounds. *Floor*: the runs \
         at the run time of an empty program on the same hooks, counted the same way in the \
         round's own run (*empty programs on serve's hooks, CPU counted*): the statistics' own \
         clock reads, taken out to leave the programs' *own work*. The hooks' dispatch is in \
         neither. *redis-server*: its container's cgroup CPU; *machine busy*: every CPU's busy \
         time (redis-benchmark's container and the rest of the machine included). Goal: netpath \
         (own work + serve) ≤ {GOAL_CPU_PCT}% of the machine's busy CPU.\n"
    );
    let ns = |v: f64| format!("{v:.0} ns");
    let row = vec![
        format!("{:.1}", c.runs),
        ns(c.programs_ns),
        ns(c.floor_ns),
        ns(c.body_ns),
        ns(c.serve_ns),
        ns(c.body_ns + c.serve_ns),
        ns(c.app_ns),
        ns(c.busy_ns),
        format!("{:.2}%", c.netpath_pct_of_busy),
        (if c.netpath_pct_of_busy <= GOAL_CPU_PCT {
            "met"
        } else {
            "not met"
        })
        .to_string(),
    ];
    let header = [
        "program runs",
        "programs",
        "floor",
        "own work",
        "serve process",
        "netpath",
        "redis-server",
        "machine busy",
        "netpath of busy",
        "goal",
    ];
    s.push_str(&table::markdown(&header, vec![row]));
    let _ = writeln!(s);
}
