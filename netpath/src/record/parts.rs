//! Netfilter parts of a traced run (`path::parts` placed them, the boundary programs measured
//! them): per part and direction, the packets that crossed it and their time in it. A part is
//! a breakdown of the hop it falls in, never added to it.
//!
//! Only packets netpath follows are counted: a journey's own packet, or a send still in its
//! sender's stack (before its first device), known by its traced thread.
use serde::{Deserialize, Serialize};

use netpath_common::{DevKind, PART_AT_SEND, Point, part_at};

use super::{Timeline, TimelinePart};

use crate::path::parts::{NfHook, PartPlace, Placement};
use crate::probe::tracer::PartCounts;

/// A part as placed (its fields flattened into the row, and read through it) and what the run
/// measured of it in one direction.
#[derive(Clone, Debug, Serialize, Deserialize, schemars::JsonSchema)]
pub struct PartRow {
    #[serde(flatten)]
    pub place: PartPlace,
    /// `request` or `response`.
    pub dir: String,
    /// The hop the part lies in: the one the sampled timelines name for the segment after
    /// the point the packets entered the part from (empty: no timeline showed that point).
    pub hop: String,
    /// That point: `send` (still in the sender's stack) or `<point> (<device kind>)`.
    pub after: String,
    pub packets: u64,
    pub per_packet_us: f64,
    pub p50_us: f64,
    pub p99_us: f64,
}

impl std::ops::Deref for PartRow {
    type Target = PartPlace;
    fn deref(&self) -> &PartPlace {
        &self.place
    }
}

/// One row per part and direction that a followed packet crossed: the netfilter parts
/// (`counts`, per boundary) and the transmits' qdiscs (`qdisc`, per device kind).
pub fn rows(
    placement: &Placement,
    counts: &[[PartCounts; 2]],
    qdisc: &[[PartCounts; 2]],
    timelines: &[Timeline],
) -> Vec<PartRow> {
    let mut out = Vec::new();
    for (&k, place) in &placement.parts {
        for (d, c) in counts.get(k).into_iter().flatten().enumerate() {
            out.extend(row(place, d, c, c.at, timelines));
        }
    }
    for (kind, pair) in qdisc.iter().enumerate() {
        let at = part_at(Point::DevQueue as u16, kind as u16);
        for (d, c) in pair.iter().enumerate() {
            out.extend(row(&qdisc_place(placement, c.at), d, c, at, timelines));
        }
    }
    out
}

/// A part's row in direction `d` (`None`: no packet crossed it); `at`: where its packets
/// entered it from.
fn row(place: &PartPlace, d: usize, c: &PartCounts, at: u64, tl: &[Timeline]) -> Option<PartRow> {
    let packets: u64 = c.buckets.iter().sum();
    if packets == 0 {
        return None;
    }
    let dir = ["request", "response"][d & 1].to_string();
    Some(PartRow {
        place: place.clone(),
        hop: hop_after(at, &dir, tl),
        dir,
        after: point_name(at),
        packets,
        per_packet_us: c.sum_ns as f64 / packets as f64 / 1000.0,
        p50_us: super::build::percentile_us(&c.buckets, 50.0),
        p99_us: super::build::percentile_us(&c.buckets, 99.0),
    })
}

/// The qdisc part of the device `dev` (`netns << 32 | ifindex`), named from the qdiscs
/// read at placement; a device not among them by its numbers.
fn qdisc_place(placement: &Placement, dev: u64) -> PartPlace {
    let (netns, ifindex) = ((dev >> 32) as u32, dev as u32);
    let q = (placement.qdiscs.iter()).find(|q| q.netns_inum == netns && q.ifindex == ifindex);
    PartPlace {
        name: q.map_or("?".into(), |q| q.kind.clone()),
        netns: q.map_or(format!("ns{netns}"), |q| q.netns.clone()),
        hook: NfHook::Qdisc,
        prio_from: 0,
        prio_to: 0,
        rules: 0,
        reached: Vec::new(),
        device: q.map_or(format!("if{ifindex}"), |q| q.name.clone()),
    }
}

/// `at`'s point and device kind as the timelines spell them.
fn point_of(at: u64) -> Option<(&'static str, &'static str)> {
    let v = at.checked_sub(1)?;
    let point = Point::from_u16((v >> 16) as u16)?.name();
    Some((point, DevKind::from_u16(v as u16).name()))
}

fn point_name(at: u64) -> String {
    match (at, point_of(at)) {
        (PART_AT_SEND, _) => "send".into(),
        (_, Some((p, k))) => format!("{p} ({k})"),
        _ => String::new(),
    }
}

/// The hop of the segment that leaves `at`'s point, in a sampled journey of `dir` (else of
/// the other direction: one sampled journey in N may all be one direction's when N is even).
fn hop_after(at: u64, dir: &str, timelines: &[Timeline]) -> String {
    if at == PART_AT_SEND {
        return "sender-stack".into();
    }
    let Some((point, kind)) = point_of(at) else {
        return String::new();
    };
    let after = |same: bool| {
        (timelines.iter().filter(|t| (t.dir == dir) == same))
            .flat_map(|t| t.points.windows(2))
            .find(|w| w[0].point == point && w[0].kind == kind)
            .map(|w| w[1].hop.to_string())
    };
    after(true).or_else(|| after(false)).unwrap_or_default()
}

/// Pairs each timeline's boundary marks into the parts between them: a mark followed by the
/// next boundary of the same hook (boundaries are numbered in order along each hook).
pub fn annotate(timelines: &mut [Timeline], placement: &Placement) {
    for t in timelines {
        let mut marks = std::mem::take(&mut t.nf_marks);
        marks.sort_by_key(|m| m.1);
        t.parts = (marks.windows(2))
            .filter(|w| w[1].0 == w[0].0 + 1)
            .filter_map(|w| {
                let place = placement.parts.get(&(w[0].0 as usize))?;
                Some(TimelinePart {
                    name: place.name.clone(),
                    hook: place.hook,
                    netns: place.netns.clone(),
                    device: String::new(),
                    hop: hop_at(t, w[0].1).to_string(),
                    at_us: w[0].1 as f64 / 1000.0,
                    us: w[1].1.saturating_sub(w[0].1) as f64 / 1000.0,
                })
            })
            .collect();
        t.parts.extend(qdisc_parts(t, placement));
        t.parts.sort_by(|a, b| a.at_us.total_cmp(&b.at_us));
    }
}

/// The qdiscs one journey crossed: each `dev_queue` followed by `start_xmit` on its device.
fn qdisc_parts(t: &Timeline, placement: &Placement) -> Vec<TimelinePart> {
    let mut at = 0.0;
    let mut out = Vec::new();
    for w in t.points.windows(2) {
        at += w[0].since_prev_us;
        if w[0].point != Point::DevQueue.name()
            || w[1].point != Point::DevXmit.name()
            || w[0].device != w[1].device
        {
            continue;
        }
        let q =
            (placement.qdiscs.iter()).find(|q| format!("{}@{}", q.name, q.netns) == w[0].device);
        out.push(TimelinePart {
            name: q.map_or("?".into(), |q| q.kind.clone()),
            hook: NfHook::Qdisc,
            netns: q.map_or(String::new(), |q| q.netns.clone()),
            device: w[0].device.clone(),
            hop: w[1].hop.to_string(),
            at_us: at,
            us: w[1].since_prev_us,
        });
    }
    out
}

/// The hop of the segment of `t` that holds `ns` since its start: the first point at or
/// after it ends that segment.
fn hop_at(t: &Timeline, ns: u64) -> &'static str {
    let mut at = 0.0;
    let us = ns as f64 / 1000.0;
    for p in &t.points {
        at += p.since_prev_us;
        if at >= us {
            return p.hop;
        }
    }
    ""
}
