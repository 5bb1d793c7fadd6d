//! compare's table of several drivers (`--verbose`): the untraced figures per driver, the
//! per-round ratios between neighbouring runs, each driver's difference to its
//! reference, and the machine's state.
use std::io::Write;

use crate::record::DriverReport;

/// The summary table of several drivers, their ratios and the machine's state.
pub fn write(w: &mut dyn Write, reports: &[DriverReport]) -> std::io::Result<()> {
    table(w, reports)?;
    writeln!(
        w,
        "   ratios per round between neighbouring runs (untraced p50):"
    )?;
    ratios(w, reports)?;
    pair_checks(w, reports)?;
    if let Some(m) = reports.last().and_then(|r| r.machine.as_ref()) {
        writeln!(w, "   {}", m.line())?;
    }
    Ok(())
}

fn table(w: &mut dyn Write, reports: &[DriverReport]) -> std::io::Result<()> {
    let mut protos: Vec<&str> = Vec::new();
    for r in reports {
        if !protos.contains(&r.proto.name()) {
            protos.push(r.proto.name());
        }
    }
    let mode = reports
        .first()
        .map(|r| {
            format!(
                "{}, wait {}, cpus {}",
                protos.join(","),
                r.wait.name(),
                r.cpus
            )
        })
        .unwrap_or_default();
    writeln!(
        w,
        "== summary ({mode}; untraced medians; traced figures are in each driver's block)"
    )?;
    let rows = reports.iter().map(summary_row).collect();
    let header = [
        "driver",
        "req/s",
        "p50 µs",
        "p95 µs",
        "p99 µs",
        "Gbit/s",
        "retrans",
        "MTU",
        "attributed",
    ];
    super::table::write(w, "   ", &header, rows, &[0])?;
    Ok(())
}

/// A driver's row of the summary: untraced medians over rounds (traced figures without
/// rounds), bulk, MTU, attributed share.
fn summary_row(r: &DriverReport) -> Vec<String> {
    let (rps, p50, p95, p99) =
        r.rr.as_ref()
            .map(|x| {
                (
                    x.req_per_s.median,
                    x.p50_us.median,
                    x.p95_us.median,
                    x.p99_us.median,
                )
            })
            .unwrap_or((
                r.traced.req_per_s,
                r.traced.p50_us,
                r.traced.p95_us,
                r.traced.p99_us,
            ));
    let (g, rt) = r
        .bulk
        .as_ref()
        .map(|b| {
            (
                format!("{:.2}", b.gbit_per_s.median),
                format!("{:.0}", b.retransmits.median),
            )
        })
        .unwrap_or(("-".into(), "-".into()));
    let mtu = r
        .context
        .as_ref()
        .map(|c| c.client_mtu.to_string())
        .unwrap_or("-".into());
    vec![
        r.driver.clone(),
        format!("{rps:.0}"),
        format!("{p50:.1}"),
        format!("{p95:.1}"),
        format!("{p99:.1}"),
        g,
        rt,
        mtu,
        format!("{:.1}%", r.attributed_pct),
    ]
}

/// Each driver's difference to its reference, from the compensated hops and from the
/// untraced round trips.
fn pair_checks(w: &mut dyn Write, reports: &[DriverReport]) -> std::io::Result<()> {
    let checks = crate::record::own::pair_checks(reports);
    if checks.is_empty() {
        return Ok(());
    }
    writeln!(
        w,
        "   differences, hops less netpath's own time vs untraced RTT means:"
    )?;
    let rows = checks
        .into_iter()
        .map(|c| {
            let off = if c.within_tolerance {
                ""
            } else {
                "(differs by more than 0.3 µs)"
            };
            vec![
                format!("{} − {}", c.driver, c.reference),
                format!("{:+.2}", c.compensated_delta_us),
                format!("{:+.2}", c.untraced_delta_us),
                format!("{:.2}", c.untraced_delta_range_us),
                format!("{:+.2}", c.raw_delta_us),
                c.error_rounds_median_us
                    .map_or("–".to_string(), |e| format!("{e:+.2}")),
                off.to_string(),
            ]
        })
        .collect();
    let header = [
        "",
        "hops µs",
        "untraced µs",
        "its range µs",
        "raw hops µs",
        "error µs, median of rounds",
        "",
    ];
    super::table::write(w, "   ", &header, rows, &[0, 6])?;
    Ok(())
}

/// The per-round ratio lines of the summary.
fn ratios(w: &mut dyn Write, reports: &[DriverReport]) -> std::io::Result<()> {
    let rows = crate::record::per_round::neighbour_ratios(reports)
        .into_iter()
        .map(|c| {
            let rounds: Vec<String> = c.per_round.iter().map(|x| format!("{x:.2}")).collect();
            let mode = if c.mode_change {
                "(a round was a mode change of the machine)"
            } else {
                ""
            };
            vec![
                c.name,
                format!("{:.2}×", c.spread.median),
                format!("{:.2}–{:.2}", c.spread.min, c.spread.max),
                rounds.join(" "),
                mode.to_string(),
            ]
        })
        .collect();
    let header = ["", "median", "spread", "per round", ""];
    super::table::write(w, "   ", &header, rows, &[0, 3, 4])?;
    Ok(())
}
