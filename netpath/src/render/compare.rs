//! The run record as text: each driver's block (printed as soon as it is measured: runs are
//! long) and the summary of several; `CompareOutput` is what `compare` prints at the end.
use std::io::Write;

use serde::Serialize;

use crate::probe::backend::Backend;
use crate::record::{DriverReport, RttSummary};

/// `compare`'s result (its JSON body: `summary`, the answer, first; then `backend` and
/// `drivers`, every record it was drawn from).
#[derive(Serialize, serde::Deserialize, schemars::JsonSchema)]
#[serde(bound(deserialize = "'de: 'static"))]
pub struct CompareOutput {
    /// The answer: a row per driver, each against its reference, the claims, the check.
    // A file written before netpath kept an answer reads as an empty one (no rows).
    #[serde(default)]
    pub summary: crate::measure::answer::Summary,
    pub backend: Backend,
    pub drivers: Vec<DriverReport>,
    /// `--verbose`: a text file (`-o run.txt`) has every line, as the run printed.
    #[serde(skip)]
    pub verbose: bool,
}

impl super::Render for CompareOutput {
    const KIND: &'static str = "compare";
    /// The answer: the run printed each driver's block and the table of several as it went.
    fn text(&self, w: &mut dyn std::io::Write) -> std::io::Result<()> {
        super::answer::write(&self.summary, w)
    }

    fn full_text(&self, w: &mut dyn std::io::Write) -> std::io::Result<()> {
        full_text(w, self, self.verbose)
    }

    /// From the records as they are, as `netpath report` renders a saved run's.
    fn page(
        &self,
        backend: Option<&str>,
        f: super::output::FileFormat,
    ) -> Option<anyhow::Result<String>> {
        let header = crate::record::header::Header::new(Self::KIND, backend);
        Some(super::page(&super::Run::of(Some(&header), self), f))
    }
}

/// `compare`'s text while it runs: each driver's block as soon as it is measured (short, or
/// every line with `verbose`), the machine's state and placement once, and with `verbose` the
/// table of several.
#[derive(Default)]
pub struct TextSink {
    pub verbose: bool,
    /// Each driver's short block (a few drivers); without, the answer alone carries them.
    pub blocks: bool,
    said_machine: bool,
}

/// Drivers whose short blocks fit on one screen beside the answer.
pub const BLOCKS_UP_TO: usize = 3;

impl TextSink {
    pub fn new(verbose: bool, drivers: usize) -> TextSink {
        TextSink {
            verbose,
            blocks: drivers <= BLOCKS_UP_TO,
            said_machine: false,
        }
    }

    /// One driver's block, to `w`.
    pub fn driver_to(&mut self, w: &mut dyn Write, r: &DriverReport) -> std::io::Result<()> {
        if self.verbose {
            driver(w, r)?;
            return writeln!(w);
        }
        if !self.said_machine {
            if let Some(m) = &r.machine {
                writeln!(w, "{}", m.line())?;
            }
            if let Some(p) = &r.placement {
                writeln!(w, "{} (first driver; --verbose: each)", p.line())?;
            }
            if !self.blocks {
                writeln!(
                    w,
                    "each driver's hops: -d DRIVER (up to {BLOCKS_UP_TO} drivers show their blocks) or --verbose"
                )?;
            }
            writeln!(w)?;
            self.said_machine = true;
        }
        if self.blocks {
            super::block::driver(w, r)?;
            writeln!(w)?;
        }
        Ok(())
    }

    /// The table of several (`verbose` only), to `w`.
    pub fn summary_to(&mut self, w: &mut dyn Write, all: &[DriverReport]) -> std::io::Result<()> {
        if self.verbose {
            super::several::write(w, all)?;
            writeln!(w)?;
        }
        Ok(())
    }
}

/// As `println!` does: a failed print panics (a closed pipe ends quietly, see `main`).
fn or_panic(r: std::io::Result<()>) {
    if let Err(e) = r {
        panic!("failed printing to stdout: {e}");
    }
}

impl crate::record::Sink for TextSink {
    fn driver(&mut self, r: &DriverReport) {
        or_panic(self.driver_to(&mut std::io::stdout().lock(), r));
    }

    fn summary(&mut self, all: &[DriverReport]) {
        or_panic(self.summary_to(&mut std::io::stdout().lock(), all));
    }
}

/// Said before a compare run: the backend (and with `verbose` the hops it can see).
pub fn backend_line(w: &mut dyn Write, backend: Backend, verbose: bool) -> std::io::Result<()> {
    if verbose {
        let hops: Vec<&str> = backend.visible_hops().iter().map(|h| h.name()).collect();
        writeln!(
            w,
            "backend: {} (hops it can see: {})",
            backend.name(),
            hops.join(", ")
        )
    } else {
        writeln!(w, "backend: {}", backend.name())
    }
}

/// Everything a text run of compare prints, from its result: the backend, each driver's
/// block, and the answer (`netpath report run.json --format text`, `-o run.txt`, the
/// README's example).
pub fn full_text(w: &mut dyn Write, out: &CompareOutput, verbose: bool) -> std::io::Result<()> {
    full_text_with(w, out, TextSink::new(verbose, out.drivers.len()))
}

/// `full_text` through `sink` (e.g. with each driver's short block, whatever their number).
pub fn full_text_with(
    w: &mut dyn Write,
    out: &CompareOutput,
    mut sink: TextSink,
) -> std::io::Result<()> {
    backend_line(w, out.backend, sink.verbose)?;
    for r in &out.drivers {
        sink.driver_to(w, r)?;
    }
    sink.summary_to(w, &out.drivers)?;
    super::Render::text(out, w)
}

/// One driver's block: mode, RTT, per-hop table, attribution, passes, drops, losses.
pub fn driver(w: &mut dyn Write, r: &DriverReport) -> std::io::Result<()> {
    writeln!(w, "== driver {}  (backend {})", r.driver, r.backend)?;
    mode(w, r)?;
    if !r.function_probes.is_empty() {
        let f: Vec<String> = r
            .function_probes
            .iter()
            .map(|p| format!("{} ({})", p.function, p.mechanism))
            .collect();
        writeln!(w, "   function probes: {}", f.join(", "))?;
    }
    if !r.missing_tracepoints.is_empty() {
        writeln!(
            w,
            "   this kernel lacks {}: neighbouring hops merge",
            r.missing_tracepoints.join(", ")
        )?;
    }
    phases(w, r)?;
    rtts(w, r)?;
    if r.untraced.is_some() {
        writeln!(
            w,
            "   probe effect: mean {:+.1}%  p50 {:+.1}%{}",
            r.probe_effect_mean_pct.unwrap_or(0.0),
            r.probe_effect_p50_pct.unwrap_or(0.0),
            if r.probe_effect_below_noise {
                "  (traced p50 below every untraced round: noise or a change of the machine's \
                 state between runs outweighs it; not a result)"
            } else {
                ""
            }
        )?;
    }
    hop_table(w, r)?;
    tail(w, r)?;
    Ok(())
}

/// The traced and untraced round trips, a row each.
fn rtts(w: &mut dyn Write, r: &DriverReport) -> std::io::Result<()> {
    let row = |label: &str, s: &RttSummary| {
        let mut v = vec![label.to_string(), s.count.to_string()];
        v.extend([s.mean_us, s.p50_us, s.p95_us, s.p99_us, s.max_us].map(|x| format!("{x:.1}")));
        v.push(format!("{:.0}", s.req_per_s));
        v
    };
    let mut rows = vec![row("RTT traced", &r.traced)];
    rows.extend(r.untraced.iter().map(|u| row("RTT untraced", u)));
    let header = ["", "n", "mean µs", "p50", "p95", "p99", "max", "req/s"];
    super::table::write(w, "   ", &header, rows, &[0])?;
    Ok(())
}

/// The untraced phases over rounds (request/response, bulk, burst) and the run's context.
fn phases(w: &mut dyn Write, r: &DriverReport) -> std::io::Result<()> {
    if let Some(rr) = &r.rr {
        writeln!(
            w,
            "   RR untraced, median of {} round(s): {:.0} req/s  p50 {:.1} µs [{:.1}–{:.1}]  p95 {:.1}  p99 {:.1} µs [{:.1}–{:.1}]",
            rr.rounds,
            rr.req_per_s.median,
            rr.p50_us.median,
            rr.p50_us.min,
            rr.p50_us.max,
            rr.p95_us.median,
            rr.p99_us.median,
            rr.p99_us.min,
            rr.p99_us.max
        )?;
    }
    if let Some(b) = &r.bulk {
        writeln!(
            w,
            "   bulk {} stream(s): {:.2} Gbit/s [{:.2}–{:.2}]  retransmits {:.0}",
            b.streams,
            b.gbit_per_s.median,
            b.gbit_per_s.min,
            b.gbit_per_s.max,
            b.retransmits.median
        )?;
    }
    for b in &r.burst {
        writeln!(
            w,
            "   burst ×{} {:.0} req/s: sent {}/{} done {}  p50 {:.1} µs  p99 {:.1} µs (uncorrected {:.1})  max {:.1}",
            b.multiplier,
            b.rate,
            b.sent,
            b.scheduled,
            b.completed,
            b.p50_us,
            b.p99_us,
            b.p99_uncorrected_us,
            b.max_us
        )?;
    }
    if let Some(c) = &r.context {
        let rps: Vec<String> = c
            .devices
            .iter()
            .filter(|d| {
                d.rps_cpus
                    .iter()
                    .any(|m| !m.trim_start_matches(['0', ','].as_ref()).is_empty())
            })
            .map(|d| format!("{}@{}={}", d.name, d.netns, d.rps_cpus.join("/")))
            .collect();
        writeln!(
            w,
            "   context: MTU client {} server {}; client TCP retrans {} (spurious by DSACK {}) ofo {} sack-reorder {}; server retrans {} ofo {}; RPS {}",
            c.client_mtu,
            c.server_mtu,
            c.client_counters.retrans_segs,
            c.client_counters.tcp_dsack_recv,
            c.client_counters.tcp_ofo_queue,
            c.client_counters.tcp_sack_reorder,
            c.server_counters.retrans_segs,
            c.server_counters.tcp_ofo_queue,
            if rps.is_empty() {
                "off everywhere".to_string()
            } else {
                rps.join(" ")
            }
        )?;
        if let Some(wire) = &c.wire {
            writeln!(w, "   wire: {wire}")?;
        }
    }
    Ok(())
}

/// The per-hop table (netpath's own time taken out, with a column for it), the one-way and
/// turnaround distributions.
fn hop_table(w: &mut dyn Write, r: &DriverReport) -> std::io::Result<()> {
    let us = |x: f64| format!("{x:.2}µs");
    let rows = r
        .hops
        .iter()
        .map(|h| {
            vec![
                h.at.hop.to_string(),
                h.at.dir.to_string(),
                h.at.crossings.to_string(),
                us(h.compensated_us),
                us(h.at.own_us),
                us(h.at.per_packet_us),
                us(h.compensated_p50_us),
                us(h.at.p99_us),
                format!("{:.1}%", h.share_pct),
            ]
        })
        .collect();
    let header = [
        "hop",
        "dir",
        "crossings",
        "per-pkt",
        "netpath",
        "raw",
        "p50",
        "p99",
        "share",
    ];
    super::table::write(w, "   ", &header, rows, &[0, 1])?;
    // The one-way times and the server's turnaround, each a row.
    let row = |name: String, d: &crate::record::Distribution| {
        let mut v = vec![name, d.count.to_string()];
        v.extend(
            [
                d.compensated_mean_us,
                d.compensated_p50_us,
                d.p99_us,
                d.mean_us,
                d.own_us,
            ]
            .map(|x| format!("{x:.2}")),
        );
        v
    };
    let mut rows: Vec<Vec<String>> = (r.one_way.iter())
        .map(|(dir, d)| row(format!("one-way {dir}"), d))
        .collect();
    rows.extend(
        r.turnaround
            .iter()
            .map(|t| row("server turnaround".into(), t)),
    );
    let header = ["", "n", "mean µs", "p50", "p99", "raw mean", "netpath"];
    super::table::write(w, "   ", &header, rows, &[0])?;
    if let Some(c) = &r.consistency {
        writeln!(w, "   {}", consistency_line(c))?;
    }
    Ok(())
}

/// Whether the hops, netpath's own time taken out, add up to the untraced round trip.
pub fn consistency_line(c: &crate::record::own::Consistency) -> String {
    format!(
        "check: hops less netpath's own time ({:.2} µs, a program run {:.0} ns){} = {:.2} µs vs untraced RTT mean {:.2} µs, stalls out of both ({:+.1}%{}), p50 {:.2} vs {:.2} µs ({:+.1}%){}",
        c.own_us,
        c.run_cost_ns,
        match (c.edges_us, c.edges_own_us) {
            (Some(e), Some(o)) => format!(
                " + the client's syscall edges outside the hops {e:.2} µs less its own {o:.2}"
            ),
            _ => String::new(),
        },
        c.stall_free_compensated_sum_us,
        c.stall_free_untraced_mean_us,
        c.error_stall_free_pct,
        c.error_rounds_median_pct.map_or(String::new(), |e| format!(
            "; every round's, median {e:+.1}%"
        )),
        c.compensated_p50_sum_us,
        c.untraced_p50_us,
        c.error_p50_pct,
        if c.within_tolerance {
            String::new()
        } else {
            format!(
                "  beyond the tolerance (±{}% or ±{} µs; the stall-free untraced mean moved {:.1}% between rounds)",
                crate::record::own::TOLERANCE_PCT,
                crate::record::own::TOLERANCE_US,
                c.untraced_range_pct
            )
        }
    )
}

/// Attribution, receive passes, drops, program costs and every loss counted or not.
fn tail(w: &mut dyn Write, r: &DriverReport) -> std::io::Result<()> {
    writeln!(
        w,
        "   attribution: request + response + turnaround = {:.2} µs vs RTT mean {:.2} µs ({:.1}%), unattributed {:.2} µs",
        r.attributed_us, r.rtt_mean_us, r.attributed_pct, r.unattributed_us
    )?;
    let passes: Vec<String> = r
        .passes
        .iter()
        .map(|p| {
            format!(
                "{} {} pass/{} softirq ×{}",
                p.dir, p.rx_passes, p.softirq_runs, p.packets
            )
        })
        .collect();
    if !passes.is_empty() {
        writeln!(
            w,
            "   receive passes/softirq runs per packet: {}",
            passes.join(", ")
        )?;
    }
    for d in &r.drops {
        writeln!(
            w,
            "   DROP reason {} in hop {} ({} after {} on {}) ×{}",
            d.reason_name, d.hop, d.dir, d.last_point, d.device, d.count
        )?;
    }
    if !r.prog_costs.is_empty() {
        let rows = (r.prog_costs.iter())
            .map(|c| {
                vec![
                    c.program.clone(),
                    c.runs.to_string(),
                    format!("{:.1}", c.runs_per_rtt),
                    format!("{:.0}", c.avg_ns),
                ]
            })
            .collect();
        let header = ["program", "runs", "runs/RTT", "avg ns"];
        super::table::write(w, "   ", &header, rows, &[0])?;
    }
    let lost: Vec<String> = r.lost.iter().map(|(k, v)| format!("{k} {v}")).collect();
    writeln!(w, "   events: {}", lost.join(", "))?;
    for u in &r.uncounted {
        writeln!(w, "   not counted by this kernel: {u}")?;
    }
    Ok(())
}

/// The lines of a driver's block on run mode, placement, machine, rounds and the block run.
fn mode(w: &mut dyn Write, r: &DriverReport) -> std::io::Result<()> {
    let napi = match r.busy_poll_napi {
        Some((0, _)) | Some((_, 0)) => {
            "  (busy-poll: a receiving device has no NAPI, SO_INCOMING_NAPI_ID 0: those receives block)"
        }
        _ => "",
    };
    writeln!(
        w,
        "   {} request/response, wait {}, cpus {}{napi}",
        r.proto.name().to_uppercase(),
        r.wait.name(),
        r.cpus
    )?;
    if let Some(p) = &r.placement {
        writeln!(w, "   {}", p.line())?;
    }
    if let Some(m) = &r.machine {
        writeln!(w, "   {}", m.line())?;
    }
    for row in r.round_detail.iter().filter(|x| x.mode_change) {
        writeln!(
            w,
            "   round {}: wakeup p50 {:.1} µs differs from the other rounds' by more than the data path ({:.1} µs): a mode change of the machine",
            row.round,
            row.wakeup_p50_us.unwrap_or(0.0),
            row.data_path_p50_us.unwrap_or(0.0)
        )?;
    }
    if let Some(b) = &r.block {
        writeln!(
            w,
            "   RTT block (what an application sees): untraced p50 {:.1} µs, traced p50 {:.1} µs; wakeup (all its parts) p50 request {:.1} µs ({:.0}% of its one-way), response {:.1} µs; {}",
            b.p50_us(),
            b.traced.p50_us,
            b.wakeup_p50("request").unwrap_or(0.0),
            b.wakeup_share("request").unwrap_or(0.0),
            b.wakeup_p50("response").unwrap_or(0.0),
            b.placement.clone().unwrap_or_default().line()
        )?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_answer_is_the_first_thing_in_the_json() {
        let out = CompareOutput {
            summary: Default::default(),
            backend: Backend::Tracepoint,
            drivers: Vec::new(),
            verbose: false,
        };
        let j = crate::record::header::to_json("compare", Some("tracepoint"), &out).unwrap();
        let at = |k: &str| j.find(&format!("\"{k}\"")).unwrap();
        assert!(
            at("header") < at("summary") && at("summary") < at("drivers"),
            "{j}"
        );
    }
}
