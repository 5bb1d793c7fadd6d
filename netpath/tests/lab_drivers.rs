//! Privileged integration tests for the `none`, `overlay`, `macvlan`, `published-proxy`,
//! `published-nat`, `egress`, `host-egress` and `gateway` lab drivers: real namespaces, VXLAN
//! and macvlan links, nft tables and Docker's real docker-proxy, so they need root (without it
//! they fail, saying so): `sudo -E cargo test -p netpath --test lab_drivers -- --test-threads=1`.
//! Here: the checks every driver family shares; the tests are in `lab_drivers/`, by family.

use std::time::Duration;

use netpath::driver::Driver;
use netpath::lab::{self, IFNAME_MAX};
use netpath::path::{Device, NetPath};
use netpath::sys::netns::Netns;
use netpath::sys::nl::links_in;
use netpath_common::DevKind;

mod common;

// The driver families. A crate root's `mod x;` looks for tests/x.rs: hence the paths.
#[path = "lab_drivers/egress.rs"]
mod egress;
#[path = "lab_drivers/networks.rs"]
mod networks;
#[path = "lab_drivers/proxy_lifetime.rs"]
mod proxy_lifetime;
#[path = "lab_drivers/published.rs"]
mod published;

/// Every device must exist in its namespace with the reported ifindex, inum, MTU, and
/// every link of every lab namespace must be listed (lo included), with a name netpath
/// gives.
fn check_devices(lab: &NetPath) {
    common::check_devices(lab);
    let nss: Vec<Netns> = lab.namespaces();
    for ns in &nss {
        for l in links_in(ns).unwrap() {
            assert!(l.up, "{l:?} in {} is down", ns.name);
            assert!(l.name.len() <= IFNAME_MAX, "{l:?}");
            assert!(
                l.name == "lo"
                    || l.name == "eth0"
                    || l.name.starts_with(&format!("np{}", lab.run_id)),
                "unexpected link {l:?} in {}",
                ns.name
            );
            assert!(
                lab.device(&ns.name, &l.name).is_some(),
                "{} in {} missing from lab.devices",
                l.name,
                ns.name
            );
        }
    }
}

fn dev<'a>(lab: &'a NetPath, ns: &str, name: &str) -> &'a Device {
    lab.device(ns, name)
        .unwrap_or_else(|| panic!("no device {name} in {ns}: {:?}", lab.devices))
}

/// Each (namespace, link) is a lab device of this kind and MTU, and every namespace of the
/// lab has its lo (65536).
fn check_kinds(lab: &NetPath, want: &[(&Netns, &str, DevKind, u32)]) {
    let lo = lab.namespaces();
    let los = lo.iter().map(|ns| (ns, "lo", DevKind::Loopback, 65536));
    for (ns, name, kind, mtu) in want.iter().copied().chain(los) {
        let d = dev(lab, &ns.name, name);
        assert_eq!((d.kind, d.mtu), (kind, mtu), "{d:?}");
    }
}

/// The lab's subnet is `a.b.K.0/24` for `ab` = [a, b]: returns K.
fn subnet_k(lab: &NetPath, ab: [u8; 2]) -> u8 {
    let (net, plen) = lab.subnet.unwrap();
    assert_eq!((net.octets()[..2].to_vec(), plen), (ab.to_vec(), 24));
    net.octets()[2]
}

/// Which of a link's packet counters to read.
#[derive(Clone, Copy, Debug)]
enum Dir {
    Rx,
    Tx,
}

/// Runs the 200 round trips (`rr_200`) and returns how many packets each (namespace, link,
/// direction) counted meanwhile.
fn rr_200_counting(lab: &NetPath, links: &[(&Netns, &str, Dir)]) -> Vec<u64> {
    let count = |&(ns, name, dir): &(&Netns, &str, Dir)| {
        let (rx, tx) = packets(ns, name);
        match dir {
            Dir::Rx => rx,
            Dir::Tx => tx,
        }
    };
    let before: Vec<u64> = links.iter().map(count).collect();
    common::rr_200(lab);
    links
        .iter()
        .zip(before)
        .map(|(l, b)| count(l) - b)
        .collect()
}

/// The 200 round trips crossed each of these links: at least 220 packets (the requests,
/// warm-up included) each.
fn rr_200_through(lab: &NetPath, links: &[(&Netns, &str, Dir)]) {
    for (l, n) in links.iter().zip(rr_200_counting(lab, links)) {
        assert!(n >= 220, "{n} packets on {} {} {:?}", l.0.name, l.1, l.2);
    }
}

/// True once the process has exited (gone from /proc, or a zombie nobody reaped yet).
fn exited(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        // "PID (comm) S ...": the state follows the last ')'.
        Ok(s) => s
            .rsplit_once(')')
            .is_some_and(|(_, rest)| rest.trim_start().starts_with(['Z', 'X'])),
    }
}

/// (rx_packets, tx_packets) of a link, from /proc/thread-self/net/dev read inside `ns`.
fn packets(ns: &Netns, name: &str) -> (u64, u64) {
    let text = ns
        .run(|| Ok(std::fs::read_to_string("/proc/thread-self/net/dev")?))
        .unwrap();
    for line in text.lines().skip(2) {
        let Some((n, rest)) = line.split_once(':') else {
            continue;
        };
        if n.trim() == name {
            let v: Vec<u64> = rest
                .split_whitespace()
                .map(|x| x.parse().unwrap())
                .collect();
            return (v[1], v[9]);
        }
    }
    panic!("no {name} in {}: {text}", ns.name)
}

// --- a real killed run, in a child process ----------------------------------------
// The child stays in this root file: spawn_child (lab_drivers/proxy_lifetime.rs) starts this
// binary with `--exact child_published_proxy_process`, which must be the test's full path.
const CHILD_ENV: &str = "NETPATH_LAB_DRIVERS_TEST_CHILD";

/// Child side (ignored in normal runs): builds a published-proxy lab, prints its run id
/// and proxy pid, then waits to be signalled.
#[test]
#[ignore = "helper run as a child process by the cleanup tests"]
fn child_published_proxy_process() {
    if std::env::var(CHILD_ENV).is_err() {
        return;
    }
    lab::install_signal_cleanup();
    let lab = lab::build(Driver::PublishedProxy).unwrap();
    println!("RUNID={} PID={}", lab.run_id, lab.proxy_pid.unwrap());
    std::mem::forget(lab);
    std::thread::sleep(Duration::from_secs(60));
    panic!("child was not signalled");
}
