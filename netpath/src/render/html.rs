//! `compare --report out.html` and `netpath report run.json -o out.html`: one self-contained
//! page (inline SVG charts, inline CSS, no script, nothing fetched) with the run's context
//! beside the figures, since a latency means little without its machine state.
use anyhow::Result;
use maud::{DOCTYPE, Markup, PreEscaped, html};

use super::Run;
use super::svg;
use crate::record::DriverReport;
use crate::record::saved::Stat;

const STYLE: &str = "
body { font-family: sans-serif; margin: 24px; color: #222; max-width: 1040px; }
h1 { font-size: 22px; margin-bottom: 4px; }
h2 { font-size: 17px; margin-top: 28px; border-bottom: 1px solid #ccc; }
table { border-collapse: collapse; font-size: 13px; margin: 8px 0; }
th, td { border: 1px solid #ccc; padding: 3px 7px; text-align: right; }
th:first-child, td:first-child { text-align: left; }
th { background: #f2f2f2; }
dl.run { display: grid; grid-template-columns: max-content auto; gap: 2px 14px; font-size: 13px; }
dl.run dt { font-weight: bold; }
dl.run dd { margin: 0; }
code { font-size: 12px; }
.chart svg { max-width: 100%; height: auto; }
.note { font-size: 12px; color: #555; }
.warn { color: #a40; }
";

/// The whole page.
pub fn page(view: &Run) -> Result<String> {
    let bars = svg::hop_bars(view, &[Stat::Mean, Stat::P50])?;
    let p99 = svg::hop_bars(view, &[Stat::P99])?;
    let cdf = svg::rtt_cdf(view)?;
    let m = html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                title { "netpath compare: " (names(view)) }
                style { (PreEscaped(STYLE)) (PreEscaped(super::html_answer::STYLE)) }
            }
            body {
                h1 { "netpath compare: " (names(view)) }
                (run_context(view))
                (super::html_answer::section(view))
                h2 { "Each driver's round trips" }
                (rtt_table(view))
                h2 { "Where the time goes" }
                p.note { "Each bar is one driver's traced run: the time each hop adds to one packet, the request's hops, a black mark, then the response's. Mean bars add up to the one-way means; percentile bars stack per-hop percentiles, which do not add exactly: the table below has the figures." }
                div.chart { (PreEscaped(bars)) }
                div.chart { (PreEscaped(p99)) }
                (hop_table(view))
                (super::journey_svg::section(view))
                h2 { "Distribution" }
                @if view.drivers.iter().any(|d| !d.rtt_cdf.is_empty()) {
                    div.chart { (PreEscaped(cdf)) }
                } @else {
                    p.note { "none: this file holds no round-trip distribution." }
                }
                h2 { "Lost events" }
                (lost_table(view))
            }
        }
    };
    Ok(m.into_string())
}

fn names(view: &Run) -> String {
    let n: Vec<&str> = view.drivers.iter().map(|d| d.driver.as_str()).collect();
    n.join(", ")
}

fn run_context(view: &Run) -> Markup {
    let Some(h) = &view.header else {
        return html! { p.warn { "This JSON has no header (written before netpath 0.1's versioned output): kernel, time and machine state unknown." } };
    };
    let m = &h.machine;
    let busy = m.loadavg[0] > 0.5 * m.online_cpus as f64;
    html! {
        dl.run {
            dt { "netpath" } dd { (h.netpath_version) " (output schema " (h.schema_version) ")" }
            dt { "command" } dd { code { (h.command_line.join(" ")) } }
            dt { "started (UTC)" } dd { (h.started_utc) }
            dt { "host, kernel" } dd { (h.hostname) ", " (h.kernel) }
            dt { "backend" } dd { (view.backend) }
            dt { "machine at start" } dd {
                (m.online_cpus) " CPUs online, load average "
                (format!("{:.2} {:.2} {:.2}", m.loadavg[0], m.loadavg[1], m.loadavg[2]))
                ", " (m.runnable) " runnable threads"
                @if busy { span.warn { " (busy: other work shared the CPUs, so wakeups were faster than on an idle machine and figures are not comparable with an idle run's)" } }
                @else { " (no other work at start)" }
            }
            @if let Some(m) = view.drivers.first().and_then(|d| d.machine.as_ref()) {
                dt { "during the run" } dd { (during(m)) }
            }
        }
    }
}

/// The machine while the first driver ran, as the text says it (`MachineState::line`).
fn during(m: &crate::sys::machine::MachineState) -> String {
    m.line().trim_start_matches("machine: ").to_string()
}

/// Wait mode, and placement (asked; observed when the run sampled it).
fn wait(d: &DriverReport) -> (String, String) {
    let p = match &d.placement {
        Some(seen) => format!("{} (observed: {})", d.cpus, seen.line()),
        None => d.cpus.to_string(),
    };
    (d.wait.to_string(), p)
}

/// What the round trips were, protocol-true.
fn traffic(view: &Run) -> String {
    let mut protos: Vec<&str> = view.drivers.iter().map(|d| d.proto.name()).collect();
    protos.dedup();
    match protos.as_slice() {
        ["tcp"] => "RTT of request/response over one TCP connection".into(),
        ["udp"] => "RTT of request/response, one UDP datagram each way".into(),
        ["icmp"] => "RTT of ICMP echo request and reply".into(),
        [] => "RTT of request/response (protocol not recorded)".into(),
        more => format!("RTT of request/response ({})", more.join(", ")),
    }
}

fn bulk(d: &DriverReport) -> String {
    d.bulk.as_ref().map_or("–".into(), |b| {
        let g = &b.gbit_per_s;
        format!("{:.1} [{:.1}–{:.1}]", g.median, g.min, g.max)
    })
}

fn rtt_table(view: &Run) -> Markup {
    html! {
        table {
            tr {
                th { "driver" } th { "untraced p50 µs [rounds]" } th { "untraced p99 µs" }
                th { "traced p50 µs" } th { "probe effect p50 / mean" } th { "rounds" }
                th { "receive passes, softirq runs per packet (req / resp)" }
                th { "attributed" } th { "bulk Gbit/s [rounds]" } th { "wait mode" } th { "placement" }
            }
            @for d in view.drivers {
                @let (w, p) = wait(d);
                tr {
                    td { (d.driver) }
                    td { (untraced_p50(d)) }
                    td { (d.untraced.as_ref().map_or("–".into(), |u| format!("{:.1}", u.p99_us))) }
                    td { (format!("{:.1}", d.traced.p50_us)) }
                    td {
                        (pct(d.probe_effect_p50_pct)) " / " (pct(d.probe_effect_mean_pct))
                        @if d.probe_effect_below_noise { br; span.warn { "below the noise" } }
                    }
                    td { (d.rr.as_ref().map_or(0, |r| r.rounds)) }
                    td { (passes(d)) }
                    td { (format!("{:.0}%", d.attributed_pct)) }
                    td { (bulk(d)) }
                    td { (w) } td { (p) }
                }
            }
        }
        p.note { (traffic(view)) "; traced rows count " (view.drivers.first().map_or(0, |d| d.traced.count)) " round trips." }
    }
}

fn untraced_p50(d: &DriverReport) -> String {
    match (&d.rr, &d.untraced) {
        (Some(r), _) => format!(
            "{:.1} [{:.1}–{:.1}]",
            r.p50_us.median, r.p50_us.min, r.p50_us.max
        ),
        (None, Some(u)) => format!("{:.1}", u.p50_us),
        _ => "–".into(),
    }
}

fn pct(p: Option<f64>) -> String {
    p.map_or("–".into(), |p| format!("{p:+.0}%"))
}

fn passes(d: &DriverReport) -> String {
    let p: Vec<String> = d
        .passes
        .iter()
        .map(|p| format!("{} {}, {}", p.dir, p.rx_passes, p.softirq_runs))
        .collect();
    p.join(" / ")
}

/// Hops as rows (request path, then response), drivers as columns: each cell the hop's mean
/// time per packet, its per-crossing p50 and p99 beside it.
fn hop_table(view: &Run) -> Markup {
    let order = view.hop_order();
    let cell = |d: &DriverReport, dir: &str, hop: &str| {
        (d.hops.iter())
            .find(|h| h.at.dir == dir && h.at.hop == hop)
            .map(|h| h.at.clone())
    };
    html! {
        table {
            tr {
                th { "hop" }
                @for d in view.drivers { th { (d.driver) br; span.note { "mean per packet (p50 / p99 per crossing), µs" } } }
            }
            @for dir in ["request", "response"] {
                @for (i, hop) in order.iter().enumerate() {
                    @if view.drivers.iter().any(|d| cell(d, dir, hop).is_some()) {
                        tr {
                            td { span style=(format!("color:{}", svg::css_colour(i))) { "■ " } (dir) " " (hop) }
                            @for d in view.drivers {
                                td {
                                    @if let Some(h) = cell(d, dir, hop) {
                                        (format!("{:.2}", h.per_packet(Stat::Mean)))
                                        span.note { (format!(" ({:.2} / {:.2})", h.p50_us, h.p99_us)) }
                                        @if h.mean_us > 0.0 && h.per_packet_us / h.mean_us > 1.5 {
                                            span.note { (format!(" ×{:.0}", h.per_packet_us / h.mean_us)) }
                                        }
                                    } @else { "–" }
                                }
                            }
                        }
                    }
                }
            }
        }
    }
}

/// Counters that count what went right (journeys started, completed, sampled), not losses.
const LOST_BOOKKEEPING: [&str; 3] = ["started", "completed", "samples"];

/// Counters as rows, drivers as columns: ten counters do not fit across a page.
fn lost_table(view: &Run) -> Markup {
    let keys: Vec<&&str> = view
        .drivers
        .first()
        .map(|d| d.lost.keys().collect())
        .unwrap_or_default();
    let lost = |k: &str| !LOST_BOOKKEEPING.contains(&k);
    let any = (view.drivers.iter()).any(|d| d.lost.iter().any(|(k, n)| lost(k) && *n > 0));
    if !any {
        return html! { p { "none: every event the kernel side sent arrived and was matched, for every driver." } };
    }
    html! {
        table {
            tr { th { "counter" } @for d in view.drivers { th { (d.driver) } } }
            @for k in &keys {
                tr { td { (k) } @for d in view.drivers { td { (d.lost.get(*k).copied().unwrap_or(0)) } } }
            }
        }
    }
}
