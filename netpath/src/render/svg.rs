//! The report's charts, drawn with plotters' SVG backend: per driver a horizontal bar of the
//! time each hop adds to a packet (request hops, then response hops), and the RTT CDF of every
//! driver on one log-x chart.
use anyhow::{Result, anyhow};
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use super::Run;
use crate::record::DriverReport;
use crate::record::saved::Stat;

const WIDTH: u32 = 1000;
const FONT: &str = "sans-serif";

/// One colour per hop (and per driver on the CDF), distinguishable in print and for the
/// common colour-vision deficiencies (Okabe–Ito, then Tableau's).
const PALETTE: [RGBColor; 14] = [
    RGBColor(0, 114, 178),
    RGBColor(230, 159, 0),
    RGBColor(0, 158, 115),
    RGBColor(204, 121, 167),
    RGBColor(86, 180, 233),
    RGBColor(213, 94, 0),
    RGBColor(240, 228, 66),
    RGBColor(120, 120, 120),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(188, 189, 34),
    RGBColor(23, 190, 207),
    RGBColor(214, 39, 40),
    RGBColor(31, 119, 180),
];

pub fn colour(i: usize) -> RGBColor {
    PALETTE[i % PALETTE.len()]
}

pub fn css_colour(i: usize) -> String {
    let c = colour(i);
    format!("#{:02x}{:02x}{:02x}", c.0, c.1, c.2)
}

fn err<E: std::fmt::Debug>(e: E) -> anyhow::Error {
    anyhow!("drawing the chart: {e:?}")
}

/// One bar: its label and its segments (hop index, µs, direction).
struct Bar {
    label: String,
    segments: Vec<(usize, f64, bool)>,
}

fn bar(d: &DriverReport, stat: Stat, hops: &[&str], label: String) -> Bar {
    let mut segments = Vec::new();
    for dir in ["request", "response"] {
        let in_dir = d.hops.iter().map(|h| &h.at).filter(|h| h.dir == dir);
        for (i, h) in in_dir.enumerate() {
            let idx = hops.iter().position(|n| *n == h.hop).unwrap_or(0);
            segments.push((idx, h.per_packet(stat), dir == "response" && i == 0));
        }
    }
    Bar { label, segments }
}

/// One bar per driver and statistic, in that order.
fn bars(view: &Run, stats: &[Stat], hops: &[&str]) -> Vec<Bar> {
    view.drivers
        .iter()
        .flat_map(|d| {
            stats
                .iter()
                .map(|&s| bar(d, s, hops, format!("{} {}", d.driver, s.name())))
                .collect::<Vec<_>>()
        })
        .collect()
}

/// Stacked per-hop bars, one per driver and statistic.
pub fn hop_bars(view: &Run, stats: &[Stat]) -> Result<String> {
    let hops = view.hop_order();
    let bars = bars(view, stats, &hops);
    let total = |b: &Bar| b.segments.iter().map(|s| s.1).sum::<f64>();
    let xmax = bars.iter().map(total).fold(1.0, f64::max);
    let names: Vec<&str> = stats.iter().map(|s| s.name()).collect();
    let title = format!(
        "Time each hop adds to one packet, µs ({}): request hops, then response hops",
        names.join(" and ")
    );
    let rows = bars.len();
    let legend_rows = hops.len().div_ceil(4);
    let height = 90 + 34 * rows as u32 + 22 * legend_rows as u32 + 40;
    let mut buf = String::new();
    {
        let root = SVGBackend::with_string(&mut buf, (WIDTH, height)).into_drawing_area();
        root.fill(&WHITE).map_err(err)?;
        let (top, legend) = root.split_vertically(height - 22 * legend_rows as u32 - 16);
        let label_w = 210;
        let mut chart = ChartBuilder::on(&top)
            .caption(&title, (FONT, 17))
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(label_w)
            // Room right of the longest bar for its total.
            .build_cartesian_2d(0f64..xmax * 1.12, 0f64..rows as f64)
            .map_err(err)?;
        chart
            .configure_mesh()
            .disable_y_mesh()
            .y_labels(0)
            .x_desc("µs per packet")
            .label_style((FONT, 13))
            .draw()
            .map_err(err)?;
        for (r, b) in bars.iter().enumerate() {
            // Top row first.
            let y = (rows - 1 - r) as f64;
            let mut x = 0.0;
            for &(hop, us, dir_start) in &b.segments {
                let c = colour(hop);
                chart
                    .draw_series(std::iter::once(Rectangle::new(
                        [(x, y + 0.18), (x + us, y + 0.82)],
                        c.filled(),
                    )))
                    .map_err(err)?;
                if dir_start {
                    // Where the response's hops start.
                    chart
                        .draw_series(std::iter::once(PathElement::new(
                            vec![(x, y + 0.08), (x, y + 0.92)],
                            BLACK.stroke_width(2),
                        )))
                        .map_err(err)?;
                }
                x += us;
            }
            let style = TextStyle::from((FONT, 13)).pos(Pos::new(HPos::Left, VPos::Center));
            chart
                .draw_series(std::iter::once(Text::new(
                    format!(" {x:.1}"),
                    (x, y + 0.5),
                    style,
                )))
                .map_err(err)?;
            let (px, py) = chart.backend_coord(&(0.0, y + 0.5));
            let lstyle = TextStyle::from((FONT, 13)).pos(Pos::new(HPos::Right, VPos::Center));
            top.draw(&Text::new(b.label.clone(), (px - 8, py), lstyle))
                .map_err(err)?;
        }
        draw_legend(&legend, &hops, label_w + 12)?;
        root.present().map_err(err)?;
    }
    Ok(buf)
}

fn draw_legend(
    area: &DrawingArea<SVGBackend<'_>, plotters::coord::Shift>,
    hops: &[&str],
    left: i32,
) -> Result<()> {
    let col_w = 190;
    for (i, h) in hops.iter().enumerate() {
        let (x, y) = (left + (i % 4) as i32 * col_w, 4 + (i / 4) as i32 * 22);
        area.draw(&Rectangle::new(
            [(x, y), (x + 14, y + 14)],
            colour(i).filled(),
        ))
        .map_err(err)?;
        area.draw(&Text::new(*h, (x + 20, y + 1), (FONT, 13)))
            .map_err(err)?;
    }
    Ok(())
}

/// The RTT CDF of every driver on one chart, log-x.
pub fn rtt_cdf(view: &Run) -> Result<String> {
    let pts = |d: &DriverReport| -> Vec<(f64, f64)> {
        d.rtt_cdf
            .iter()
            .filter(|p| p[0] > 0.0)
            .map(|p| (p[0], p[1]))
            .collect()
    };
    let all: Vec<f64> = view.drivers.iter().flat_map(pts).map(|p| p.0).collect();
    let lo = all.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = all.iter().copied().fold(0.0, f64::max);
    let (lo, hi) = if all.is_empty() {
        (1.0, 1000.0)
    } else {
        (lo * 0.8, hi * 1.25)
    };
    let mut buf = String::new();
    {
        let root = SVGBackend::with_string(&mut buf, (WIDTH, 460)).into_drawing_area();
        root.fill(&WHITE).map_err(err)?;
        let mut chart = ChartBuilder::on(&root)
            .caption(
                "Round-trip time, every driver (CDF of the traced run; log scale)",
                (FONT, 17),
            )
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(60)
            .build_cartesian_2d((lo..hi).log_scale(), 0f64..1f64)
            .map_err(err)?;
        // plotters' own log-axis labels crowd near the decades' ends and leave short ranges
        // unlabelled: 1-2-5 ticks are drawn by hand.
        chart
            .configure_mesh()
            .x_desc("RTT, µs")
            .y_desc("fraction of round trips ≤ x")
            .x_labels(0)
            .x_label_formatter(&|_| String::new())
            .disable_x_mesh()
            .label_style((FONT, 13))
            .draw()
            .map_err(err)?;
        let ticks = ticks_125(lo, hi);
        chart
            .draw_series(
                ticks
                    .iter()
                    .map(|&t| PathElement::new(vec![(t, 0.0), (t, 1.0)], RGBColor(220, 220, 220))),
            )
            .map_err(err)?;
        let tstyle = TextStyle::from((FONT, 13)).pos(Pos::new(HPos::Center, VPos::Top));
        for &t in &ticks {
            let (px, py) = chart.backend_coord(&(t, 0.0));
            root.draw(&Text::new(format!("{t}"), (px, py + 6), tstyle.clone()))
                .map_err(err)?;
        }
        for (i, d) in view.drivers.iter().enumerate() {
            let c = colour(i);
            chart
                .draw_series(LineSeries::new(pts(d), c.stroke_width(2)))
                .map_err(err)?
                .label(d.driver.clone())
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 18, y)], c.stroke_width(3))
                });
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::LowerRight)
            .background_style(WHITE.mix(0.9))
            .border_style(BLACK)
            .label_font((FONT, 13))
            .draw()
            .map_err(err)?;
        root.present().map_err(err)?;
    }
    Ok(buf)
}

/// 1, 2, 5 times the powers of ten inside [lo, hi].
fn ticks_125(lo: f64, hi: f64) -> Vec<f64> {
    let mut out = Vec::new();
    let mut decade = 10f64.powf(lo.log10().floor());
    while decade <= hi {
        for m in [1.0, 2.0, 5.0] {
            let t = m * decade;
            if t >= lo && t <= hi {
                out.push(t);
            }
        }
        decade *= 10.0;
    }
    out
}

/// Every chart in one SVG document (`compare --svg`): the charts stacked as nested SVGs.
pub fn document(view: &Run) -> Result<String> {
    let charts = [
        hop_bars(view, &[Stat::Mean, Stat::P50])?,
        hop_bars(view, &[Stat::P99])?,
        rtt_cdf(view)?,
    ];
    let mut y = 0;
    let mut body = String::new();
    for c in &charts {
        let h = svg_height(c);
        body.push_str(&format!("<svg y=\"{y}\"{}\n", c.trim_start_matches("<svg")));
        y += h;
    }
    Ok(format!(
        "<svg width=\"{WIDTH}\" height=\"{y}\" viewBox=\"0 0 {WIDTH} {y}\" xmlns=\"http://www.w3.org/2000/svg\">\n{body}</svg>\n"
    ))
}

fn svg_height(svg: &str) -> u32 {
    svg.split_once("height=\"")
        .and_then(|(_, r)| r.split('"').next()?.parse().ok())
        .unwrap_or(0)
}
