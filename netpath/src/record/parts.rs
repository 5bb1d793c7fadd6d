//! Netfilter parts of a traced run (`path::parts` placed them, the boundary programs measured
//! them): per part and direction, the packets that crossed it and their time in it. A part is
//! a breakdown of the hop it falls in, never added to it.
//!
//! Only packets netpath follows are counted: a journey's own packet, or a send still in its
//! sender's stack (before its first device), known by its traced thread.
use serde::{Deserialize, Serialize};

use netpath_common::{DevKind, PART_AT_SEND, Point};

use super::{Timeline, TimelinePart};

use crate::path::parts::{PartPlace, Placement};
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

/// One row per part and direction that a followed packet crossed.
pub fn rows(
    placement: &Placement,
    counts: &[[PartCounts; 2]],
    timelines: &[Timeline],
) -> Vec<PartRow> {
    let mut out = Vec::new();
    for (&k, place) in &placement.parts {
        for (d, c) in counts.get(k).into_iter().flatten().enumerate() {
            let packets: u64 = c.buckets.iter().sum();
            if packets == 0 {
                continue;
            }
            let dir = ["request", "response"][d].to_string();
            out.push(PartRow {
                place: place.clone(),
                dir: dir.clone(),
                hop: hop_after(c.at, &dir, timelines),
                after: point_name(c.at),
                packets,
                per_packet_us: c.sum_ns as f64 / packets as f64 / 1000.0,
                p50_us: super::build::percentile_us(&c.buckets, 50.0),
                p99_us: super::build::percentile_us(&c.buckets, 99.0),
            });
        }
    }
    out
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
                    hop: hop_at(t, w[0].1).to_string(),
                    at_us: w[0].1 as f64 / 1000.0,
                    us: w[1].1.saturating_sub(w[0].1) as f64 / 1000.0,
                })
            })
            .collect();
    }
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
