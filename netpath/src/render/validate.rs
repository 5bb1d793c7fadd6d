//! `netpath validate`'s text: per driver and injected delay, what the hop tables recovered.
use std::io::Write;

use crate::validate::{At, Chain, ValidateOutput};

impl super::Render for ValidateOutput {
    const KIND: &'static str = "validate";
    fn text(&self, w: &mut dyn Write) -> std::io::Result<()> {
        print(w, self)
    }
}

fn print(w: &mut dyn Write, v: &ValidateOutput) -> std::io::Result<()> {
    if let Some(chain) = v.chain {
        return rules(w, v, chain);
    }
    let at = v.at.unwrap_or(At::Server);
    let (dir, hop) = at.expect();
    writeln!(
        w,
        "validate: each {dir} data packet held D on the {:?} device (a busy wait in a TC program); the {hop} hop must grow by D, netpath's own time taken out ({} rounds × {} requests, a program run charged {:.0} ns)",
        at, v.rounds, v.requests, v.run_cost_ns
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

/// The netfilter case: per driver and rule count, what the chain's part recovered.
fn rules(w: &mut dyn Write, v: &ValidateOutput, chain: Chain) -> std::io::Result<()> {
    let (dirs, hop) = chain.expect();
    writeln!(
        w,
        "validate: N rules no packet matches in the {} chain ({} {}), against none in the same rounds; the part must recover the untraced RTT change within ±(10% + 0.2 µs), its {hop} hop less the part and every other hop and part stay within their noise (their range over rounds within an arm, at least that) ({} rounds × {} requests, parts on)",
        chain.name(),
        dirs.join(" and "),
        chain.hook().name(),
        v.rounds,
        v.requests
    )?;
    let us = |x: f64| format!("{x:+.2} µs");
    let rows = (v.rule_cases.iter())
        .map(|c| {
            vec![
                c.driver.clone(),
                c.part.clone(),
                c.rules.to_string(),
                c.seen.join(" "),
                format!("{:.2} → {:.2} µs", c.reference_us, c.part_us),
                us(c.recovered_us),
                us(c.untraced_rtt_delta_us),
                format!("{} ±{:.2}", us(c.error_us), c.tolerance_us),
                format!("{} ±{:.2}", us(c.hop_rest_us), c.hop_rest_noise_us),
                format!(
                    "{} {} ±{:.2}",
                    c.largest_other,
                    us(c.largest_other_us),
                    c.largest_other_noise_us
                ),
                if c.verdict.pass { "pass" } else { "FAIL" }.to_string(),
            ]
        })
        .collect();
    let header = [
        "driver",
        "part",
        "rules",
        "seen (dir:hop)",
        "part p50",
        "recovered",
        "untraced Δ",
        "error",
        "hop rest",
        "largest other",
        "verdict",
    ];
    super::table::write(w, "    ", &header, rows, &[0, 1, 3, 9])?;
    for c in v.rule_cases.iter().filter(|c| !c.verdict.pass) {
        writeln!(
            w,
            "    {} {} rules: {}",
            c.driver,
            c.rules,
            c.verdict.failed.join("; ")
        )?;
    }
    Ok(())
}
