//! The answer `compare` ends with, as text: the answer table (a row per driver), the claims
//! with their verdicts, and whether the hops add up (`measure::answer`).
use std::io::Write;

use crate::measure::answer::{AnswerRow, CheckSummary, Pair, Summary};
use crate::record::Spread;

/// A duration in µs, scaled: ns below 1 µs, ms from 1000 µs.
pub fn time(us: f64) -> String {
    let a = us.abs();
    if a >= 1000.0 {
        format!("{:.2} ms", us / 1000.0)
    } else if a >= 100.0 {
        format!("{us:.0} µs")
    } else if a >= 1.0 {
        format!("{us:.1} µs")
    } else {
        format!("{:.0} ns", us * 1000.0)
    }
}

/// A µs figure in a µs column: one decimal below 100, none above.
fn us(x: f64) -> String {
    if x.abs() >= 100.0 {
        format!("{x:.0}")
    } else {
        format!("{x:.1}")
    }
}

/// "12.8 [12.5–13.0]": median and range over rounds, µs.
pub(super) fn spread(s: Option<Spread>) -> String {
    match s {
        Some(s) if s.min < s.max => format!("{} [{}–{}]", us(s.median), us(s.min), us(s.max)),
        Some(s) => us(s.median),
        None => "–".into(),
    }
}

pub(super) fn ratio(p: &Pair) -> String {
    match (p.ci_low, p.ci_high) {
        (Some(l), Some(h)) => format!("{:.2}× [{l:.2}–{h:.2}]", p.ratio),
        _ => format!("{:.2}×", p.ratio),
    }
}

/// "+4.6: bridge +2.6, backlog +1.0": the hops' difference and the named hops, µs.
pub(super) fn difference(p: &Pair) -> String {
    // Three at most on a screen; the JSON has every named one.
    let hops: Vec<String> = (p.hops.iter().take(3))
        .map(|h| match h.dir.as_str() {
            "request" => format!("{} req {:+.1}{}", h.hop, h.delta_us, of_which(h)),
            "response" => format!("{} resp {:+.1}{}", h.hop, h.delta_us, of_which(h)),
            _ => format!("{} {:+.1}{}", h.hop, h.delta_us, of_which(h)),
        })
        .collect();
    let delta = p.rtt_delta_us.unwrap_or(p.hops_delta_us);
    format!("{delta:+.1}: {}", hops.join(", "))
}

/// `--parts`: " (conntrack +0.9)" when one part makes most of the hop's difference.
fn of_which(h: &crate::measure::pair::HopDelta) -> String {
    h.part.as_ref().map_or(String::new(), |p| {
        format!(" ({} {:+.1})", p.name, p.delta_us)
    })
}

pub(super) fn check(r: &AnswerRow) -> String {
    match &r.check {
        Some(c) if c.within_tolerance => "ok".into(),
        Some(c) => format!("off {:+.0}%", c.error_pct),
        None => "–".into(),
    }
}

pub(super) fn row(r: &AnswerRow, pairs: &[Pair]) -> Vec<String> {
    let p = pairs.iter().find(|p| p.driver == r.driver);
    let mut v = vec![
        r.driver.clone(),
        spread(r.spin_p50_us),
        spread(r.block_p50_us),
    ];
    match p {
        Some(p) => {
            let mark = if p.not_a_result { " ≈" } else { "" };
            let wait = if r.spin_p50_us.is_none() { " ᵇ" } else { "" };
            v.extend([
                format!("{}{wait}", p.reference),
                format!("{}{mark}", ratio(p)),
                difference(p),
            ]);
        }
        None => v.extend(["".into(), "".into(), "".into()]),
    }
    v.push(check(r));
    v
}

/// The answer: the table, the claims, the check, each said once.
pub fn write(s: &Summary, w: &mut dyn Write) -> std::io::Result<()> {
    if s.rows.is_empty() {
        return Ok(());
    }
    writeln!(
        w,
        "== the answer: untraced RTT p50 µs, median of the rounds [their range]; ratio to the reference [95% interval]"
    )?;
    writeln!(
        w,
        "   difference: the untraced RTT means', µs, and the hops that make it, netpath's own time and stalls taken out"
    )?;
    let header = [
        "driver",
        "spin p50",
        "block p50",
        "against",
        "ratio",
        "difference µs",
        "check",
    ];
    let rows = s.rows.iter().map(|r| row(r, &s.pairs)).collect();
    for l in super::table::text("   ", &header, rows, &[0, 3, 5, 6]) {
        writeln!(w, "{}", l.trim_end())?;
    }
    for n in notes(s) {
        writeln!(w, "   {n}")?;
    }
    claims(s, w)?;
    check_lines(s, w)
}

/// The lines under the answer table: what its marks mean, and a machine that changed speed.
pub(super) fn notes(s: &Summary) -> Vec<String> {
    let mut notes = Vec::new();
    if s.pairs.iter().any(|p| p.not_a_result) {
        notes.push("≈ the interval holds 1: not shown to differ".to_string());
    }
    for (d, n) in s
        .rows
        .iter()
        .filter_map(|r| r.note.as_ref().map(|n| (&r.driver, n)))
    {
        notes.push(format!(
            "ᵇ {d} measured blocking only, against blocking ({n})"
        ));
    }
    if let Some(m) = s.machine_speed_us.filter(|m| m.max > m.min * 1.1) {
        notes.push(format!(
            "the machine changed speed during the run: a loopback ping-pong before each sweep run took {:.1}–{:.1} µs; the intervals carry it",
            m.min, m.max
        ));
    }
    notes
}

fn claims(s: &Summary, w: &mut dyn Write) -> std::io::Result<()> {
    let judged: Vec<_> = s.claims.iter().collect();
    if judged.is_empty() {
        return Ok(());
    }
    writeln!(w, "== the claims, judged on this run")?;
    for c in judged {
        writeln!(w, "   {}: {}", c.verdict.name().to_uppercase(), c.claim)?;
        if c.figure != "–" {
            writeln!(w, "      {}", c.figure)?;
        }
        writeln!(w, "      {}", c.why)?;
    }
    Ok(())
}

/// "the hops add up to the untraced RTT mean (±5%) for 10 of 10 drivers".
pub(super) fn check_head(c: &CheckSummary) -> String {
    format!(
        "the hops add up to the untraced RTT mean (±{}%) for {} of {} drivers",
        crate::record::own::TOLERANCE_PCT,
        c.within,
        c.checked,
    )
}

/// How many round trips were taken out as stalls, and by which rule.
pub(super) fn stalls_line(c: &CheckSummary) -> String {
    format!(
        "stalls (round trips held up more than {}× the p50 beyond it) taken out of both means: {} untraced, {} traced",
        crate::record::stalls::STALL_FACTOR,
        c.stalls_untraced,
        c.stalls_traced
    )
}

fn check_lines(s: &Summary, w: &mut dyn Write) -> std::io::Result<()> {
    let c = &s.check;
    if c.checked == 0 {
        return Ok(());
    }
    writeln!(w, "== check: {}", check_head(c))?;
    writeln!(w, "   {}", stalls_line(c))?;
    for m in &c.misses {
        writeln!(w, "   {m}")?;
    }
    Ok(())
}
