//! The answer `compare` ends with, as text: a line per driver, then each driver against its
//! reference (`measure::answer`).
use std::io::Write;

use crate::measure::answer::{DriverLine, Summary};

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

fn driver_line(d: &DriverLine) -> String {
    let mut s = format!("{}: RTT p50", d.driver);
    match d.rtt_p50_us {
        Some(p) => s.push_str(&format!(" {} ({})", time(p), d.wait)),
        None => s.push_str(" not measured untraced"),
    }
    if let Some(b) = d.blocking_p50_us {
        s.push_str(&format!(", {} blocking", time(b)));
    }
    if !d.hops.is_empty() {
        let h: Vec<String> = d
            .hops
            .iter()
            .map(|h| format!("{} {} {} {:.0}%", h.hop, h.dir, time(h.us), h.share_pct))
            .collect();
        s.push_str(&format!("; largest hops: {}", h.join(", ")));
    }
    if let Some(n) = &d.note {
        s.push_str(&format!(" ({n})"));
    }
    s
}

/// The answer block.
pub fn write(s: &Summary, w: &mut dyn Write) -> std::io::Result<()> {
    if s.drivers.is_empty() {
        return Ok(());
    }
    writeln!(
        w,
        "== the answer (untraced p50s; hops: p50 per packet, netpath's own time taken out)"
    )?;
    for d in &s.drivers {
        writeln!(w, "   {}", driver_line(d))?;
    }
    if s.pairs.is_empty() && s.drivers.len() > 1 {
        writeln!(
            w,
            "   no driver was measured with its reference (host for bridge, bridge for the others; --reference DRIVER picks one)"
        )?;
    }
    for p in &s.pairs {
        writeln!(w, "   {}", p.sentence)?;
    }
    Ok(())
}
