//! A driver's block as people scan it: its mode, the round trip traced and untraced, the hops
//! in path order with one per-packet time column (netpath's own time taken out), and what was
//! lost only when something was. `--verbose` prints every line `compare::driver` has.
use std::io::Write;

use super::answer::time;
use crate::path::parts::NfHook;
use crate::record::{DriverReport, RttSummary};

/// A table without borders, its columns after the first two right-aligned, indented.
pub fn table(header: &[&str], rows: Vec<Vec<String>>) -> Vec<String> {
    table_left(header, rows, &[0, 1])
}

/// A table without borders, indented: the columns in `left` left-aligned (names), the
/// others right-aligned (figures).
pub fn table_left(header: &[&str], rows: Vec<Vec<String>>, left: &[usize]) -> Vec<String> {
    super::table::text("   ", header, rows, left)
}

fn rtt(label: &str, s: &RttSummary) -> String {
    format!(
        "   RTT {label}: p50 {}  p99 {}  max {}  mean {}  (n={}, {:.0} req/s)",
        time(s.p50_us),
        time(s.p99_us),
        time(s.max_us),
        time(s.mean_us),
        s.count,
        s.req_per_s
    )
}

/// The round trip: untraced over rounds, traced, blocking; a traced figure below its
/// untraced one is flagged (probes only add work: that is the machine's noise).
fn round_trip(w: &mut dyn Write, r: &DriverReport) -> std::io::Result<()> {
    if let Some(rr) = &r.rr {
        writeln!(
            w,
            "   RTT untraced ({} wait, median of {} round(s)): p50 {} [{}–{}]  p99 {}  {:.0} req/s",
            r.wait.name(),
            rr.rounds,
            time(rr.p50_us.median),
            time(rr.p50_us.min),
            time(rr.p50_us.max),
            time(rr.p99_us.median),
            rr.req_per_s.median
        )?;
    }
    writeln!(w, "{}", rtt("traced", &r.traced))?;
    if let Some(u) = &r.untraced
        && r.traced.p50_us < u.p50_us
    {
        writeln!(
            w,
            "   FLAG: traced p50 {} is below its round's untraced p50 {}: noise or a change of the machine's state outweighs the probes here; not a result",
            time(r.traced.p50_us),
            time(u.p50_us)
        )?;
    }
    if let Some(b) = &r.block {
        let flag = if b.probe_effect_below_noise {
            "  FLAG: traced below every untraced round, not a result"
        } else {
            ""
        };
        writeln!(
            w,
            "   RTT blocking (what an application sees): untraced p50 {}, traced p50 {}{flag}",
            time(b.p50_us()),
            time(b.traced.p50_us)
        )?;
    }
    Ok(())
}

/// The hop table: per packet (netpath's own time out), per crossing where a hop is crossed
/// more than once per packet, p50 and p99 per crossing, share of the direction.
fn hops(w: &mut dyn Write, r: &DriverReport) -> std::io::Result<()> {
    let packets = |dir: &str| r.one_way.get(dir).map(|d| d.count).unwrap_or(0);
    let repeated = r.hops.iter().any(|h| h.at.crossings != packets(h.at.dir));
    let mut header = vec!["hop", "dir", "per packet"];
    if repeated {
        header.extend(["crossings/pkt", "per crossing"]);
    }
    header.extend(["p50", "p99", "share"]);
    let rows = r
        .hops
        .iter()
        .map(|h| {
            let mut row = vec![
                h.at.hop.to_string(),
                h.at.dir.to_string(),
                time(h.compensated_us),
            ];
            if repeated {
                let per = h.at.crossings as f64 / packets(h.at.dir).max(1) as f64;
                row.push(format!("{per:.2}"));
                row.push(time(h.compensated_us / per.max(f64::EPSILON)));
            }
            row.extend([
                time(h.compensated_p50_us),
                time(h.at.p99_us),
                format!("{:.0}%", h.share_pct),
            ]);
            row
        })
        .collect();
    for l in table(&header, rows) {
        writeln!(w, "{l}")?;
    }
    if let Some(c) = &r.consistency {
        writeln!(
            w,
            "   hops{} add up to {} vs untraced RTT mean {} ({:+.1}%{}){}",
            if c.edges_us.is_some() {
                " and the client's syscall edges"
            } else {
                ""
            },
            time(c.stall_free_compensated_sum_us),
            time(c.stall_free_untraced_mean_us),
            c.error_stall_free_pct,
            if c.within_tolerance {
                ", within the check's tolerance"
            } else {
                ", beyond the check's tolerance: see the check's line"
            },
            stalls(r)
        )?;
    }
    Ok(())
}

/// "; stalls taken out: 2 untraced (max 5.0 ms), 1 traced (wakeup request)" when any.
fn stalls(r: &DriverReport) -> String {
    let Some(s) = &r.stalls else {
        return String::new();
    };
    if s.untraced.count + s.traced.count == 0 {
        return String::new();
    }
    let max = s.untraced.max_us.max(s.traced.max_us);
    let mut out = format!(
        "; stalls taken out: {} untraced, {} traced (longest {})",
        s.untraced.count,
        s.traced.count,
        time(max)
    );
    if let Some(h) = s.hops.first() {
        out.push_str(&format!(", most in {} ({})", h.hop, h.dir));
    }
    out
}

/// Losses and drops, only what is not zero.
fn losses(w: &mut dyn Write, r: &DriverReport) -> std::io::Result<()> {
    let lost: Vec<String> = crate::record::LOST
        .iter()
        .map(|&c| netpath_common::counter::NAMES[c as usize])
        .filter_map(|k| {
            r.lost
                .get(k)
                .filter(|v| **v > 0)
                .map(|v| format!("{k} {v}"))
        })
        .collect();
    if lost.is_empty() && r.drops.is_empty() {
        writeln!(w, "   nothing lost")?;
    } else if !lost.is_empty() {
        writeln!(w, "   lost or unmatched: {}", lost.join(", "))?;
    }
    for d in &r.drops {
        writeln!(
            w,
            "   DROP {} in hop {} ({}, {}) ×{}",
            d.reason_name, d.hop, d.dir, d.device, d.count
        )?;
    }
    for u in &r.uncounted {
        writeln!(w, "   not counted by this kernel: {u}")?;
    }
    Ok(())
}

/// One driver's block, short.
pub fn driver(w: &mut dyn Write, r: &DriverReport) -> std::io::Result<()> {
    writeln!(
        w,
        "== {}  ({}, wait {}, cpus {})",
        r.driver,
        r.proto.name().to_uppercase(),
        r.wait.name(),
        r.cpus
    )?;
    round_trip(w, r)?;
    if let Some(b) = &r.bulk {
        writeln!(
            w,
            "   bulk: {:.2} Gbit/s [{:.2}–{:.2}]",
            b.gbit_per_s.median, b.gbit_per_s.min, b.gbit_per_s.max
        )?;
    }
    hops(w, r)?;
    parts(w, r)?;
    losses(w, r)?;
    Ok(())
}

/// `--parts`: the netfilter and qdisc parts, each under the hop it lies in (a breakdown of that hop,
/// not added to the table above).
fn parts(w: &mut dyn Write, r: &DriverReport) -> std::io::Result<()> {
    if r.parts.is_empty() {
        return Ok(());
    }
    writeln!(
        w,
        "   parts: netfilter chains and qdiscs (inside the hops above, not added to them):"
    )?;
    if !r.parts_via.is_empty() {
        writeln!(w, "   netfilter parts measured by {}", r.parts_via)?;
    }
    let header = [
        "hop",
        "dir",
        "part",
        "hook",
        "netns",
        "rules",
        "per packet",
        "p50",
        "p99",
    ];
    let rows = (r.parts.iter())
        .map(|p| {
            vec![
                if p.hop.is_empty() {
                    format!("after {}", p.after)
                } else {
                    p.hop.clone()
                },
                p.dir.clone(),
                p.name.clone(),
                match p.hook {
                    NfHook::Qdisc => format!("qdisc of {}", p.device),
                    h => format!("{} {}..{}", h.name(), p.prio_from, p.prio_to),
                },
                p.netns.clone(),
                match p.hook {
                    NfHook::Qdisc => "-".into(),
                    _ => p.rules.to_string(),
                },
                time(p.per_packet_us),
                time(p.p50_us),
                time(p.p99_us),
            ]
        })
        .collect();
    for l in table_left(&header, rows, &[0, 1, 2, 3, 4]) {
        writeln!(w, "{l}")?;
    }
    Ok(())
}
