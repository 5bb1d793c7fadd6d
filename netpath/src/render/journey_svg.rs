//! One sampled journey drawn with its CPUs as lanes, for the HTML report: each hop a bar on
//! the lane of the CPU it ended on, the NET_RX softirq runs as bands behind them with a tick
//! at each receive pass, and a dashed line where the journey moves to another CPU. So the
//! second receive pass in one softirq run, or the wakeup handing the packet to a thread on the
//! other CPU, is seen rather than read.
use maud::{Markup, PreEscaped, html};

use super::Run;
use crate::record::{Timeline, journey};

const WIDTH: f64 = 980.0;
const LEFT: f64 = 70.0;
const RIGHT: f64 = 20.0;
const TOP: f64 = 26.0;
const LANE: f64 = 46.0;
const BAR: f64 = 22.0;
const AXIS: f64 = 34.0;

/// A tick step of 1, 2 or 5 times a power of ten that puts at most 10 ticks on `span_us`.
fn tick_step(span_us: f64) -> f64 {
    let mut p = 1e-3;
    loop {
        for m in [1.0, 2.0, 5.0] {
            if span_us / (m * p) <= 10.0 {
                return m * p;
            }
        }
        p *= 10.0;
    }
}

/// The SVG of journey `t` (`title` above it); `colour` gives a hop's colour.
pub fn lanes(title: &str, t: &Timeline, colour: &dyn Fn(&str) -> String) -> String {
    let segs = journey::segments(t);
    let runs = journey::softirq_runs(t);
    let times = journey::times(t);
    let mut cpus: Vec<u16> = t.points.iter().map(|p| p.cpu).collect();
    cpus.sort_unstable();
    cpus.dedup();
    let t0 = t.start_ns;
    let t1 = times.last().copied().unwrap_or(t0).max(t0 + 1);
    let scale = (WIDTH - LEFT - RIGHT) / (t1 - t0) as f64;
    let x = |ns: u64| LEFT + (ns.saturating_sub(t0)) as f64 * scale;
    let lane = |cpu: u16| cpus.iter().position(|c| *c == cpu).unwrap_or(0);
    let y = |cpu: u16| TOP + lane(cpu) as f64 * LANE;
    let height = TOP + cpus.len() as f64 * LANE + AXIS;
    let span_us = (t1 - t0) as f64 / 1000.0;
    let step = tick_step(span_us);
    let ticks: Vec<f64> = (0..)
        .map(|i| i as f64 * step)
        .take_while(|v| *v <= span_us + 1e-9)
        .collect();
    let svg: Markup = html! {
        svg xmlns="http://www.w3.org/2000/svg" width=(WIDTH) height=(height)
            viewBox=(format!("0 0 {WIDTH} {height}")) font-family="sans-serif" font-size="11" {
            text x=(LEFT) y="14" font-size="13" font-weight="bold" { (title) }
            @for c in &cpus {
                text x="8" y=(y(*c) + LANE / 2.0 + 4.0) { "CPU " (c) }
                line x1=(LEFT) x2=(WIDTH - RIGHT) y1=(y(*c) + LANE) y2=(y(*c) + LANE) stroke="#ddd" {}
            }
            @for r in &runs {
                rect x=(x(r.start_ns)) y=(y(r.cpu) + 3.0) width=(((r.end_ns - r.start_ns) as f64 * scale).max(1.0))
                    height=(LANE - 6.0) fill="#fff3c4" stroke="#d9a400" stroke-dasharray="3 2" {
                    title { (format!("NET_RX softirq run on CPU {}: {} receive passes ({} runs counted by the kernel)", r.cpu, r.passes.len(), t.softirq_runs)) }
                }
                text x=(x(r.start_ns) + 2.0) y=(y(r.cpu) + LANE - 5.0) font-size="9" fill="#8a6d00" { "NET_RX softirq" }
            }
            @for s in &segs {
                @let w = ((s.end_ns - s.start_ns) as f64 * scale).max(1.0);
                @let top = y(s.cpu) + (LANE - BAR) / 2.0 - 4.0;
                rect x=(x(s.start_ns)) y=(top) width=(w) height=(BAR) fill=(colour(&s.hop)) stroke="#fff" stroke-width="0.5" {
                    title { (format!("{} {:.2} µs on CPU {} (to {} {})", s.hop, (s.end_ns - s.start_ns) as f64 / 1000.0, s.cpu, t.points[s.last].point, t.points[s.last].device)) }
                }
                @if w > 7.0 * s.hop.len() as f64 {
                    text x=(x(s.start_ns) + w / 2.0) y=(top + BAR / 2.0 + 4.0) text-anchor="middle" fill="#fff" { (s.hop) }
                }
            }
            // Where the journey moves to another CPU.
            @for w in segs.windows(2).filter(|w| w[0].cpu != w[1].cpu) {
                line x1=(x(w[0].end_ns)) x2=(x(w[1].start_ns)) y1=(y(w[0].cpu) + LANE / 2.0 - 4.0)
                    y2=(y(w[1].cpu) + LANE / 2.0 - 4.0) stroke="#333" stroke-dasharray="2 2" {}
            }
            @for r in &runs {
                @for &i in &r.passes {
                    path d=(format!("M{0} {1} l-4 -7 h8 z", x(times[i]), y(r.cpu) + 3.0)) fill="#8a6d00" {
                        title { (format!("receive pass on {}", t.points[i].device)) }
                    }
                }
            }
            @let axis = TOP + cpus.len() as f64 * LANE;
            line x1=(LEFT) x2=(WIDTH - RIGHT) y1=(axis) y2=(axis) stroke="#999" {}
            @for v in &ticks {
                @let tx = LEFT + v * 1000.0 * scale;
                line x1=(tx) x2=(tx) y1=(axis) y2=(axis + 4.0) stroke="#999" {}
                text x=(tx) y=(axis + 15.0) text-anchor="middle" { (format!("{}", (v * 1000.0).round() / 1000.0)) }
            }
            text x=(WIDTH - RIGHT) y=(axis + 29.0) text-anchor="end" { "µs since the send" }
        }
    };
    svg.into_string()
}

/// The journey of a driver the report draws: its first request with every point from the send
/// (else its first journey).
pub fn pick(timelines: &[Timeline]) -> Option<&Timeline> {
    timelines
        .iter()
        .find(|t| t.dir == "request" && t.points.first().is_some_and(|p| p.point == "send"))
        .or(timelines.first())
}

/// The report's section: one journey per driver that kept any, hops coloured as in the bars.
pub fn section(view: &Run) -> Markup {
    let order = view.hop_order();
    // A hop the bars do not show (one journey crosses more than the table's hops) takes a
    // colour after theirs, by its place in the hop model.
    let colour = |hop: &str| {
        let model = netpath_common::Hop::ALL
            .iter()
            .position(|h| h.name() == hop);
        super::svg::css_colour(match order.iter().position(|h| *h == hop) {
            Some(i) => i,
            None => order.len() + model.unwrap_or(0),
        })
    };
    let drawn: Vec<(String, String)> = (view.drivers.iter())
        .filter_map(|d| {
            let t = pick(&d.timelines)?;
            let s = |n: u16| if n == 1 { "" } else { "s" };
            let title = format!(
                "{}: a {} ({}), {:.1} µs, {} receive pass{} in {} NET_RX softirq run{}",
                d.driver,
                t.dir,
                t.tuple,
                t.total_us,
                t.rx_passes,
                if t.rx_passes == 1 { "" } else { "es" },
                t.softirq_runs,
                s(t.softirq_runs)
            );
            Some((d.driver.clone(), lanes(&title, t, &colour)))
        })
        .collect();
    html! {
        @if !drawn.is_empty() {
            h2 { "One journey, CPU by CPU" }
            p.note { "One sampled packet of each driver from its send to its receive's return: each hop a bar on the CPU it ended on, NET_RX softirq runs as yellow bands with a mark at each receive pass, a dashed line where the packet moves to another CPU. One packet, not a statistic: the tables above have those." }
            @for (_, svg) in &drawn { div.chart { (PreEscaped(svg)) } }
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn ticks_are_round_and_few() {
        for (span, step) in [(14.4, 2.0), (60.0, 10.0), (3.0, 0.5), (250.0, 50.0)] {
            assert!((super::tick_step(span) - step).abs() < 1e-9, "{span}");
        }
    }
}
