//! `netpath trace`'s text: each packet's timeline, one line per point, then the lost counts.
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
        let rows = (t.points.iter())
            .map(|p| {
                at += p.since_prev_us;
                let hop = if p.point == "send" && p.hop != "proxy" {
                    ""
                } else {
                    p.hop
                };
                vec![
                    format!("{at:.3} µs"),
                    format!("+{:.3}", p.since_prev_us),
                    p.point.to_string(),
                    p.device.to_string(),
                    p.kind.to_string(),
                    format!("cpu{}", p.cpu),
                    hop.to_string(),
                ]
            })
            .collect();
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
