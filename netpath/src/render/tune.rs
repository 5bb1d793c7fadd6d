//! `netpath tune`'s text: what each side's lab knob read back as the run goes, then both
//! sides' tables and the verdict lines.
use crate::tune::TuneResult;
use crate::tune::devices::Applied;
use crate::tune::knobs::{Knob, KnobSpec};
use crate::tune::outside::{Commands, RunIn, short};
use crate::tune::readback::ReadBack;
use crate::{driver::Driver, harness::Proto, probe::backend::Backend};
use std::io::Write;

impl super::Render for TuneResult {
    const KIND: &'static str = "tune";
    fn text(&self, w: &mut dyn Write) -> std::io::Result<()> {
        print(w, self)
    }
}

/// Said before the run: the backend, the knob, the driver and protocol, both settings.
pub fn start_line(backend: Backend, spec: &KnobSpec, driver: Driver, proto: Proto) {
    println!(
        "backend: {}; {} on {} over {}: {} vs {}",
        backend.name(),
        spec.name,
        driver,
        proto,
        spec.a_label,
        spec.b_label
    );
}

/// Said before an `--apply` run: which side is which, where the commands run.
pub fn change_line(backend: Backend, cmds: &Commands, path: &str, proto: Proto) {
    println!(
        "backend: {}; outside change on {path} over {proto}, interleaved: side A after --apply `{}`, side B after --revert `{}` (commands in the {} namespace; B's state before and after the run)",
        backend.name(),
        short(&cmds.apply, 100),
        short(&cmds.revert, 100),
        run_in(cmds.run_in),
    );
}

fn run_in(r: RunIn) -> &'static str {
    match r {
        RunIn::Host => "host's",
        RunIn::Client => "client's",
        RunIn::Server => "server's",
        RunIn::Node => "node's",
    }
}

/// A side's lab knob as read back after applying it (nothing for harness knobs).
pub fn applied(label: &str, ap: &Applied) {
    if ap.after.is_empty() {
        return;
    }
    let lines: Vec<String> = ap.after.iter().map(ReadBack::line).collect();
    println!("{label}: read back {}", lines.join(", "));
}

/// The result on a terminal: both sides' tables, then the verdict lines.
pub fn print(w: &mut dyn Write, r: &TuneResult) -> std::io::Result<()> {
    for s in [&r.a, &r.b] {
        super::compare::driver(w, &s.report)?;
        if !s.restored.is_empty() {
            let lines: Vec<String> = s.restored.iter().map(ReadBack::line).collect();
            writeln!(w, "   {}: restored {}", s.label, lines.join(", "))?;
        }
        if let Some((c, srv)) = s.segments_per_request {
            writeln!(
                w,
                "   {}: TCP segments sent per request: client {c:.2}, server {srv:.2}",
                s.label
            )?;
        }
        writeln!(w)?;
    }
    let what = match (&r.knob, &r.change) {
        (Some(k), _) => format!("{} on {}", k.name, r.driver),
        (None, Some(c)) => format!("outside change on {}", c.path),
        (None, None) => format!("tune on {}", r.driver),
    };
    writeln!(
        w,
        "{what}, {} vs {} ({} rounds interleaved; wait {} / {}, cpus {} / {}):",
        r.a.label,
        r.b.label,
        r.a.report.round_detail.len(),
        r.a.report.wait.name(),
        r.b.report.wait.name(),
        r.a.report.cpus,
        r.b.report.cpus,
    )?;
    writeln!(w, "   {}", r.deltas.verdict)?;
    for v in &r.verdicts {
        writeln!(w, "   {v}")?;
    }
    let quiet = r.deltas.hops_p50.iter().filter(|d| d.within_noise).count();
    if quiet > 0 {
        writeln!(w, "   {quiet} hop(s) within noise at p50 per packet")?;
    }
    super::diff::table(w, super::diff::PARTS_TITLE, &r.deltas.parts, true)?;
    for s in [&r.a, &r.b] {
        if let Some(c) = &s.report.context {
            let (cl, sv) = (&c.client_counters, &c.server_counters);
            writeln!(
                w,
                "   {} TCP over the whole run: client retrans {} (DSACK {}), server ofo {} sack-reorder {}",
                s.label, cl.retrans_segs, cl.tcp_dsack_recv, sv.tcp_ofo_queue, cl.tcp_sack_reorder
            )?;
        }
    }
    if let Some(c) = &r.change {
        let t = &c.tally;
        writeln!(
            w,
            "   --apply ran {}× (longest {:.2} s), --revert {}× (longest {:.2} s), in the {} namespace; A: `{}`, B: `{}`",
            t.applied,
            t.longest_apply_s,
            t.reverted,
            t.longest_revert_s,
            run_in(c.commands.run_in),
            short(&c.commands.apply, 100),
            short(&c.commands.revert, 100),
        )?;
    }
    if r.knob.as_ref().is_some_and(|k| k.knob == Knob::Gro) {
        writeln!(
            w,
            "   note: a veth hands TCP from a sender with TSO on to the backlog whatever its GRO \
             (veth_skb_is_eligible_for_gro): its NAPI gets such packets only with tso off"
        )?;
    }
    for x in &r.warnings {
        writeln!(w, "   context: {x}")?;
    }
    if let Some(m) = &r.a.report.machine {
        writeln!(w, "   {}", m.line())?;
    }
    Ok(())
}
