//! One sampled packet's journey as the report keeps it: each point with its device, hop and
//! the time since the previous point, and the NAT the packet went through.
use netpath_common::{Hop, Point, SkbState};
use serde::{Deserialize, Serialize};

use crate::path::Device;

#[derive(Clone, Debug, Serialize, serde::Deserialize, schemars::JsonSchema)]
pub struct TimelineHop {
    pub point: &'static str,
    #[serde(default)]
    pub device: String,
    #[serde(default)]
    pub kind: &'static str,
    #[serde(default)]
    pub netns: u32,
    #[serde(default)]
    pub hop: &'static str,
    pub since_prev_us: f64,
    #[serde(default)]
    pub cpu: u16,
}

#[derive(Clone, Debug, Serialize, serde::Deserialize, schemars::JsonSchema)]
pub struct Timeline {
    #[schemars(schema_with = "super::schema_parts::dir")]
    pub dir: &'static str,
    #[serde(default)]
    pub tuple: String,
    /// CLOCK_MONOTONIC ns the journey's times count from: its first point is that point's
    /// `since_prev_us` after it (UTC: add the header's `monotonic_to_utc_offset_ns`).
    #[serde(default)]
    pub start_ns: u64,
    /// The sending thread (0: not one netpath follows, as under `trace --container`).
    #[serde(default)]
    pub tid: u32,
    #[serde(default)]
    pub headers: Headers,
    /// Set when the packet's addresses changed on the way (NAT): "before → after".
    pub translated: Option<String>,
    #[serde(default)]
    pub total_us: f64,
    #[serde(default)]
    pub rx_passes: u16,
    #[serde(default)]
    pub softirq_runs: u16,
    pub points: Vec<TimelineHop>,
    /// Netfilter boundaries the journey crossed (`--parts`): boundary number and ns since its
    /// start, out of `points`; `parts::annotate` pairs them into `parts`.
    #[serde(skip)]
    pub nf_marks: Vec<(u16, u64)>,
    /// The netfilter and qdisc parts it crossed, in order (`--parts`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub parts: Vec<TimelinePart>,
}

/// A netfilter or qdisc part one sampled journey crossed.
#[derive(Clone, Debug, Serialize, Deserialize, schemars::JsonSchema)]
pub struct TimelinePart {
    pub name: String,
    pub hook: crate::path::parts::NfHook,
    pub netns: String,
    /// A qdisc part's device, as `points` name it (empty for a netfilter part).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub device: String,
    /// The hop it lies in (the segment of `points` that holds it).
    pub hop: String,
    /// From the journey's start, µs.
    pub at_us: f64,
    pub us: f64,
}

/// The packet's headers as the kernel side read them where it was first seen: IPv4 addresses,
/// protocol and ports; for ICMP its type and code, the echo identifier as both ports and the
/// sequence number. No length, TCP sequence or flags: the kernel side does not read them.
#[derive(Clone, Debug, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Headers {
    pub proto: u8,
    pub saddr: std::net::Ipv4Addr,
    pub daddr: std::net::Ipv4Addr,
    pub sport: u16,
    pub dport: u16,
    pub icmp_type: u8,
    pub icmp_code: u8,
    pub icmp_seq: u16,
}

impl Default for Headers {
    fn default() -> Headers {
        let none = std::net::Ipv4Addr::UNSPECIFIED;
        Headers {
            proto: 0,
            saddr: none,
            daddr: none,
            sport: 0,
            dport: 0,
            icmp_type: 0,
            icmp_code: 0,
            icmp_seq: 0,
        }
    }
}

impl Headers {
    fn of(s: &SkbState) -> Headers {
        let ip = |a: u32| std::net::Ipv4Addr::from(u32::from_be(a));
        Headers {
            proto: s.proto,
            saddr: ip(s.saddr),
            daddr: ip(s.daddr),
            sport: u16::from_be(s.sport),
            dport: u16::from_be(s.dport),
            icmp_type: s.icmp_type,
            icmp_code: s.icmp_code,
            icmp_seq: u16::from_be(s.icmp_seq),
        }
    }
}

pub(super) fn device_name(devices: &[Device], netns: u32, ifindex: u32) -> String {
    devices
        .iter()
        .find(|d| d.netns_inum == netns && d.ifindex == ifindex)
        .map(|d| format!("{}@{}", d.name, d.netns))
        .unwrap_or_else(|| {
            if ifindex == 0 {
                String::new()
            } else {
                format!("if{ifindex}@ns{netns}")
            }
        })
}

fn tuple(s: &SkbState) -> String {
    let ip = |a: u32| std::net::Ipv4Addr::from(u32::from_be(a));
    if s.proto != 1 {
        return format!(
            "{}:{} > {}:{}",
            ip(s.saddr),
            u16::from_be(s.sport),
            ip(s.daddr),
            u16::from_be(s.dport)
        );
    }
    // ICMP has no ports: its type, and for echo the identifier and sequence number.
    let what = match s.icmp_type {
        8 | 0 => format!(
            "{} id={} seq={}",
            if s.icmp_type == 8 {
                "echo"
            } else {
                "echo-reply"
            },
            u16::from_be(s.sport),
            u16::from_be(s.icmp_seq)
        ),
        t => format!("type {t} code {}", s.icmp_code),
    };
    format!("{} > {} icmp {what}", ip(s.saddr), ip(s.daddr))
}

/// What the receiving thread's CPU was doing before it ran, and whether it is another CPU than
/// the one that woke it.
fn sched_kind(k: u16) -> &'static str {
    use netpath_common::hop::{SCHED_CROSS, SCHED_IDLE};
    match (k & SCHED_IDLE != 0, k & SCHED_CROSS != 0) {
        (true, false) => "idle",
        (true, true) => "idle,x-cpu",
        (false, false) => "busy",
        (false, true) => "busy,x-cpu",
    }
}

pub fn timeline(s: &SkbState, devices: &[Device]) -> Timeline {
    let n = (s.npoints as usize).min(s.points.len());
    let mut prev = s.first_ts;
    let is_mark = |p: &&netpath_common::TimelinePoint| p.point == Point::NfBoundary as u16;
    let nf_marks = (s.points[..n].iter().filter(is_mark))
        .map(|p| (p.kind, p.ts.saturating_sub(s.first_ts)))
        .collect();
    let points = s.points[..n]
        .iter()
        .filter(|p| !is_mark(p))
        .map(|p| {
            let d = p.ts.saturating_sub(prev);
            prev = p.ts;
            TimelineHop {
                point: Point::from_u16(p.point).map_or("?", |p| p.name()),
                device: device_name(devices, p.netns, p.ifindex),
                kind: if p.point == Point::SchedSwitch as u16 {
                    sched_kind(p.kind)
                } else if p.ifindex == 0 {
                    ""
                } else {
                    netpath_common::DevKind::from_u16(p.kind).name()
                },
                netns: p.netns,
                // A journey's first point ends no segment (traffic netpath does not generate).
                hop: if p.hop == netpath_common::NO_HOP {
                    ""
                } else {
                    Hop::from_u32(p.hop as u32).name()
                },
                since_prev_us: d as f64 / 1000.0,
                cpu: p.cpu,
            }
        })
        .collect();
    let ip = |a: u32| std::net::Ipv4Addr::from(u32::from_be(a));
    // An ICMP echo's "port" is its identifier (what MASQUERADE rewrites).
    let ep = |a: u32, p: u16| match s.proto {
        1 => format!("{} id={}", ip(a), u16::from_be(p)),
        _ => format!("{}:{}", ip(a), u16::from_be(p)),
    };
    let mut translated = Vec::new();
    if s.sock_daddr != 0 && (s.sock_daddr, s.sock_dport) != (s.daddr, s.dport) {
        // Rewritten before the first device: OUTPUT DNAT in the sender's own stack.
        translated.push(format!(
            "dst {} → {} (before the first device)",
            ep(s.sock_daddr, s.sock_dport),
            ep(s.daddr, s.dport)
        ));
    }
    if s.end_saddr != 0 {
        if (s.end_saddr, s.end_sport) != (s.saddr, s.sport) {
            translated.push(format!(
                "src {} → {}",
                ep(s.saddr, s.sport),
                ep(s.end_saddr, s.end_sport)
            ));
        }
        if (s.end_daddr, s.end_dport) != (s.daddr, s.dport) {
            translated.push(format!(
                "dst {} → {}",
                ep(s.daddr, s.dport),
                ep(s.end_daddr, s.end_dport)
            ));
        }
    }
    Timeline {
        translated: (!translated.is_empty()).then(|| translated.join(", ")),
        dir: if s.dir == 1 { "response" } else { "request" },
        tuple: tuple(s),
        start_ns: s.first_ts,
        tid: s.tid,
        headers: Headers::of(s),
        total_us: s.last_ts.saturating_sub(s.first_ts) as f64 / 1000.0,
        rx_passes: s.rx_passes,
        softirq_runs: s.softirqs,
        points,
        nf_marks,
        parts: Vec::new(),
    }
}

/// Each direction's hops in the order its sampled journeys cross them: a hop first seen in a
/// later journey goes right after the hop it followed there. A hop crossed more than once
/// (veth, backlog) is placed where it was first crossed.
fn path_order<'a>(timelines: &'a [Timeline], dir: &str) -> Vec<&'a str> {
    let mut order: Vec<&str> = Vec::new();
    for t in timelines.iter().filter(|t| t.dir == dir) {
        let mut at = 0;
        // The first point opens the journey: the hop it carries is no crossing yet.
        for p in t.points.iter().skip(1) {
            match order.iter().position(|h| *h == p.hop) {
                Some(i) => at = at.max(i + 1),
                None => {
                    order.insert(at, p.hop);
                    at += 1;
                }
            }
        }
    }
    order
}

/// Sorts hop rows (grouped by direction) into path order; hops no sampled journey crossed
/// keep their place after the others.
pub fn sort_by_path(rows: &mut [super::HopRow], timelines: &[Timeline]) {
    let orders: Vec<(&str, Vec<&str>)> = ["request", "response"]
        .into_iter()
        .map(|d| (d, path_order(timelines, d)))
        .collect();
    let key = |r: &super::HopRow| {
        let (d, order) = orders
            .iter()
            .enumerate()
            .find(|(_, (d, _))| *d == r.at.dir)
            .map(|(i, (_, o))| (i, o.as_slice()))
            .unwrap_or((orders.len(), &[]));
        (
            d,
            order
                .iter()
                .position(|h| *h == r.at.hop)
                .unwrap_or(usize::MAX),
        )
    };
    rows.sort_by_key(key);
}
