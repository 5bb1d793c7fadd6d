//! A sampled timeline as spans of time, for the outputs that draw or export it (pcap-ng
//! comments, the Perfetto trace, the report's lanes): each point's absolute time, the hops as
//! segments (consecutive crossings of one hop on one CPU merged), and the NET_RX softirq runs
//! its receive passes fell in.
use super::Timeline;

/// Points where a thread runs in process context: a softirq run cannot go on through them.
const PROCESS_POINTS: [&str; 5] = [
    "send",
    "sched_switch",
    "copy_to_user",
    "recv_return",
    "sock_read",
];

/// The receive pass point (`netif_receive_skb`).
pub const PASS: &str = "netif_receive";

/// One hop's time on one CPU: from the point before `first` to point `last` (indices into the
/// timeline's points), on the CPU of its ending point.
#[derive(Clone, Debug, PartialEq)]
pub struct Segment {
    pub hop: String,
    pub start_ns: u64,
    pub end_ns: u64,
    pub cpu: u16,
    pub first: usize,
    pub last: usize,
}

/// A NET_RX softirq run as the journey saw it: from its first receive pass to the last point
/// it reached in that run (the run's entry is not a point: it began a little earlier).
#[derive(Clone, Debug, PartialEq)]
pub struct SoftirqRun {
    pub cpu: u16,
    pub start_ns: u64,
    pub end_ns: u64,
    /// Indices of the receive passes in it.
    pub passes: Vec<usize>,
}

/// Each point's CLOCK_MONOTONIC time in ns.
pub fn times(t: &Timeline) -> Vec<u64> {
    let mut at = t.start_ns;
    t.points
        .iter()
        .map(|p| {
            at += (p.since_prev_us * 1000.0).round() as u64;
            at
        })
        .collect()
}

/// The hops as segments, in order; a journey's first point opens it (a segment ends there
/// only when it carries a hop and time, as a relayed journey's proxy does).
pub fn segments(t: &Timeline) -> Vec<Segment> {
    let at = times(t);
    let mut out: Vec<Segment> = Vec::new();
    for (i, p) in t.points.iter().enumerate() {
        let start = if i == 0 { t.start_ns } else { at[i - 1] };
        if p.hop.is_empty() || (i == 0 && at[0] == start) {
            continue;
        }
        match out.last_mut() {
            Some(s) if s.hop == p.hop && s.cpu == p.cpu && s.last + 1 == i => {
                s.end_ns = at[i];
                s.last = i;
            }
            _ => out.push(Segment {
                hop: p.hop.to_string(),
                start_ns: start,
                end_ns: at[i],
                cpu: p.cpu,
                first: i,
                last: i,
            }),
        }
    }
    out
}

/// The hops in one line, consecutive crossings of a hop merged: `sender-stack 3.10 µs | veth
/// 0.21 | backlog 0.64 | …`.
pub fn hop_line(t: &Timeline) -> String {
    let mut hops: Vec<(String, u64)> = Vec::new();
    for s in segments(t) {
        match hops.last_mut() {
            Some((h, d)) if *h == s.hop => *d += s.end_ns - s.start_ns,
            _ => hops.push((s.hop, s.end_ns - s.start_ns)),
        }
    }
    hops.iter()
        .enumerate()
        .map(|(i, (h, ns))| {
            let unit = if i == 0 { " µs" } else { "" };
            format!("{h} {:.2}{unit}", *ns as f64 / 1000.0)
        })
        .collect::<Vec<_>>()
        .join(" | ")
}

/// The NET_RX softirq runs of a journey. Passes on one CPU with only softirq-context points
/// between them (forwarding, a veth transmit, the next backlog) are one run unless the kernel
/// counted more runs than that (`softirq_runs`): then each of those passes starts its own,
/// the run boundary on one CPU not being a point of the timeline.
pub fn softirq_runs(t: &Timeline) -> Vec<SoftirqRun> {
    let at = times(t);
    let pts = &t.points;
    let passes: Vec<usize> = (0..pts.len()).filter(|&i| pts[i].point == PASS).collect();
    // Whether pass `b` can be in the run of the pass before it, `a`.
    let chained = |a: usize, b: usize| {
        pts[a..=b]
            .iter()
            .all(|p| p.cpu == pts[a].cpu && !PROCESS_POINTS.contains(&p.point))
    };
    let joined = passes.windows(2).filter(|w| chained(w[0], w[1])).count();
    let split_all = passes.len() - joined < t.softirq_runs as usize;
    let mut runs: Vec<SoftirqRun> = Vec::new();
    for (k, &i) in passes.iter().enumerate() {
        let join = k > 0 && !split_all && chained(passes[k - 1], i);
        match runs.last_mut() {
            Some(r) if join => r.passes.push(i),
            _ => runs.push(SoftirqRun {
                cpu: pts[i].cpu,
                start_ns: at[i],
                end_ns: at[i],
                passes: vec![i],
            }),
        }
    }
    // Each run lasts through the softirq-context points after its last pass on its CPU.
    for r in &mut runs {
        let last = *r.passes.last().expect("a run has a pass");
        let mut end = last;
        while end + 1 < pts.len()
            && pts[end + 1].cpu == r.cpu
            && !PROCESS_POINTS.contains(&pts[end + 1].point)
            && pts[end + 1].point != PASS
        {
            end += 1;
        }
        r.end_ns = at[end];
    }
    runs
}

#[cfg(test)]
pub(crate) mod tests;
