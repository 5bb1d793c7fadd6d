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
    writeln!(
        w,
        "   {:<15} {:<24} {:>8} {:>8} {:>11} {:>8} {:>13}   {:<28} {:>11}",
        "driver",
        "device",
        "D µs",
        "held",
        "recovered",
        "error",
        "spread",
        "largest other hop",
        "untraced Δ"
    )?;
    for c in &v.cases {
        writeln!(
            w,
            "   {:<15} {:<24} {:>8.2} {:>8.2} {:>+9.2}µs {:>+6.2}µs {:>5.2}–{:<5.2}µs   {:<21} {:>+5.2}µs {:>+9.2}µs",
            c.driver,
            c.device,
            c.injected_us,
            c.held_us,
            c.recovered_us,
            c.error_us,
            c.recovered_spread.min,
            c.recovered_spread.max,
            c.largest_other_hop,
            c.largest_other_us,
            c.untraced_rtt_delta_us
        )?;
    }
    Ok(())
}
