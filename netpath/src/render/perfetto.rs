//! `trace --perfetto FILE` and `compare --perfetto FILE`: sampled journeys as a Perfetto trace
//! (protobuf TrackEvent, opens in ui.perfetto.dev as it is). Per run (a driver, or the
//! containers followed) a group of tracks:
//! - a track per CPU the journeys ran on: each hop a slice on the CPU of the point that ends
//!   it, inside the NET_RX softirq run it ran in (a slice from the run's first receive pass to
//!   the last point it reached there, each receive pass an instant in it); a journey's hop
//!   slices are one flow, so its arrows jump from CPU to CPU;
//! - a track per followed thread (client, server): the sender's send (sender-stack), the
//!   receiver's wakeup, run-queue wait or idle exit, copy and return;
//! - journeys that overlap in time on one CPU or thread take a lane (a child track) each.
//!
//! Times are the kernel's CLOCK_MONOTONIC; a clock snapshot ties them to BOOTTIME and UTC, so
//! the trace lines up with a kernel trace of the same machine.
use std::collections::BTreeMap;

use anyhow::{Context as _, Result};
use prost::Message as _;

use crate::record::{Timeline, journey};

pub mod proto;
use proto::{DebugAnnotation, TrackDescriptor, TrackEvent};

/// One run's journeys: what ran (the driver or the containers) and its sampled timelines.
pub struct Run<'a> {
    pub label: &'a str,
    pub timelines: &'a [Timeline],
}

/// The hops a followed thread spends: the sender in its send, the receiver from its socket's
/// wakeup to its receive's return.
const SENDER_HOPS: [&str; 2] = ["sender-stack", "proxy"];
const RECEIVER_HOPS: [&str; 6] = [
    "wakeup",
    "idle-exit",
    "runqueue",
    "recv-copy",
    "recv-return",
    "socket-queue",
];

/// What a track is within its run's group.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Lane {
    Cpu(u16),
    /// A followed thread by tid (0: the receiving application, not a thread netpath follows).
    Thread(u32),
}

/// A slice (or an instant, `end == None`) on a lane, before lanes become tracks.
struct Slice {
    lane: Lane,
    start: u64,
    end: Option<u64>,
    /// Nesting at one time: 0 a softirq run (or a slice in none), 1 a receive pass's instant,
    /// 2 a hop inside a run; at a time one slice ends and the next begins, a pass is the run's
    /// child, not the hop's.
    depth: u8,
    name: String,
    category: &'static str,
    args: Vec<DebugAnnotation>,
    flow: Option<(u64, bool)>,
}

/// Names of the threads of a run: the harness's client sends requests, its server responses.
fn thread_names(ts: &[Timeline]) -> BTreeMap<u32, String> {
    let mut m = BTreeMap::new();
    for t in ts.iter().filter(|t| t.tid != 0) {
        let role = if t.dir == "request" {
            "client"
        } else {
            "server"
        };
        m.entry(t.tid)
            .or_insert_with(|| format!("{role} {}", t.tid));
    }
    m
}

/// The thread that received a journey: the one thread that sent in the other direction, if
/// there is exactly one (0 otherwise: the receiving application).
fn receiver(ts: &[Timeline], t: &Timeline) -> u32 {
    let mut other: Vec<u32> = ts
        .iter()
        .filter(|o| o.dir != t.dir && o.tid != 0)
        .map(|o| o.tid)
        .collect();
    other.sort_unstable();
    other.dedup();
    match other.as_slice() {
        [one] => *one,
        _ => 0,
    }
}

fn device_args(t: &Timeline, i: usize) -> Vec<DebugAnnotation> {
    let p = &t.points[i];
    let mut a = vec![DebugAnnotation::str("point", p.point.to_string())];
    if !p.device.is_empty() {
        let (dev, ns) = p.device.split_once('@').unwrap_or((&p.device, ""));
        a.push(DebugAnnotation::str("device", dev));
        a.push(DebugAnnotation::str("kind", p.kind.to_string()));
        a.push(DebugAnnotation::str("netns", ns));
        a.push(DebugAnnotation::uint("netns_inode", p.netns as u64));
    } else if !p.kind.is_empty() {
        a.push(DebugAnnotation::str("kind", p.kind.to_string()));
    }
    a
}

/// The slices of one journey (`n`: its number in the run, `flow`: its flow id).
fn journey_slices(ts: &[Timeline], t: &Timeline, n: usize, flow: u64) -> Vec<Slice> {
    let at = journey::times(t);
    let segs = journey::segments(t);
    let runs = journey::softirq_runs(t);
    let common = |a: &mut Vec<DebugAnnotation>| {
        a.push(DebugAnnotation::uint("journey", n as u64));
        a.push(DebugAnnotation::str("dir", t.dir.to_string()));
        a.push(DebugAnnotation::str("tuple", t.tuple.clone()));
    };
    let mut out = Vec::new();
    for (k, s) in segs.iter().enumerate() {
        let mut args = device_args(t, s.last);
        let from = s
            .first
            .checked_sub(1)
            .map_or("start".into(), |i| t.points[i].point.to_string());
        args.insert(0, DebugAnnotation::str("from", from));
        args.push(DebugAnnotation::uint("cpu", s.cpu as u64));
        common(&mut args);
        let in_run = runs
            .iter()
            .any(|r| r.cpu == s.cpu && r.start_ns <= s.start_ns && s.end_ns <= r.end_ns);
        let slice = |lane, flow| Slice {
            lane,
            start: s.start_ns,
            end: Some(s.end_ns),
            depth: if in_run { 2 } else { 0 },
            name: s.hop.clone(),
            category: "hop",
            args: args.clone(),
            flow,
        };
        out.push(slice(Lane::Cpu(s.cpu), Some((flow, k + 1 == segs.len()))));
        let who = if SENDER_HOPS.contains(&s.hop.as_str()) && t.tid != 0 {
            Some(t.tid)
        } else if RECEIVER_HOPS.contains(&s.hop.as_str()) {
            Some(receiver(ts, t))
        } else {
            None
        };
        if let Some(tid) = who {
            out.push(Slice {
                depth: 0,
                category: "thread",
                ..slice(Lane::Thread(tid), None)
            });
        }
    }
    for r in &runs {
        let devs: Vec<String> = r
            .passes
            .iter()
            .map(|&i| t.points[i].device.clone())
            .collect();
        let mut args = vec![
            DebugAnnotation::uint("receive_passes", r.passes.len() as u64),
            DebugAnnotation::str("devices", devs.join(", ")),
            DebugAnnotation::uint("kernel_softirq_runs", t.softirq_runs as u64),
        ];
        common(&mut args);
        out.push(Slice {
            lane: Lane::Cpu(r.cpu),
            start: r.start_ns,
            end: Some(r.end_ns),
            depth: 0,
            name: "NET_RX softirq".into(),
            category: "softirq",
            args,
            flow: None,
        });
        for &i in &r.passes {
            let mut args = device_args(t, i);
            common(&mut args);
            out.push(Slice {
                lane: Lane::Cpu(r.cpu),
                start: at[i],
                end: None,
                depth: 1,
                name: format!("receive pass {}", t.points[i].device),
                category: "softirq",
                args,
                flow: None,
            });
        }
    }
    out
}

/// Track uuids, handed out in order of need, with their descriptors.
struct Tracks {
    next: u64,
    descriptors: Vec<TrackDescriptor>,
    /// (group, lane, sub-lane) → (uuid, busy until).
    lanes: BTreeMap<(usize, Lane, usize), (u64, u64)>,
    pid: i32,
}

impl Tracks {
    fn add(&mut self, d: TrackDescriptor) -> u64 {
        self.next += 1;
        let uuid = self.next;
        self.descriptors.push(TrackDescriptor {
            uuid: Some(uuid),
            ..d
        });
        uuid
    }

    /// The track of `lane` in `group` that is free from `start` on, marked busy to `end`.
    fn take(
        &mut self,
        group: (usize, u64),
        lane: &Lane,
        names: &BTreeMap<u32, String>,
        span: (u64, u64),
    ) -> u64 {
        let (g, parent) = group;
        let mut sub = 0;
        loop {
            let key = (g, lane.clone(), sub);
            match self.lanes.get(&key) {
                Some(&(uuid, busy)) if busy <= span.0 => {
                    self.lanes.insert(key, (uuid, span.1));
                    return uuid;
                }
                Some(_) => sub += 1,
                None => {
                    let uuid = self.new_lane(parent, lane, names, sub);
                    self.lanes.insert(key, (uuid, span.1));
                    return uuid;
                }
            }
        }
    }

    fn new_lane(
        &mut self,
        parent: u64,
        lane: &Lane,
        names: &BTreeMap<u32, String>,
        sub: usize,
    ) -> u64 {
        let suffix = if sub == 0 {
            String::new()
        } else {
            format!(" (overlap {sub})")
        };
        let (name, rank) = match lane {
            Lane::Cpu(c) => (format!("CPU {c}{suffix}"), *c as i32 * 16 + sub as i32),
            Lane::Thread(0) => (format!("receiving application{suffix}"), 1 << 20),
            Lane::Thread(t) => (
                format!(
                    "{}{suffix}",
                    names.get(t).cloned().unwrap_or(format!("thread {t}"))
                ),
                (1 << 20) + 1 + sub as i32,
            ),
        };
        // A thread's own track (one per thread) is tied to it, so a kernel trace of the same
        // thread merges with it; its overlap lanes are plain tracks.
        let thread = match lane {
            Lane::Thread(t) if *t != 0 && sub == 0 => Some(proto::ThreadDescriptor {
                pid: Some(self.pid),
                tid: Some(*t as i32),
                thread_name: Some(name.clone()),
            }),
            _ => None,
        };
        self.add(TrackDescriptor {
            name: Some(name),
            parent_uuid: Some(parent),
            sibling_order_rank: Some(rank),
            thread,
            ..Default::default()
        })
    }
}

/// An event and the key that orders it among events at the same time: ends before begins
/// (deepest end first, outermost begin first), a zero-length slice's end after its begin.
struct Event {
    ts: u64,
    order: (u8, u8),
    ev: TrackEvent,
}

fn events_of(s: Slice, track: u64) -> Vec<Event> {
    let ev = |ty: i32| TrackEvent {
        r#type: Some(ty),
        track_uuid: Some(track),
        ..Default::default()
    };
    let mut begin = TrackEvent {
        name: Some(s.name),
        categories: vec![s.category.into()],
        debug_annotations: s.args,
        ..ev(if s.end.is_some() {
            proto::SLICE_BEGIN
        } else {
            proto::INSTANT
        })
    };
    match s.flow {
        Some((f, true)) => begin.terminating_flow_ids.push(f),
        Some((f, false)) => begin.flow_ids.push(f),
        None => {}
    }
    let mut out = vec![Event {
        ts: s.start,
        order: (1, s.depth),
        ev: begin,
    }];
    if let Some(end) = s.end {
        let order = if end == s.start {
            (2, 0)
        } else {
            (0, 2 - s.depth)
        };
        out.push(Event {
            ts: end,
            order,
            ev: ev(proto::SLICE_END),
        });
    }
    out
}

fn clock_ns(id: nix::time::ClockId) -> u64 {
    nix::time::clock_gettime(id).map_or(0, |t| {
        t.tv_sec() as u64 * 1_000_000_000 + t.tv_nsec() as u64
    })
}

/// The whole trace of `runs`, encoded.
pub fn encode(runs: &[Run]) -> Vec<u8> {
    use nix::time::ClockId;
    let mut tracks = Tracks {
        next: 0,
        descriptors: Vec::new(),
        lanes: BTreeMap::new(),
        pid: std::process::id() as i32,
    };
    let mut events: Vec<Event> = Vec::new();
    // The followed threads are netpath's own (its harness): their tracks sit under its process.
    let labels: Vec<&str> = runs.iter().map(|r| r.label).collect();
    tracks.add(TrackDescriptor {
        name: Some(format!("netpath ({})", labels.join(", "))),
        process: Some(proto::ProcessDescriptor {
            pid: Some(tracks.pid),
            process_name: Some(format!("netpath ({})", labels.join(", "))),
        }),
        ..Default::default()
    });
    for (g, r) in runs.iter().enumerate() {
        let group = tracks.add(TrackDescriptor {
            name: Some(format!(
                "netpath {}: {} journeys",
                r.label,
                r.timelines.len()
            )),
            child_ordering: Some(proto::ORDER_EXPLICIT),
            sibling_order_rank: Some(g as i32),
            ..Default::default()
        });
        let names = thread_names(r.timelines);
        for (k, t) in r.timelines.iter().enumerate() {
            let flow = ((g as u64 + 1) << 32) | (k as u64 + 1);
            let slices = journey_slices(r.timelines, t, k + 1, flow);
            // Each lane the journey uses is taken for the whole of its time there.
            let mut spans: BTreeMap<Lane, (u64, u64)> = BTreeMap::new();
            for s in &slices {
                let e = spans.entry(s.lane.clone()).or_insert((s.start, s.start));
                e.0 = e.0.min(s.start);
                e.1 = e.1.max(s.end.unwrap_or(s.start));
            }
            let uuids: BTreeMap<Lane, u64> = spans
                .into_iter()
                .map(|(l, span)| {
                    let u = tracks.take((g, group), &l, &names, span);
                    (l, u)
                })
                .collect();
            for s in slices {
                let track = uuids[&s.lane];
                events.extend(events_of(s, track));
            }
        }
    }
    events.sort_by_key(|e| (e.ts, e.order));
    let first_ts = events.first().map_or(0, |e| e.ts);
    let packet = |ts: u64, data: proto::Data| proto::TracePacket {
        timestamp: Some(ts),
        timestamp_clock_id: Some(proto::CLOCK_MONOTONIC),
        trusted_packet_sequence_id: Some(1),
        sequence_flags: None,
        data: Some(data),
    };
    let clocks = [
        (proto::CLOCK_MONOTONIC, ClockId::CLOCK_MONOTONIC),
        (proto::CLOCK_BOOTTIME, ClockId::CLOCK_BOOTTIME),
        (proto::CLOCK_REALTIME, ClockId::CLOCK_REALTIME),
    ];
    let snapshot = proto::ClockSnapshot {
        clocks: clocks
            .iter()
            .map(|&(id, c)| proto::Clock {
                clock_id: Some(id),
                timestamp: Some(clock_ns(c)),
            })
            .collect(),
        primary_trace_clock: Some(proto::CLOCK_BOOTTIME as i32),
    };
    let mut trace = proto::Trace {
        packet: vec![proto::TracePacket {
            timestamp: snapshot.clocks[1].timestamp,
            data: Some(proto::Data::ClockSnapshot(snapshot)),
            ..Default::default()
        }],
    };
    for (i, d) in tracks.descriptors.into_iter().enumerate() {
        let mut p = packet(first_ts, proto::Data::TrackDescriptor(d));
        if i == 0 {
            p.sequence_flags = Some(proto::SEQ_INCREMENTAL_STATE_CLEARED);
        }
        trace.packet.push(p);
    }
    trace.packet.extend(
        events
            .into_iter()
            .map(|e| packet(e.ts, proto::Data::TrackEvent(e.ev))),
    );
    trace.encode_to_vec()
}

/// Writes the runs' journeys to the file `path` as a Perfetto trace.
pub fn write_file(path: &std::path::Path, runs: &[Run]) -> Result<()> {
    std::fs::write(path, encode(runs)).with_context(|| format!("writing {}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::proto::{Data, SLICE_BEGIN, SLICE_END, Trace};
    use prost::Message as _;

    /// Each slice's name and the names of the events that began inside it, in order.
    fn nesting(bytes: &[u8]) -> Vec<(String, Vec<String>)> {
        let trace = Trace::decode(bytes).unwrap();
        let mut open: std::collections::BTreeMap<u64, Vec<(String, Vec<String>)>> =
            Default::default();
        let mut done = Vec::new();
        for p in trace.packet {
            let Some(Data::TrackEvent(e)) = p.data else {
                continue;
            };
            let stack = open.entry(e.track_uuid.unwrap()).or_default();
            let name = e.name.clone().unwrap_or_default();
            match e.r#type {
                Some(SLICE_END) => done.push(stack.pop().expect("an end closes a begin")),
                t => {
                    if let Some(parent) = stack.last_mut() {
                        parent.1.push(name.clone());
                    }
                    if t == Some(SLICE_BEGIN) {
                        stack.push((name, Vec::new()));
                    }
                }
            }
        }
        assert!(open.values().all(Vec::is_empty));
        done
    }

    #[test]
    fn two_passes_are_children_of_one_softirq_run() {
        let t = crate::record::journey::tests::bridge(1, 0);
        let bytes = super::encode(&[super::Run {
            label: "bridge",
            timelines: std::slice::from_ref(&t),
        }]);
        let n = nesting(&bytes);
        let runs: Vec<_> = n.iter().filter(|(s, _)| s == "NET_RX softirq").collect();
        assert_eq!(runs.len(), 1, "{n:?}");
        let passes = runs[0]
            .1
            .iter()
            .filter(|c| c.starts_with("receive pass"))
            .count();
        assert_eq!(passes, 2, "{runs:?}");
        let hops: Vec<&str> = runs[0]
            .1
            .iter()
            .filter(|c| !c.starts_with("receive pass"))
            .map(String::as_str)
            .collect();
        assert_eq!(
            hops,
            ["bridge", "veth", "backlog", "receiver-stack", "wakeup"]
        );
    }
}
