//! `netpath diff` as text: the sentence; each side's rounds and conditions; the RTT figures;
//! the hops ranked by their share of the difference (time added to one packet at p50, each
//! delta with its noise and a within-noise mark); the other groups in brief; how the noise was
//! taken; and what differed in the two sides' context.
use crate::measure::delta::Delta;
use crate::measure::diff::DiffResult;
use std::io::Write;

impl super::Render for DiffResult {
    const KIND: &'static str = "diff";
    fn text(&self, w: &mut dyn Write) -> std::io::Result<()> {
        print(w, self)
    }
}

fn median(d: &Delta, a: bool) -> String {
    let (rounds, s) = if a {
        (d.a_rounds, d.a.median)
    } else {
        (d.b_rounds, d.b.median)
    };
    if rounds == 0 {
        "-".into()
    } else {
        format!("{s:.2}")
    }
}

fn call(d: &Delta) -> &'static str {
    if !d.noise_known {
        "noise unknown"
    } else if d.within_noise {
        "~ within noise"
    } else {
        ""
    }
}

pub(super) fn table(
    w: &mut dyn Write,
    title: &str,
    rows: &[Delta],
    share: bool,
) -> std::io::Result<()> {
    if rows.is_empty() {
        return Ok(());
    }
    writeln!(w, "{title}")?;
    let mut header = vec!["figure", "A", "B", "delta", "noise"];
    if share {
        header.push("share");
    }
    header.push("call");
    let rows = rows
        .iter()
        .map(|d| {
            let name = match &d.note {
                Some(n) => format!("{} {n}", d.name),
                None => d.name.clone(),
            };
            let mut row = vec![
                name,
                median(d, true),
                median(d, false),
                format!("{:+.2}", d.delta),
                format!("{:.2}", d.noise),
            ];
            if share {
                row.push(d.share_pct.map(|p| format!("{p:.0}%")).unwrap_or_default());
            }
            row.push(call(d).to_string());
            row
        })
        .collect();
    // The call is words, left-aligned after the figures.
    super::table::write(w, "   ", &header, rows, &[0, header.len() - 1])?;
    writeln!(w)?;
    Ok(())
}

/// A ranked group on one line: its results, then how many are within noise.
fn brief(w: &mut dyn Write, title: &str, rows: &[Delta]) -> std::io::Result<()> {
    if rows.is_empty() {
        return Ok(());
    }
    let (results, quiet) = crate::measure::delta::results(rows);
    writeln!(
        w,
        "{title}: {}; {quiet} within noise",
        if results.is_empty() {
            "no result".to_string()
        } else {
            results.join(", ")
        }
    )?;
    Ok(())
}

/// Over the parts' table (`--parts`), in `diff` and `tune`.
pub(super) const PARTS_TITLE: &str = "parts (netfilter chains, qdiscs), µs per packet (mean; inside their hops), ranked by share of the difference";

pub fn print(w: &mut dyn Write, r: &DiffResult) -> std::io::Result<()> {
    writeln!(w, "{}", r.deltas.verdict)?;
    writeln!(w)?;
    for (ab, s) in [("A", &r.a), ("B", &r.b)] {
        let from = s
            .file
            .as_ref()
            .map(|f| format!(" from {f}"))
            .unwrap_or_default();
        writeln!(
            w,
            "{ab} {}{from}: {} round(s), backend {}, kernel {}",
            s.label,
            s.rounds,
            s.backend,
            s.kernel.as_deref().unwrap_or("unknown")
        )?;
        writeln!(w, "   {}", s.conditions)?;
    }
    writeln!(w)?;
    let d = &r.deltas;
    table(
        w,
        "RTT, µs (median over rounds; p50 and p99 untraced, then traced)",
        &d.rtt,
        false,
    )?;
    table(
        w,
        "per hop, µs added to one packet at p50 (traced), ranked by share of the difference",
        &d.hops_p50,
        true,
    )?;
    brief(w, "per hop, mean per packet", &d.hops_mean)?;
    brief(w, "per hop, p99 per packet", &d.hops_p99)?;
    writeln!(w)?;
    table(w, PARTS_TITLE, &d.parts, true)?;
    let mut rest: Vec<Delta> = d.one_way.clone();
    rest.extend(d.bulk.clone());
    rest.extend(d.passes.iter().cloned());
    table(
        w,
        "one-way (µs), bulk (Gbit/s), receive passes",
        &rest,
        false,
    )?;
    for n in &r.notes {
        writeln!(w, "note: {n}")?;
    }
    for x in &r.warnings {
        writeln!(w, "warning: {x}")?;
    }
    Ok(())
}
