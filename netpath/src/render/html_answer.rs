//! The HTML report's top: the answer table (a row per driver, each against its reference),
//! the ratios with their intervals as a chart, the claims with their verdicts and whether the
//! hops add up. The same figures as the text answer (`render::answer`), read from the run's
//! JSON `summary`, so a saved run renders as a live one.
use maud::{Markup, PreEscaped, html};

use super::Run;
use super::answer::{check, check_head, difference, notes, ratio, spread, stalls_line};
use crate::measure::answer::{CheckSummary, Pair, Summary};
use crate::measure::claims::ClaimVerdict;

pub const STYLE: &str = "
.verdict { display: inline-block; min-width: 150px; font-weight: bold; padding: 1px 6px; border-radius: 3px; }
.holds { background: #dff0d8; color: #24632a; }
.does-not-hold { background: #f6dcdc; color: #8a1f1f; }
.cannot-be-measured { background: #eee; color: #555; }
ul.claims { list-style: none; padding-left: 0; }
ul.claims li { margin: 8px 0; }
ul.claims .why { font-size: 12px; color: #555; margin-left: 162px; }
td.approx { color: #777; }
";

/// The answer section, or one line saying the file has none.
pub fn section(view: &Run) -> Markup {
    // A file written before netpath kept an answer reads as an empty one.
    let s = view.summary;
    if s.rows.is_empty() {
        return html! { p.warn { "This file holds no answer (written before netpath kept one): the figures below are each driver's own." } };
    }
    html! {
        h2 { "The answer" }
        p.note { "Untraced RTT p50 in µs, the median of the rounds [their range]; each driver's ratio to its reference with its 95% interval over the rounds; the difference: the untraced RTT means', µs, and the hops that make it, netpath's own time and stalls taken out." }
        (table(s))
        @for n in notes(s) { p.note { (n) } }
        (ratio_chart(&s.pairs))
        h2 { "The claims, judged on this run" }
        (claims(&s.claims))
        h2 { "Do the hops add up?" }
        (check_section(&s.check))
    }
}

fn table(s: &Summary) -> Markup {
    let header = [
        "driver",
        "spin p50 µs",
        "block p50 µs",
        "against",
        "ratio [95%]",
        "difference µs",
        "check",
    ];
    html! {
        table {
            tr { @for h in header { th { (h) } } }
            @for r in &s.rows {
                @let p = s.pairs.iter().find(|p| p.driver == r.driver);
                @let approx = p.is_some_and(|p| p.not_a_result);
                tr {
                    td { (r.driver) }
                    td { (spread(r.spin_p50_us)) }
                    td { (spread(r.block_p50_us)) }
                    @if let Some(p) = p {
                        td { (p.reference) @if r.spin_p50_us.is_none() { " ᵇ" } }
                        td.approx[approx] { (ratio(p)) @if approx { " ≈" } }
                        td style="text-align:left" { (difference(p)) }
                    } @else {
                        td { "–" } td { "–" } td { "–" }
                    }
                    td { (check(r)) }
                }
            }
        }
    }
}

/// A row per pair: the interval as a line, the ratio as a dot, 1× as a dashed rule.
fn ratio_chart(pairs: &[Pair]) -> Markup {
    if pairs.is_empty() {
        return html! { p.note { "No driver had a reference in this run: no ratios." } };
    }
    let (w, left, row_h) = (900.0, 230.0, 26.0);
    let lo = pairs
        .iter()
        .map(|p| p.ci_low.unwrap_or(p.ratio))
        .fold(1.0, f64::min);
    let hi = pairs
        .iter()
        .map(|p| p.ci_high.unwrap_or(p.ratio))
        .fold(1.0, f64::max);
    let (lo, hi) = (lo * 0.9, hi * 1.08);
    let x = |r: f64| left + (r - lo) / (hi - lo) * (w - left - 110.0);
    let h = row_h * pairs.len() as f64 + 30.0;
    let mut svg = format!(
        r##"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" viewBox="0 0 {w} {h}" font-family="sans-serif" font-size="13"><line x1="{x1:.1}" y1="4" x2="{x1:.1}" y2="{y2:.1}" stroke="#888" stroke-dasharray="4 3"/><text x="{x1:.1}" y="{ty:.1}" text-anchor="middle" fill="#555">1×</text>"##,
        x1 = x(1.0),
        y2 = h - 22.0,
        ty = h - 6.0,
    );
    for (i, p) in pairs.iter().enumerate() {
        let y = 16.0 + row_h * i as f64;
        let (l, r) = (p.ci_low.unwrap_or(p.ratio), p.ci_high.unwrap_or(p.ratio));
        let colour = if p.not_a_result { "#999" } else { "#2b6cb0" };
        svg += &format!(
            r##"<text x="{tx}" y="{ty:.1}" text-anchor="end">{} / {}</text><line x1="{:.1}" y1="{y:.1}" x2="{:.1}" y2="{y:.1}" stroke="{colour}" stroke-width="3"/><circle cx="{:.1}" cy="{y:.1}" r="5" fill="{colour}"/><text x="{:.1}" y="{ty:.1}">{}</text>"##,
            p.driver,
            p.reference,
            x(l),
            x(r),
            x(p.ratio),
            x(r) + 8.0,
            maud::html! { (ratio(p)) }.into_string(),
            tx = left - 10.0,
            ty = y + 4.5,
        );
    }
    svg += "</svg>";
    html! {
        div.chart { (PreEscaped(svg)) }
        p.note { "Each driver's ratio to its reference (dot) and 95% interval over the rounds (line); grey: the interval holds 1." }
    }
}

fn claims(cs: &[ClaimVerdict]) -> Markup {
    if cs.is_empty() {
        return html! { p.note { "none judged: this run measured none of the drivers they need." } };
    }
    html! {
        ul.claims {
            @for c in cs {
                li {
                    // The class is the verdict as the JSON spells it.
                    @let class = serde_json::to_value(c.verdict).ok().and_then(|v| v.as_str().map(String::from)).unwrap_or_default();
                    span class=(format!("verdict {class}")) { (c.verdict.name()) }
                    " " (c.claim)
                    @if c.figure != "–" { ": " strong { (c.figure) } }
                    div.why { (c.why) }
                }
            }
        }
    }
}

fn check_section(c: &CheckSummary) -> Markup {
    if c.checked == 0 {
        return html! { p.note { "Not checked: no driver had an untraced run to check against." } };
    }
    html! {
        p { "Checked: " (check_head(c)) ". " (stalls_line(c)) "." }
        @for m in &c.misses { p.warn { (m) } }
    }
}
