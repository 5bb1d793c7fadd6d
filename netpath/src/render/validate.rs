//! `netpath validate`'s text: per driver and injected delay, what the hop tables recovered.
use std::io::Write;

use crate::validate::ValidateOutput;

impl super::Render for ValidateOutput {
    const KIND: &'static str = "validate";
    fn text(&self, w: &mut dyn Write) -> std::io::Result<()> {
        print(w, self)
    }
}

fn print(w: &mut dyn Write, v: &ValidateOutput) -> std::io::Result<()> {
    let (dir, hop) = v.at.expect();
    writeln!(
        w,
        "validate: each {dir} data packet held D on the {:?} device (a busy wait in a TC program); the {hop} hop must grow by D, netpath's own time taken out ({} rounds × {} requests, a program run charged {:.0} ns)",
        v.at, v.rounds, v.requests, v.run_cost_ns
    )?;
    let us = |x: f64| format!("{x:+.2} µs");
    let rows = v
        .cases
        .iter()
        .map(|c| {
            vec![
                c.driver.clone(),
                c.device.clone(),
                format!("{:.2}", c.injected_us),
                format!("{:.2}", c.held_us),
                us(c.recovered_us),
                us(c.error_us),
                format!(
                    "{:.2}–{:.2} µs",
                    c.recovered_spread.min, c.recovered_spread.max
                ),
                format!("{} {}", c.largest_other_hop, us(c.largest_other_us)),
                us(c.untraced_rtt_delta_us),
            ]
        })
        .collect();
    let header = [
        "driver",
        "device",
        "D µs",
        "held µs",
        "recovered",
        "error",
        "spread",
        "largest other hop",
        "untraced Δ",
    ];
    super::table::write(w, "    ", &header, rows, &[0, 1, 7])
}
