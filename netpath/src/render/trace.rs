//! `netpath trace`'s text: each packet's timeline, one line per point, then the lost counts.
use crate::path::parts::NfHook;
use crate::trace::TraceOutput;
use std::io::Write;

impl super::Render for TraceOutput {
    const KIND: &'static str = "trace";
    fn text(&self, w: &mut dyn Write) -> std::io::Result<()> {
        print(w, self)
    }
}

pub fn print(w: &mut dyn Write, out: &TraceOutput) -> std::io::Result<()> {
    for (i, t) in out.timelines.iter().enumerate() {
        writeln!(
            w,
            "#{} {:<8} {}  {:.2} µs  ({} receive passes, {} NET_RX softirq runs)",
            i + 1,
            if t.points.first().is_some_and(|p| p.point != "send") {
                "packet"
            } else {
                t.dir
            },
            t.tuple,
            t.total_us,
            t.rx_passes,
            t.softirq_runs
        )?;
        if let Some(x) = &t.translated {
            writeln!(w, "   NAT: {x}")?;
        }
        // One row per point; no header: each cell carries its unit (µs, +, cpu) as before.
        let mut at = 0.0;
        let mut rows: Vec<(f64, Vec<String>)> = (t.points.iter())
            .map(|p| {
                at += p.since_prev_us;
                let hop = if p.point == "send" && p.hop != "proxy" {
                    ""
                } else {
                    p.hop
                };
                let row = vec![
                    format!("{at:.3} µs"),
                    format!("+{:.3}", p.since_prev_us),
                    p.point.to_string(),
                    p.device.to_string(),
                    p.kind.to_string(),
                    format!("cpu{}", p.cpu),
                    hop.to_string(),
                ];
                (at, row)
            })
            .collect();
        // A netfilter or qdisc part (`--parts`) goes before the point that ends the segment holding
        // it, marked as inside that hop: its time is already in the point's `+`.
        for p in &t.parts {
            let end = p.at_us + p.us;
            let i = rows
                .iter()
                .position(|(at, _)| *at >= end)
                .unwrap_or(rows.len());
            let row = vec![
                format!("{:.3} µs", p.at_us),
                format!("({:.3})", p.us),
                match p.hook {
                    NfHook::Qdisc => format!("  qdisc {}", p.name),
                    _ => format!("  nf {}", p.name),
                },
                if p.device.is_empty() {
                    p.netns.clone()
                } else {
                    p.device.clone()
                },
                p.hook.name().to_string(),
                String::new(),
                format!("in {}", p.hop),
            ];
            rows.insert(i, (end, row));
        }
        let rows = rows.into_iter().map(|(_, r)| r).collect();
        super::table::write(w, "   ", &[], rows, &[2, 3, 4, 5, 6])?;
    }
    let lost: Vec<String> = out.lost.iter().map(|(k, v)| format!("{k} {v}")).collect();
    writeln!(
        w,
        "{} timelines (backend {}); lost/unmatched: {}",
        out.timelines.len(),
        out.backend,
        lost.join(", ")
    )?;
    if !out.missing_tracepoints.is_empty() {
        writeln!(
            w,
            "not attached (their points are absent): {}",
            out.missing_tracepoints.join(", ")
        )?;
    }
    for u in &out.uncounted {
        writeln!(w, "not counted by this kernel: {u}")?;
    }
    Ok(())
}
