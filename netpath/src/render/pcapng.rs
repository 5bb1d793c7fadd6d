//! `trace --pcapng FILE`: each followed packet as a pcap-ng packet for Wireshark and tshark.
//! Its bytes are the IPv4 and transport headers the kernel side read where the packet was first
//! seen (addresses, protocol, ports; an ICMP echo's identifier and sequence), rebuilt with
//! etherparse: no payload, no TCP sequence or flags (netpath does not capture packets). Its
//! time is the journey's first point, its interface the first device it crossed (one interface
//! block per device, named `dev@netns` with the device kind and netns in its description), and
//! its comments say the hops (`frame.comment contains "wakeup"` finds them) and the points; a
//! custom option carries the timeline as JSON.
use std::borrow::Cow;
use std::io::Write;
use std::time::Duration;

use anyhow::{Context as _, Result};
use pcap_file::DataLink;
use pcap_file::pcapng::PcapNgWriter;
use pcap_file::pcapng::blocks::custom::CustomUtf8Option;
use pcap_file::pcapng::blocks::enhanced_packet::{EnhancedPacketBlock, EnhancedPacketOption};
use pcap_file::pcapng::blocks::interface_description::{
    InterfaceDescriptionBlock, InterfaceDescriptionOption, InterfaceTsResolution,
};
use pcap_file::pcapng::blocks::opt_common::CommonOption;
use pcap_file::pcapng::blocks::section_header::{SectionHeaderBlock, SectionHeaderOption};

use crate::record::{Headers, Timeline, journey};

/// IANA's enterprise number for examples (RFC 5612): netpath has none of its own, and a custom
/// option needs one. Readers match on it and the option code.
pub const PEN: u32 = 32473;
/// An option's length is 16 bits: a longer timeline is left out of the custom option.
const OPTION_MAX: usize = 65_000;

/// One run's followed packets: what ran (the driver or the containers) and its timelines.
pub struct Run<'a> {
    pub label: &'a str,
    pub timelines: &'a [Timeline],
}

/// A device as the interface blocks name it.
#[derive(Clone, PartialEq)]
struct Iface {
    name: String,
    kind: String,
    netns: u32,
}

/// The devices the timelines cross, in the order first crossed; a journey whose points have no
/// device (none: it never reached one) counts on one "no device" interface.
fn interfaces(runs: &[Run]) -> Vec<Iface> {
    let mut out: Vec<Iface> = Vec::new();
    for t in runs.iter().flat_map(|r| r.timelines) {
        let devs = t.points.iter().filter(|p| !p.device.is_empty());
        for p in devs {
            let i = Iface {
                name: p.device.clone(),
                kind: p.kind.to_string(),
                netns: p.netns,
            };
            if !out.iter().any(|o| o.name == i.name && o.netns == i.netns) {
                out.push(i);
            }
        }
    }
    out
}

/// The interface block of a device.
fn interface_block(i: &Iface) -> InterfaceDescriptionBlock<'static> {
    let (dev, ns) = i.name.split_once('@').unwrap_or((&i.name, ""));
    let desc = if i.name.is_empty() {
        "no device: the journey never reached one".to_string()
    } else {
        format!(
            "{} {dev} in netns {ns} (inode {}), as netpath's eBPF points saw it; packets carry \
             the headers the kernel side read, rebuilt, without payload",
            i.kind, i.netns
        )
    };
    InterfaceDescriptionBlock {
        linktype: DataLink::RAW,
        snaplen: 0,
        options: vec![
            InterfaceDescriptionOption::IfName(Cow::Owned(if i.name.is_empty() {
                "none".into()
            } else {
                i.name.clone()
            })),
            InterfaceDescriptionOption::IfDescription(Cow::Owned(desc)),
            InterfaceDescriptionOption::IfTsResol(InterfaceTsResolution::NANO),
        ],
    }
}

/// The packet's headers as bytes: IPv4 and its transport header, checksums filled in.
pub fn packet_bytes(h: &Headers) -> Vec<u8> {
    use etherparse::{IpNumber, PacketBuilder};
    let ip = PacketBuilder::ipv4(h.saddr.octets(), h.daddr.octets(), 64);
    let mut out = Vec::new();
    let done = match h.proto {
        // The window is not read either: the largest, so no reader takes it for a full receiver.
        6 => ip.tcp(h.sport, h.dport, 0, u16::MAX).write(&mut out, &[]),
        17 => ip.udp(h.sport, h.dport).write(&mut out, &[]),
        1 => match h.icmp_type {
            8 => ip
                .icmpv4_echo_request(h.sport, h.icmp_seq)
                .write(&mut out, &[]),
            0 => ip
                .icmpv4_echo_reply(h.sport, h.icmp_seq)
                .write(&mut out, &[]),
            t => ip.icmpv4_raw(t, h.icmp_code, [0; 4]).write(&mut out, &[]),
        },
        p => ip.write(&mut out, IpNumber(p), &[]),
    };
    // Writing headers of known sizes into a Vec cannot fail.
    done.expect("headers into a Vec");
    out
}

/// The packet's first comment: `netpath journey 3 request bridge (cpu 0 → 1): sender-stack
/// 3.10 µs | veth 0.21 | …; total 14.20 µs, 2 receive passes, 1 NET_RX softirq run`.
pub fn hop_comment(label: &str, n: usize, t: &Timeline) -> String {
    let cpus: Vec<String> = {
        let mut c: Vec<u16> = t.points.iter().map(|p| p.cpu).collect();
        c.dedup();
        c.iter().map(u16::to_string).collect()
    };
    let mut s = format!(
        "netpath journey {n} {} {label} (cpu {}): {}; total {:.2} µs, {} receive passes, {} \
         NET_RX softirq runs",
        t.dir,
        cpus.join(" → "),
        journey::hop_line(t),
        t.total_us,
        t.rx_passes,
        t.softirq_runs
    );
    if let Some(x) = &t.translated {
        s.push_str(&format!("; NAT: {x}"));
    }
    s
}

/// The packet's second comment: its points, each with its device, CPU and time since the
/// previous one.
fn points_comment(t: &Timeline) -> String {
    let pts: Vec<String> = t
        .points
        .iter()
        .map(|p| {
            let dev = if p.device.is_empty() {
                String::new()
            } else {
                format!(" {} {}", p.device, p.kind)
            };
            format!("{}{dev} cpu{} +{:.3}", p.point, p.cpu, p.since_prev_us)
        })
        .collect();
    format!("points: {}", pts.join(" | "))
}

/// Writes the runs' followed packets as pcap-ng to `w`; returns how many packets it wrote.
/// `utc_offset_ns` turns the kernel's CLOCK_MONOTONIC times into UTC (the JSON header's).
pub fn write(w: impl Write, runs: &[Run], utc_offset_ns: i64, command: &str) -> Result<usize> {
    let uts = nix::sys::utsname::uname().ok();
    let os = uts.map_or("Linux".into(), |u| {
        format!("Linux {}", u.release().to_string_lossy())
    });
    let section = SectionHeaderBlock {
        options: vec![
            SectionHeaderOption::UserApplication(Cow::Owned(format!(
                "netpath {}",
                env!("CARGO_PKG_VERSION")
            ))),
            SectionHeaderOption::OS(Cow::Owned(os)),
            SectionHeaderOption::Common(CommonOption::Comment(Cow::Owned(command.to_string()))),
        ],
        ..Default::default()
    };
    let mut out = PcapNgWriter::with_section_header(w, section)?;
    let mut ifaces = interfaces(runs);
    let none = Iface {
        name: String::new(),
        kind: String::new(),
        netns: 0,
    };
    if runs
        .iter()
        .flat_map(|r| r.timelines)
        .any(|t| t.points.iter().all(|p| p.device.is_empty()))
    {
        ifaces.push(none.clone());
    }
    for i in &ifaces {
        out.write_pcapng_block(interface_block(i))?;
    }
    let mut n = 0;
    for r in runs {
        for (k, t) in r.timelines.iter().enumerate() {
            let first = t.points.iter().find(|p| !p.device.is_empty());
            let iface = first.map_or(ifaces.len() - 1, |p| {
                (ifaces.iter())
                    .position(|i| i.name == p.device && i.netns == p.netns)
                    .expect("every device has its block")
            });
            let at = journey::times(t).first().copied().unwrap_or(t.start_ns);
            let utc = (at as i64).saturating_add(utc_offset_ns).max(0) as u64;
            let data = packet_bytes(&t.headers);
            let comment = |s: String| EnhancedPacketOption::Common(CommonOption::Comment(s.into()));
            let mut options = vec![
                comment(hop_comment(r.label, k + 1, t)),
                comment(points_comment(t)),
            ];
            let json = serde_json::to_string(t)?;
            if json.len() < OPTION_MAX {
                options.push(EnhancedPacketOption::Common(
                    CommonOption::CustomUtf8Copiable(CustomUtf8Option {
                        pen: PEN,
                        value: Cow::Owned(json),
                    }),
                ));
            }
            out.write_pcapng_block(EnhancedPacketBlock {
                interface_id: iface as u32,
                timestamp: Duration::from_nanos(utc),
                original_len: data.len() as u32,
                data: Cow::Owned(data),
                options,
            })?;
            n += 1;
        }
    }
    out.into_inner().flush()?;
    Ok(n)
}

/// Writes the runs to the file `path` (see [`write`]).
pub fn write_file(path: &std::path::Path, runs: &[Run], utc_offset_ns: i64) -> Result<usize> {
    let f = std::fs::File::create(path).with_context(|| format!("creating {}", path.display()))?;
    let command: Vec<String> = std::env::args().collect();
    write(
        std::io::BufWriter::new(f),
        runs,
        utc_offset_ns,
        &command.join(" "),
    )
    .with_context(|| format!("writing {}", path.display()))
}
