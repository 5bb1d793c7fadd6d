//! The files `trace` writes for other viewers, read back by those viewers' own readers:
//! pcap-ng by tshark (Debian's) and pcap-file, the Perfetto trace by Perfetto's own schema
//! (the `perfetto_protos` crate), against the JSON timelines of the same run.
use std::collections::BTreeMap;
use std::process::Command;

use serde_json::Value;

use super::common;

fn tmp(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("np-files-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(name)
}

fn tshark(args: &[&str]) -> String {
    let out = Command::new("tshark")
        .args(args)
        .output()
        .unwrap_or_else(|e| {
            panic!("tshark: {e}: install it (apt-get install tshark, or cargo xtask setup --tests)")
        });
    let err = String::from_utf8_lossy(&out.stderr);
    // tshark says it runs as root on every start: that line is about it, not the file.
    let warnings: Vec<&str> = err
        .lines()
        .filter(|l| !l.starts_with("Running as user \"root\""))
        .collect();
    assert!(out.status.success(), "tshark {args:?}: {err}");
    assert!(warnings.is_empty(), "tshark {args:?} warned: {warnings:?}");
    String::from_utf8(out.stdout).unwrap()
}

/// A timeline's devices in the order its points cross them.
fn devices(t: &Value) -> Vec<String> {
    let mut d: Vec<String> = Vec::new();
    for p in t["points"].as_array().unwrap() {
        let dev = p["device"].as_str().unwrap();
        if !dev.is_empty() && !d.iter().any(|x| x == dev) {
            d.push(dev.to_string());
        }
    }
    d
}

#[test]
fn trace_pcapng_has_a_packet_with_its_hops_per_timeline_and_tshark_reads_it() {
    use pcap_file::pcapng::{Block, PcapNgReader};
    let _g = common::need_root();
    let file = tmp("bridge.pcapng");
    let f = file.to_str().unwrap();
    let v = common::run_json(&["trace", "-d", "bridge", "-c", "6", "--json", "--pcapng", f]);
    let ts = v["timelines"].as_array().unwrap();
    assert_eq!(ts.len(), 6);
    let mut reader = PcapNgReader::new(std::fs::File::open(&file).unwrap()).unwrap();
    let (mut ifaces, mut packets) = (Vec::new(), Vec::new());
    while let Some(b) = reader.next_block() {
        match b.unwrap().0.into_owned() {
            Block::InterfaceDescription(i) => ifaces.push(i),
            Block::EnhancedPacket(p) => packets.push(p),
            _ => {}
        }
    }
    // One interface block per device crossed, named dev@netns.
    let mut crossed: Vec<String> = ts.iter().flat_map(devices).collect();
    crossed.sort();
    crossed.dedup();
    let names: Vec<String> = ifaces.iter().map(|i| format!("{:?}", i.options)).collect();
    assert_eq!(ifaces.len(), crossed.len(), "{names:?} vs {crossed:?}");
    for d in &crossed {
        assert!(
            names
                .iter()
                .any(|n| n.contains(&format!("IfName(\"{d}\")"))),
            "{d}: {names:?}"
        );
    }
    assert_eq!(packets.len(), ts.len());
    for (k, (p, t)) in packets.iter().zip(ts).enumerate() {
        let opts = format!("{:?}", p.options);
        let head = format!(
            "netpath journey {} {} bridge",
            k + 1,
            t["dir"].as_str().unwrap()
        );
        assert!(opts.contains(&head), "{opts}");
        for pt in t["points"].as_array().unwrap().iter().skip(1) {
            let hop = pt["hop"].as_str().unwrap();
            assert!(opts.contains(&format!("{hop} ")), "{hop} missing: {opts}");
        }
        // The custom option carries the timeline as JSON.
        assert!(opts.contains("pen: 32473"), "{opts}");
        assert!(
            opts.contains(&t["tuple"].as_str().unwrap().replace('"', "\\\"")),
            "{opts}"
        );
        // The headers the kernel side read, rebuilt.
        let ip = etherparse::Ipv4HeaderSlice::from_slice(&p.data).unwrap();
        let h = &t["headers"];
        assert_eq!(ip.source_addr().to_string(), h["saddr"].as_str().unwrap());
        assert_eq!(
            ip.destination_addr().to_string(),
            h["daddr"].as_str().unwrap()
        );
        assert_eq!(ip.protocol().0, 6);
        let iface = ifaces[p.interface_id as usize].options.iter().find_map(|o| match o {
            pcap_file::pcapng::blocks::interface_description::InterfaceDescriptionOption::IfName(n) => Some(n.to_string()),
            _ => None,
        });
        assert_eq!(
            iface.as_deref(),
            Some(devices(t)[0].as_str()),
            "the first device"
        );
    }
    // tshark reads it whole with no warning, comments and interfaces included.
    let all = tshark(&["-r", f, "-V"]);
    assert_eq!(all.matches("Packet comments").count(), ts.len(), "{all}");
    assert!(all.contains("netpath journey 1 "), "{all}");
    // Wireshark's own tools list every interface block (tshark names only a frame's own).
    let info = Command::new("capinfos").args(["-I", f]).output().unwrap();
    let info = String::from_utf8_lossy(&info.stdout);
    for d in &crossed {
        assert!(
            info.contains(d.as_str()),
            "{d} not among capinfos' interfaces: {info}"
        );
    }
    let rows = tshark(&[
        "-r",
        f,
        "-T",
        "fields",
        "-e",
        "frame.interface_name",
        "-e",
        "tcp.dstport",
    ]);
    for (row, t) in rows.lines().zip(ts) {
        let port = t["headers"]["dport"].as_u64().unwrap().to_string();
        assert_eq!(row, format!("{}\t{port}", devices(t)[0]));
    }
    // A display filter on the comment finds the packets whose journey has a hop: every bridge
    // request and response is woken (wakeup), the requests alone carry the client's send.
    let woken = tshark(&["-r", f, "-Y", "frame.comment contains \"wakeup\""]);
    assert_eq!(woken.lines().count(), ts.len(), "{woken}");
    let requests = tshark(&["-r", f, "-Y", "frame.comment contains \" request bridge\""]);
    let want = ts.iter().filter(|t| t["dir"] == "request").count();
    assert_eq!(requests.lines().count(), want, "{requests}");
}

/// A decoded slice or instant: its track, times, name and journey.
#[derive(Debug)]
struct Slice {
    name: String,
    start: u64,
    end: Option<u64>,
    journey: Option<u64>,
    /// Instants and slices that began inside it, by name.
    children: Vec<String>,
}

/// Every track's slices, with what each contains, checking that they nest (each end closes
/// the slice that began last on its track) and that packets come in time order.
fn slices(trace: &perfetto_protos::trace::Trace) -> BTreeMap<u64, Vec<Slice>> {
    use perfetto_protos::track_event::track_event::Type;
    let mut done: BTreeMap<u64, Vec<Slice>> = BTreeMap::new();
    let mut open: BTreeMap<u64, Vec<Slice>> = BTreeMap::new();
    let mut last = 0;
    for p in &trace.packet {
        if !p.has_track_event() {
            continue;
        }
        let (ts, e) = (p.timestamp(), p.track_event());
        assert!(ts >= last, "packets out of time order");
        last = ts;
        let journey = e
            .debug_annotations
            .iter()
            .find(|a| a.name() == "journey")
            .map(|a| a.uint_value());
        let stack = open.entry(e.track_uuid()).or_default();
        let new = |end| Slice {
            name: e.name().to_string(),
            start: ts,
            end,
            journey,
            children: Vec::new(),
        };
        match e.type_() {
            Type::TYPE_SLICE_BEGIN => {
                if let Some(parent) = stack.last_mut() {
                    parent.children.push(e.name().to_string());
                }
                stack.push(new(None));
            }
            Type::TYPE_INSTANT => {
                if let Some(parent) = stack.last_mut() {
                    parent.children.push(e.name().to_string());
                }
                done.entry(e.track_uuid()).or_default().push(new(Some(ts)));
            }
            Type::TYPE_SLICE_END => {
                let mut s = stack.pop().expect("an end closes a slice that began");
                s.end = Some(ts);
                done.entry(e.track_uuid()).or_default().push(s);
            }
            t => panic!("unexpected event type {t:?}"),
        }
    }
    assert!(open.values().all(Vec::is_empty), "slices left open");
    done
}

#[test]
fn trace_perfetto_decodes_with_perfettos_schema_and_shows_a_softirq_run() {
    use protobuf::Message as _;
    let _g = common::need_root();
    let file = tmp("bridge.perfetto-trace");
    let f = file.to_str().unwrap();
    let v = common::run_json(&[
        "trace",
        "-d",
        "bridge",
        "-c",
        "10",
        "--json",
        "--perfetto",
        f,
    ]);
    let ts = v["timelines"].as_array().unwrap();
    let bytes = std::fs::read(&file).unwrap();
    let trace = perfetto_protos::trace::Trace::parse_from_bytes(&bytes).unwrap();
    // The tracks: one per CPU the points ran on, one per followed thread (client and server).
    let mut tracks: BTreeMap<u64, String> = BTreeMap::new();
    let mut tids = Vec::new();
    for p in trace.packet.iter().filter(|p| p.has_track_descriptor()) {
        let d = p.track_descriptor();
        tracks.insert(d.uuid(), d.name().to_string());
        if d.thread.is_some() {
            tids.push(d.thread.tid() as u64);
        }
    }
    let mut cpus: Vec<u64> = ts
        .iter()
        .flat_map(|t| {
            t["points"]
                .as_array()
                .unwrap()
                .iter()
                .map(|p| p["cpu"].as_u64().unwrap())
        })
        .collect();
    cpus.sort();
    cpus.dedup();
    for c in &cpus {
        assert!(
            tracks.values().any(|n| n == &format!("CPU {c}")),
            "CPU {c}: {tracks:?}"
        );
    }
    let mut senders: Vec<u64> = ts.iter().map(|t| t["tid"].as_u64().unwrap()).collect();
    senders.sort();
    senders.dedup();
    tids.sort();
    assert_eq!(tids, senders, "a track per followed thread");
    // Every hop slice of a journey is in its flow, the last one ending it.
    let hops = |k: u64| {
        trace
            .packet
            .iter()
            .filter(|p| p.has_track_event())
            .map(|p| p.track_event())
            .filter(|e| e.categories.iter().any(|c| c == "hop"))
            .filter(|e| {
                e.debug_annotations
                    .iter()
                    .any(|a| a.name() == "journey" && a.uint_value() == k)
            })
            .filter(|e| !e.flow_ids.is_empty() || !e.terminating_flow_ids.is_empty())
            .count()
    };
    for k in 1..=ts.len() as u64 {
        assert!(
            hops(k) >= 8,
            "journey {k}: {} hop slices in its flow",
            hops(k)
        );
    }
    // A bridge journey's two receive passes (the host's bridge port, the server's eth0) in one
    // NET_RX softirq run: on its CPU's track, inside that run's slice.
    let all = slices(&trace);
    let one_run: Vec<u64> = (1..=ts.len() as u64)
        .filter(|&k| {
            let t = &ts[k as usize - 1];
            t["rx_passes"] == 2 && t["softirq_runs"] == 1
        })
        .collect();
    assert!(
        !one_run.is_empty(),
        "no journey with 2 passes in 1 run: {v}"
    );
    for k in one_run {
        let runs: Vec<&Slice> = all
            .iter()
            .filter(|(u, _)| tracks[u].starts_with("CPU "))
            .flat_map(|(_, s)| s)
            .filter(|s| s.name == "NET_RX softirq" && s.journey == Some(k))
            .collect();
        assert_eq!(runs.len(), 1, "journey {k}: {runs:?}");
        let passes = runs[0]
            .children
            .iter()
            .filter(|c| c.starts_with("receive pass "))
            .count();
        assert_eq!(passes, 2, "journey {k}: {:?}", runs[0]);
        assert!(
            runs[0].children.iter().any(|c| c == "bridge"),
            "{:?}",
            runs[0]
        );
        assert!(runs[0].end.unwrap() > runs[0].start);
    }
}
