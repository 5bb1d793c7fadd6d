//! Context of a run: TCP counters of a namespace and the lab devices' RPS settings.
//!
//! Both are per network namespace, and both are easy to read from the wrong one:
//! `/proc/net` is `/proc/self/net`, the namespace of the *thread group leader*, so the
//! counters are read from `/proc/thread-self/net` on a thread that entered the
//! namespace; `/sys/class/net` shows the namespace that mounted sysfs, so devices are
//! read through a private sysfs mount made on a thread with its own mount namespace.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;

use anyhow::{Context, Result, anyhow, bail};
use nix::mount::{MsFlags, mount};
use nix::sched::{CloneFlags, unshare};

use crate::path::NetPath;
use crate::sys::netns::Netns;

/// TCP counters of one network namespace (cumulative since it was created).
#[derive(
    Clone,
    Copy,
    Debug,
    Default,
    PartialEq,
    Eq,
    serde::Serialize,
    serde::Deserialize,
    schemars::JsonSchema,
)]
pub struct NetCounters {
    /// `TcpExt: TCPOFOQueue`, segments put in the out-of-order queue.
    pub tcp_ofo_queue: u64,
    /// `TcpExt: TCPSACKReorder`, reordering detected by SACK.
    pub tcp_sack_reorder: u64,
    /// `Tcp: RetransSegs`.
    pub retrans_segs: u64,
    /// `TcpExt: TCPDSACKRecvSegs` (`TCPDSACKRecv` before 5.8): segments the peer reported
    /// with DSACK as already received, i.e. retransmitted spuriously (reordering or a hasty
    /// timer, not loss). Segments, like `RetransSegs`: one GSO retransmission counts many.
    pub tcp_dsack_recv: u64,
    /// `Tcp: InSegs`.
    pub in_segs: u64,
    /// `Tcp: OutSegs`.
    pub out_segs: u64,
}

impl NetCounters {
    /// `self + more`, per counter: a side's turns added up.
    pub fn plus(&self, more: &NetCounters) -> NetCounters {
        NetCounters {
            tcp_ofo_queue: self.tcp_ofo_queue + more.tcp_ofo_queue,
            tcp_sack_reorder: self.tcp_sack_reorder + more.tcp_sack_reorder,
            retrans_segs: self.retrans_segs + more.retrans_segs,
            tcp_dsack_recv: self.tcp_dsack_recv + more.tcp_dsack_recv,
            in_segs: self.in_segs + more.in_segs,
            out_segs: self.out_segs + more.out_segs,
        }
    }

    /// `self - before`, per counter (saturating: counters only grow).
    pub fn delta(&self, before: &NetCounters) -> NetCounters {
        NetCounters {
            tcp_ofo_queue: self.tcp_ofo_queue.saturating_sub(before.tcp_ofo_queue),
            tcp_sack_reorder: self
                .tcp_sack_reorder
                .saturating_sub(before.tcp_sack_reorder),
            retrans_segs: self.retrans_segs.saturating_sub(before.retrans_segs),
            tcp_dsack_recv: self.tcp_dsack_recv.saturating_sub(before.tcp_dsack_recv),
            in_segs: self.in_segs.saturating_sub(before.in_segs),
            out_segs: self.out_segs.saturating_sub(before.out_segs),
        }
    }

    /// Parse the text of `/proc/net/netstat` and `/proc/net/snmp`.
    pub fn parse(netstat: &str, snmp: &str) -> Result<NetCounters> {
        let ext = proc_table(netstat, "TcpExt").context("/proc/net/netstat")?;
        let tcp = proc_table(snmp, "Tcp").context("/proc/net/snmp")?;
        let get = |t: &HashMap<String, i64>, table: &str, k: &str| -> Result<u64> {
            t.get(k)
                .map(|v| (*v).max(0) as u64)
                .ok_or_else(|| anyhow!("{table}: {k} missing"))
        };
        Ok(NetCounters {
            tcp_ofo_queue: get(&ext, "TcpExt", "TCPOFOQueue")?,
            tcp_sack_reorder: get(&ext, "TcpExt", "TCPSACKReorder")?,
            retrans_segs: get(&tcp, "Tcp", "RetransSegs")?,
            tcp_dsack_recv: get(&ext, "TcpExt", "TCPDSACKRecvSegs")
                .or_else(|_| get(&ext, "TcpExt", "TCPDSACKRecv"))?,
            in_segs: get(&tcp, "Tcp", "InSegs")?,
            out_segs: get(&tcp, "Tcp", "OutSegs")?,
        })
    }
}

/// One table of a `/proc/net/{snmp,netstat}` style file: a `Name: k1 k2 …` line followed
/// by a `Name: v1 v2 …` line.
fn proc_table(text: &str, name: &str) -> Result<HashMap<String, i64>> {
    let prefix = format!("{name}:");
    let mut lines = text.lines().filter_map(|l| l.strip_prefix(prefix.as_str()));
    let (Some(keys), Some(vals)) = (lines.next(), lines.next()) else {
        bail!("no {name} table");
    };
    let keys: Vec<&str> = keys.split_whitespace().collect();
    let vals: Vec<&str> = vals.split_whitespace().collect();
    if keys.len() != vals.len() {
        bail!("{name}: {} names but {} values", keys.len(), vals.len());
    }
    keys.into_iter()
        .zip(vals)
        .map(|(k, v)| {
            let v: i64 = v
                .parse()
                .with_context(|| format!("{name}: bad value {v:?} for {k}"))?;
            Ok((k.to_string(), v))
        })
        .collect()
}

/// The TCP counters of `ns`, read on a thread inside it.
pub fn read_counters(ns: &Netns) -> Result<NetCounters> {
    ns.run(|| {
        let base = Path::new("/proc/thread-self/net");
        let read = |f: &str| {
            std::fs::read_to_string(base.join(f))
                .with_context(|| format!("cannot read /proc/thread-self/net/{f}"))
        };
        NetCounters::parse(&read("netstat")?, &read("snmp")?)
    })
    .with_context(|| format!("reading TCP counters of {}", ns.name))
}

/// Settings of one lab device that matter to latency.
#[derive(
    Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize, schemars::JsonSchema,
)]
pub struct DevContext {
    pub netns: String,
    pub name: String,
    pub mtu: u32,
    /// `queues/rx-N/rps_cpus` (hex CPU mask, as the kernel prints it), one per rx queue
    /// in queue order. Empty if the device has no rx queues in sysfs.
    pub rps_cpus: Vec<String>,
}

/// Context of every device of the lab, in `lab.devices` order.
pub fn device_context(lab: &NetPath) -> Result<Vec<DevContext>> {
    let nss = lab.namespaces();
    // Names of the devices in each namespace, one sysfs mount per namespace.
    let mut by_ns: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for d in &lab.devices {
        by_ns.entry(&d.netns).or_default().push(&d.name);
    }
    let mut found: HashMap<(String, String), (Option<u32>, Vec<String>)> = HashMap::new();
    for (ns_name, devs) in by_ns {
        let ns = nss
            .iter()
            .find(|n| n.name == ns_name)
            .with_context(|| format!("netns {ns_name} is not part of this lab"))?;
        let got = ns
            .run(|| {
                private_sysfs()?;
                devs.iter()
                    .map(|d| Ok((d.to_string(), read_dev(d)?)))
                    .collect::<Result<Vec<_>>>()
            })
            .with_context(|| format!("reading device settings in {ns_name}"))?;
        for (d, v) in got {
            found.insert((ns_name.to_string(), d), v);
        }
    }
    lab.devices
        .iter()
        .map(|d| {
            let (mtu, rps_cpus) = found
                .remove(&(d.netns.clone(), d.name.clone()))
                .with_context(|| format!("{} in {} was not read", d.name, d.netns))?;
            Ok(DevContext {
                netns: d.netns.clone(),
                name: d.name.clone(),
                mtu: mtu.unwrap_or(d.mtu),
                rps_cpus,
            })
        })
        .collect()
}

/// On the calling thread only: a mount namespace of its own (unshare implies
/// `CLONE_FS`, so other threads keep theirs), nothing propagating back to the host's
/// mounts, and a fresh sysfs on `/sys` for the thread's current network namespace.
/// All of it goes away when the thread exits.
///
/// Not read-only: sysfs has one superblock per network namespace, and a read-only one a
/// reader left (its unmount at thread exit is deferred) would make `tune --knob rps`'s
/// mount, which writes the masks of the lab's own devices, read-only too.
pub(crate) fn private_sysfs() -> Result<()> {
    unshare(CloneFlags::CLONE_NEWNS).context("unshare(CLONE_NEWNS) failed")?;
    mount(
        None::<&str>,
        "/",
        None::<&str>,
        MsFlags::MS_REC | MsFlags::MS_SLAVE,
        None::<&str>,
    )
    .context("making / rslave in the private mount namespace")?;
    match mount(
        Some("sysfs"),
        "/sys",
        Some("sysfs"),
        MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC,
        None::<&str>,
    ) {
        // EBUSY: the sysfs of this netns is the one already on /sys (the host's own
        // namespace, e.g. Docker's host network): read it as it is.
        Ok(()) | Err(nix::errno::Errno::EBUSY) => Ok(()),
        Err(e) => Err(e).context("mounting a private sysfs"),
    }
}

/// MTU (if readable) and RPS masks of `dev` from the private sysfs.
pub(crate) fn read_dev(dev: &str) -> Result<(Option<u32>, Vec<String>)> {
    let base = Path::new("/sys/class/net").join(dev);
    if !base.exists() {
        bail!("{} does not exist", base.display());
    }
    let mtu = std::fs::read_to_string(base.join("mtu"))
        .ok()
        .and_then(|s| s.trim().parse().ok());
    let mut queues: Vec<(u32, String)> = Vec::new();
    let qdir = base.join("queues");
    let rd = match std::fs::read_dir(&qdir) {
        Ok(rd) => rd,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok((mtu, Vec::new())),
        Err(e) => return Err(e).with_context(|| format!("cannot list {}", qdir.display())),
    };
    for e in rd {
        let e = e.with_context(|| format!("cannot list {}", qdir.display()))?;
        let name = e.file_name();
        let Some(idx) = name
            .to_str()
            .and_then(|n| n.strip_prefix("rx-"))
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        let p = e.path().join("rps_cpus");
        // Absent without CONFIG_RPS.
        let mask = match std::fs::read_to_string(&p) {
            Ok(s) => s.trim().to_string(),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(e).with_context(|| format!("cannot read {}", p.display())),
        };
        queues.push((idx, mask));
    }
    queues.sort();
    Ok((mtu, queues.into_iter().map(|(_, m)| m).collect()))
}

#[cfg(test)]
mod tests {
    use super::*;

    const NETSTAT: &str = "TcpExt: SyncookiesSent TCPOFOQueue TCPSACKReorder TCPDSACKRecv\n\
                           TcpExt: 0 17 3 1\n\
                           IpExt: InNoRoutes InOctets\n\
                           IpExt: 0 123\n";
    const SNMP: &str = "Ip: Forwarding DefaultTTL\n\
                        Ip: 1 64\n\
                        Tcp: RtoAlgorithm MaxConn ActiveOpens InSegs OutSegs RetransSegs\n\
                        Tcp: 1 -1 5 100 120 2\n\
                        Udp: InDatagrams\n\
                        Udp: 0\n";

    #[test]
    fn dsack_segments_are_preferred_to_dsack_blocks() {
        let netstat = "TcpExt: TCPOFOQueue TCPSACKReorder TCPDSACKRecv TCPDSACKRecvSegs\n\
                       TcpExt: 0 0 4 130\n";
        assert_eq!(
            NetCounters::parse(netstat, SNMP).unwrap().tcp_dsack_recv,
            130
        );
    }

    #[test]
    fn parses_counters() {
        let c = NetCounters::parse(NETSTAT, SNMP).unwrap();
        assert_eq!(
            c,
            NetCounters {
                tcp_ofo_queue: 17,
                tcp_sack_reorder: 3,
                retrans_segs: 2,
                tcp_dsack_recv: 1,
                in_segs: 100,
                out_segs: 120,
            }
        );
        let before = NetCounters {
            out_segs: 20,
            in_segs: 200,
            ..c
        };
        let d = c.delta(&before);
        assert_eq!(d.out_segs, 100);
        assert_eq!(d.in_segs, 0);
        assert_eq!(d.tcp_ofo_queue, 0);
    }

    #[test]
    fn missing_counter_is_an_error() {
        let e = NetCounters::parse("TcpExt: A\nTcpExt: 1\n", SNMP).unwrap_err();
        assert!(format!("{e:#}").contains("TCPOFOQueue"), "{e:#}");
        assert!(NetCounters::parse(NETSTAT, "Ip: a\nIp: 1\n").is_err());
    }
}
