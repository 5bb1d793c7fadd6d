//! Netfilter parts of a traced run (`path::parts` placed them, the boundary programs measured
//! them): per part and direction, the packets that crossed it and their time in it. A part is
//! a breakdown of the hop it falls in, never added to it.
//!
//! Only packets netpath already follows are counted: a TCP send's skb is followed from its
//! first device point, so the sending namespace's OUTPUT and POSTROUTING parts are not seen yet.
use serde::{Deserialize, Serialize};

use netpath_common::hop::Hop;

use crate::path::parts::{NfHook, Placement};
use crate::probe::tracer::PartCounts;

#[derive(Clone, Debug, Serialize, Deserialize, schemars::JsonSchema)]
pub struct PartRow {
    /// `table/chain` (chains at one priority joined with `+`) or `conntrack`.
    pub name: String,
    pub netns: String,
    pub hook: NfHook,
    /// The boundaries' priorities: every hook entry between them is in the part.
    pub prio_from: i32,
    pub prio_to: i32,
    /// Rules the part's chains hold, counted through jumps and gotos.
    pub rules: usize,
    /// `request` or `response`.
    pub dir: String,
    /// The last hop the packet completed before it entered the part (`none`: the journey
    /// had none yet): the part lies in the segment that follows it, which the next point
    /// names.
    pub after_hop: String,
    pub packets: u64,
    pub per_packet_us: f64,
    pub p50_us: f64,
    pub p99_us: f64,
}

/// One row per part and direction that a followed packet crossed.
pub fn rows(placement: &Placement, counts: &[[PartCounts; 2]]) -> Vec<PartRow> {
    let mut out = Vec::new();
    for (&k, place) in &placement.parts {
        for (d, c) in counts.get(k).into_iter().flatten().enumerate() {
            let packets: u64 = c.buckets.iter().sum();
            if packets == 0 {
                continue;
            }
            out.push(PartRow {
                name: place.name.clone(),
                netns: place.netns.clone(),
                hook: place.hook,
                prio_from: place.prio_from,
                prio_to: place.prio_to,
                rules: place.rules,
                dir: ["request", "response"][d].to_string(),
                after_hop: c
                    .hop
                    .map_or("none", |h| Hop::from_u32(h).name())
                    .to_string(),
                packets,
                per_packet_us: c.sum_ns as f64 / packets as f64 / 1000.0,
                p50_us: super::build::percentile_us(&c.buckets, 50.0),
                p99_us: super::build::percentile_us(&c.buckets, 99.0),
            });
        }
    }
    out
}
