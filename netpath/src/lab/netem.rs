//! An emulated wire between nodes: a netem qdisc on the lab's underlay links.
//!
//! The overlay lab joins its two nodes with one veth pair (`np<id>u1` ⇄ `np<id>u2`), which
//! stands for the network between two Docker hosts. Between real hosts that network adds
//! propagation and switching time that a veth does not; `compare --underlay-delay` adds it
//! back so that "same node vs cross node" can be measured. The egress drivers' uplink
//! (`np<id>up` ⇄ `np<id>rm`, node to `remote`) is such a wire too. The qdiscs live on links
//! inside the lab's namespaces, so they go with the lab.

use std::time::Duration;

use anyhow::{Context, Result, bail};
use netpath_common::DevKind;

use super::{LabNamespaces, netns_of_run, new_run_id};
use crate::path::{Device, NetPath};
use crate::sys::nl::{Nl, UnknownQdisc};

/// Device kinds that stand for a wire between nodes: the overlay's underlay, and the egress
/// drivers' uplink to the `remote` namespace that stands for another host.
const WIRE_KINDS: &[DevKind] = &[DevKind::Underlay, DevKind::Uplink];
/// netem's queue limit in packets (what `tc` sets when none is given): far above what a
/// request/response or bulk run keeps in flight over a few milliseconds.
const NETEM_LIMIT: u32 = 1000;
/// netem attribute types (linux/pkt_sched.h): delay and jitter in nanoseconds, s64.
const TCA_NETEM_LATENCY64: u16 = 10;
const TCA_NETEM_JITTER64: u16 = 11;

/// Delay (and jitter: uniformly ± around it) added to every packet a node sends on its
/// underlay link.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize, schemars::JsonSchema)]
pub struct WireDelay {
    pub delay: Duration,
    pub jitter: Duration,
}

impl WireDelay {
    /// `netem delay 50 µs jitter 0 µs`.
    pub fn describe(&self) -> String {
        format!(
            "netem delay {} jitter {}",
            micros(self.delay),
            micros(self.jitter)
        )
    }

    /// netem's `TCA_OPTIONS`: `struct tc_netem_qopt` (six u32: latency and jitter in
    /// scheduler ticks, left 0 here; limit; loss, gap, duplicate off) followed by netlink
    /// attributes, LATENCY64 and JITTER64 in nanoseconds (kernels since 4.15 read them
    /// over the tick fields, with no 4.29 s limit).
    fn netem_options(&self) -> Vec<u8> {
        let mut b = Vec::with_capacity(24 + 2 * 12);
        for v in [0, NETEM_LIMIT, 0, 0, 0, 0u32] {
            b.extend_from_slice(&v.to_ne_bytes());
        }
        for (kind, d) in [
            (TCA_NETEM_LATENCY64, self.delay),
            (TCA_NETEM_JITTER64, self.jitter),
        ] {
            let ns = i64::try_from(d.as_nanos()).unwrap_or(i64::MAX);
            // struct nlattr { u16 nla_len; u16 nla_type; } then the value (12 bytes, aligned).
            b.extend_from_slice(&12u16.to_ne_bytes());
            b.extend_from_slice(&kind.to_ne_bytes());
            b.extend_from_slice(&ns.to_ne_bytes());
        }
        b
    }
}

fn micros(d: Duration) -> String {
    let us = d.as_secs_f64() * 1e6;
    if us >= 1000.0 {
        format!("{} ms", us / 1000.0)
    } else {
        format!("{us} µs")
    }
}

/// A path's links that stand for a wire between nodes (the overlay's underlay ends, the
/// egress uplink's ends).
pub fn wire_links(path: &NetPath) -> Vec<&Device> {
    path.devices
        .iter()
        .filter(|d| WIRE_KINDS.contains(&d.kind))
        .collect()
}

/// Puts netem with `w` on every wire link of `path`; returns what was done, for the run's
/// context (`None` for a path without such links: a same-node driver).
///
/// netem is the root qdisc of each end and delays what that end sends (requests leave
/// through u1 or `up`, responses through u2 or `rm`), so each one-way journey crosses the
/// delay exactly once, inside its `underlay` (`uplink`) hop: the qdisc holds the packet
/// between `dev_queue` on the device (`net:net_dev_queue` fires before the qdisc) and
/// `netif_rx` on its peer.
pub fn delay_wire(path: &NetPath, w: &WireDelay) -> Result<Option<String>> {
    let links = wire_links(path);
    if links.is_empty() {
        return Ok(None);
    }
    let namespaces = path.namespaces();
    for d in &links {
        let ns = namespaces
            .iter()
            .find(|n| n.name == d.netns)
            .with_context(|| format!("netns {} of {}", d.netns, d.name))?;
        ns.run(|| Nl::new()?.add_root_qdisc(d.ifindex, "netem", w.netem_options()))
            .map_err(|e| explain(e, w))?;
    }
    let names: Vec<&str> = links.iter().map(|d| d.name.as_str()).collect();
    Ok(Some(format!("{} on {}", w.describe(), names.join(", "))))
}

/// Fails with one clear line unless this kernel can put netem with `w` on a link.
pub fn check_netem(w: &WireDelay) -> Result<()> {
    try_qdisc("netem", Some(w.netem_options())).map_err(|e| explain(e, w))
}

/// Whether this kernel has the qdisc `kind` (with `options`, or its defaults): tried on the
/// loopback of a scratch namespace (`np<id>-qdisc`), removed before returning. A missing
/// kind is an [`UnknownQdisc`] error.
pub fn try_qdisc(kind: &str, options: Option<Vec<u8>>) -> Result<()> {
    let run_id = new_run_id()?;
    let mut nss = LabNamespaces::new(&run_id);
    let ns = nss.create("qdisc")?;
    let tried = ns.run(|| {
        let nl = Nl::new()?;
        let lo = nl.lo_up()?;
        match options {
            Some(o) => nl.add_root_qdisc(lo.ifindex, kind, o),
            None => nl.replace_root_qdisc(lo.ifindex, kind),
        }
    });
    // Dropped before it became a path's: removes the namespace.
    drop(nss);
    let left = netns_of_run(&run_id)?;
    if !left.is_empty() {
        bail!("cannot remove the scratch namespace {}", left.join(", "));
    }
    tried
}

/// A missing netem becomes the one line the user reads; other errors stay as they are.
fn explain(e: anyhow::Error, w: &WireDelay) -> anyhow::Error {
    if e.downcast_ref::<UnknownQdisc>().is_none() {
        return e;
    }
    let release = nix::sys::utsname::uname()
        .map(|u| u.release().to_string_lossy().into_owned())
        .unwrap_or_default();
    anyhow::anyhow!(
        "the underlay delay ({}) needs the netem qdisc, which this kernel ({release}) does not \
         have (CONFIG_NET_SCH_NETEM): run without --underlay-delay, or on a kernel with sch_netem",
        w.describe()
    )
}

/// Parses `50us`, `2ms`, `1.5ms`, `0` for `--underlay-delay` and `--underlay-jitter`; at
/// most one second (a wire, not an outage).
pub fn parse_wire_duration(s: &str) -> Result<Duration> {
    let d = if s.trim() == "0" {
        Duration::ZERO
    } else {
        humantime::parse_duration(s.trim()).map_err(|e| {
            anyhow::anyhow!("{s:?} is not a duration ({e}); write it like 50us, 2ms or 1.5ms")
        })?
    };
    if d > Duration::from_secs(1) {
        bail!("{s} is more than a wire adds (at most 1s)");
    }
    Ok(d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn netem_options_layout() {
        let w = WireDelay {
            delay: Duration::from_micros(50),
            jitter: Duration::from_micros(5),
        };
        let b = w.netem_options();
        assert_eq!(b.len(), 24 + 24);
        let u32_at = |i: usize| u32::from_ne_bytes(b[i..i + 4].try_into().unwrap());
        let u16_at = |i: usize| u16::from_ne_bytes(b[i..i + 2].try_into().unwrap());
        let i64_at = |i: usize| i64::from_ne_bytes(b[i..i + 8].try_into().unwrap());
        assert_eq!((u32_at(0), u32_at(4), u32_at(20)), (0, NETEM_LIMIT, 0));
        assert_eq!((u16_at(24), u16_at(26), i64_at(28)), (12, 10, 50_000));
        assert_eq!((u16_at(36), u16_at(38), i64_at(40)), (12, 11, 5_000));
    }

    #[test]
    fn wire_durations() {
        let p = |s| parse_wire_duration(s).map_err(|e| e.to_string());
        assert_eq!(p("50us"), Ok(Duration::from_micros(50)));
        assert_eq!(p("2ms"), Ok(Duration::from_millis(2)));
        assert_eq!(p("1.5ms"), Ok(Duration::from_micros(1500)));
        assert_eq!(p("0"), Ok(Duration::ZERO));
        assert!(p("fast").unwrap_err().contains("50us"));
        assert!(p("3s").unwrap_err().contains("at most"));
        assert_eq!(
            WireDelay {
                delay: Duration::from_micros(50),
                jitter: Duration::from_millis(2)
            }
            .describe(),
            "netem delay 50 µs jitter 2 ms"
        );
    }
}
