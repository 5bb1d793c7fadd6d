//! Privileged integration tests for the `none`, `overlay`, `macvlan`, `published-proxy`,
//! `published-nat`, `egress`, `host-egress` and `gateway` lab drivers. They build real
//! namespaces, VXLAN and macvlan links, nft tables and run Docker's real docker-proxy, so
//! they need root:
//!
//!     sudo -E cargo test -p netpath --test lab_drivers -- --test-threads=1
//!
//! Without root they fail with a message saying so (no silent skips).

use std::net::{Ipv4Addr, SocketAddrV4};
use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use netpath::driver::Driver;
use netpath::harness::{NoPhases, run_rr};
use netpath::lab::{self, IFNAME_MAX, cleanup_leftovers};
use netpath::path::{Device, NetPath};
use netpath::sys::netns::{Netns, ns_inum, read_sysctl};
use netpath::sys::nl::links_in;
use netpath::sys::proxy::{DOCKER_PROXY, proxy_processes};
use netpath_common::DevKind;

mod common;
use common::{KillOnDrop, need_root, netns_files, root_links, small_rr, tear_down_cleanly};

fn ns_of(lab: &NetPath, name: &str) -> Netns {
    lab.namespaces()
        .into_iter()
        .find(|n| n.name == name)
        .unwrap_or_else(|| panic!("no netns {name} in {:?}", lab.netns_names()))
}

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

fn rr_200(lab: &NetPath) {
    let r = run_rr(lab, &small_rr(), &NoPhases).unwrap();
    assert_eq!(r.count, 200);
    assert_eq!(r.hist.len(), 200);
    assert!(r.mean_ns > 0.0 && r.rps > 0.0);
}

fn sorted_names(lab: &NetPath) -> Vec<String> {
    let mut v = lab.netns_names();
    v.sort();
    v
}

fn want_names(id: &str, roles: &[&str]) -> Vec<String> {
    let mut v: Vec<String> = roles.iter().map(|r| format!("np{id}-{r}")).collect();
    v.sort();
    v
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

fn wait_exited(pid: u32) -> bool {
    let t0 = Instant::now();
    while t0.elapsed() < Duration::from_secs(5) {
        if exited(pid) {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    false
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

fn docker_proxy_pids() -> Vec<u32> {
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok())
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read_link(format!("/proc/{pid}/exe"))
                .is_ok_and(|p| p == Path::new(DOCKER_PROXY))
        })
        .collect()
}

/// Listening TCP sockets (local "ADDR:PORT" hex as in /proc/net/tcp) seen from inside
/// the network namespace of `pid`.
fn listeners_of(pid: u32) -> Vec<String> {
    let mut v = Vec::new();
    for f in ["tcp", "tcp6"] {
        let Ok(s) = std::fs::read_to_string(format!("/proc/{pid}/net/{f}")) else {
            continue;
        };
        for line in s.lines().skip(1) {
            let cols: Vec<&str> = line.split_whitespace().collect();
            if cols.len() > 3 && cols[3] == "0A" {
                v.push(cols[1].to_string());
            }
        }
    }
    v
}

#[test]
fn none_driver_builds_runs_and_tears_down() {
    let _serial = need_root();
    let before = root_links();
    let lab = lab::build(Driver::None).unwrap();
    let id = lab.run_id.clone();
    assert_eq!(lab.driver, Driver::None);
    assert_eq!(lab.driver.to_string(), "none");
    assert_eq!(lab.netns_names(), vec![format!("np{id}-ctr")]);
    assert_eq!(lab.client_ns, lab.server_ns);
    assert!(lab.node_ns.is_none());
    assert!(lab.published.is_none() && lab.proxy_pid.is_none() && lab.nft_table.is_none());
    let addr = SocketAddrV4::new(Ipv4Addr::LOCALHOST, lab::LAB_PORT);
    assert_eq!((lab.server_bind, lab.connect_to), (addr, addr));
    assert_eq!(lab.devices.len(), 1);
    let lo = &lab.devices[0];
    assert_eq!((lo.name.as_str(), lo.kind), ("lo", DevKind::Loopback));
    assert_eq!((lo.ifindex, lo.mtu), (1, 65536));
    check_devices(&lab);
    // Nothing but lo in a --network none container.
    let links = links_in(&lab.client_ns).unwrap();
    assert_eq!(links.len(), 1, "{links:?}");

    rr_200(&lab);
    tear_down_cleanly(lab, &before);
}

#[test]
fn overlay_driver_builds_runs_and_tears_down() {
    let _serial = need_root();
    let before = root_links();
    let lab = lab::build(Driver::Overlay).unwrap();
    let id = lab.run_id.clone();
    assert_eq!(lab.driver.to_string(), "overlay");
    assert_eq!(
        sorted_names(&lab),
        want_names(&id, &["cli", "node1", "node2", "srv"])
    );
    let (n1, n2) = (
        ns_of(&lab, &format!("np{id}-node1")),
        ns_of(&lab, &format!("np{id}-node2")),
    );
    let (cli, srv) = (lab.client_ns.clone(), lab.server_ns.clone());
    assert_eq!(cli.name, format!("np{id}-cli"));
    assert_eq!(srv.name, format!("np{id}-srv"));
    assert_eq!(lab.node_ns.as_ref(), Some(&n1));

    // Addresses: overlay 10.215.K.0/24 (cli .2, srv .3), underlay 10.214.K.0/24.
    let (net, plen) = lab.subnet.unwrap();
    assert_eq!((net.octets()[..2].to_vec(), plen), (vec![10, 215], 24));
    let k = net.octets()[2];
    assert_eq!(
        lab.server_bind,
        SocketAddrV4::new(Ipv4Addr::new(10, 215, k, 3), lab::LAB_PORT)
    );
    assert_eq!(lab.connect_to, lab.server_bind);

    // Devices, kinds and MTUs.
    let (u1, u2) = (format!("np{id}u1"), format!("np{id}u2"));
    let (b1, b2) = (format!("np{id}b1"), format!("np{id}b2"));
    let (v1, v2) = (format!("np{id}v1"), format!("np{id}v2"));
    let (cp, sp) = (format!("np{id}c"), format!("np{id}s"));
    for (ns, name, kind, mtu) in [
        (&cli, "eth0", DevKind::Veth, 1450),
        (&n1, cp.as_str(), DevKind::BridgePort, 1450),
        (&n1, b1.as_str(), DevKind::Bridge, 1450),
        (&n1, v1.as_str(), DevKind::Vxlan, 1450),
        (&n1, u1.as_str(), DevKind::Underlay, 1500),
        (&n2, u2.as_str(), DevKind::Underlay, 1500),
        (&n2, v2.as_str(), DevKind::Vxlan, 1450),
        (&n2, b2.as_str(), DevKind::Bridge, 1450),
        (&n2, sp.as_str(), DevKind::BridgePort, 1450),
        (&srv, "eth0", DevKind::Veth, 1450),
        (&cli, "lo", DevKind::Loopback, 65536),
        (&srv, "lo", DevKind::Loopback, 65536),
        (&n1, "lo", DevKind::Loopback, 65536),
        (&n2, "lo", DevKind::Loopback, 65536),
    ] {
        let d = dev(&lab, &ns.name, name);
        assert_eq!((d.kind, d.mtu), (kind, mtu), "{d:?}");
    }
    assert_eq!(lab.devices.len(), 14, "{:?}", lab.devices);
    check_devices(&lab);

    // Netlink: VXLAN with our VNI, port 4789, unicast remote, no learning, on the
    // underlay; enslaved to the node's bridge with the container's port.
    let ul = [
        (
            &n1,
            &u1,
            &v1,
            &b1,
            &cp,
            Ipv4Addr::new(10, 214, k, 1),
            Ipv4Addr::new(10, 214, k, 2),
        ),
        (
            &n2,
            &u2,
            &v2,
            &b2,
            &sp,
            Ipv4Addr::new(10, 214, k, 2),
            Ipv4Addr::new(10, 214, k, 1),
        ),
    ];
    for (ns, u, v, b, p, local, remote) in ul {
        let vname = v.clone();
        let info = ns
            .run(move || netpath::sys::nl::Nl::new()?.vxlan_info(&vname))
            .unwrap()
            .expect("not a vxlan device");
        assert_eq!(info.vni, lab::OVERLAY_VNI);
        assert_eq!(info.port, 4789);
        assert_eq!(info.local, Some(local));
        assert_eq!(info.remote, Some(remote));
        assert!(!info.learning);
        assert_eq!(info.link, Some(dev(&lab, &ns.name, u).ifindex));
        let links = links_in(ns).unwrap();
        let br = links.iter().find(|l| &l.name == b).unwrap();
        assert_eq!(br.kind, "bridge");
        for port in [v, p] {
            let l = links.iter().find(|l| &l.name == port).unwrap();
            assert_eq!(l.master, Some(br.ifindex), "{l:?}");
        }
        assert_eq!(links.iter().find(|l| &l.name == u).unwrap().kind, "veth");
    }
    for ns in [&cli, &srv] {
        let l = links_in(ns).unwrap();
        assert_eq!(l.len(), 2, "{l:?}"); // lo + eth0
    }

    // cli -> srv through both bridges and the VXLAN tunnel: every request crossed the
    // underlay encapsulated.
    let (v1_tx0, u2_rx0) = (packets(&n1, &v1).1, packets(&n2, &u2).0);
    rr_200(&lab);
    assert!(
        packets(&n1, &v1).1 - v1_tx0 >= 220,
        "vxlan did not carry the requests"
    );
    assert!(
        packets(&n2, &u2).0 - u2_rx0 >= 220,
        "underlay did not carry the requests"
    );
    tear_down_cleanly(lab, &before);
}

#[test]
fn macvlan_driver_builds_runs_and_tears_down() {
    let _serial = need_root();
    let before = root_links();
    let lab = lab::build(Driver::Macvlan).unwrap();
    let id = lab.run_id.clone();
    assert_eq!(lab.driver.to_string(), "macvlan");
    assert_eq!(
        sorted_names(&lab),
        want_names(&id, &["cli", "mvp", "node", "srv"])
    );
    let node = lab.node_ns.clone().unwrap();
    let mvp = ns_of(&lab, &format!("np{id}-mvp"));
    let (cli, srv) = (lab.client_ns.clone(), lab.server_ns.clone());
    let (net, plen) = lab.subnet.unwrap();
    assert_eq!((net.octets()[..2].to_vec(), plen), (vec![10, 216], 24));
    assert_eq!(
        *lab.server_bind.ip(),
        Ipv4Addr::new(10, 216, net.octets()[2], 3)
    );
    assert_eq!(lab.connect_to, lab.server_bind);

    let (parent, peer) = (format!("np{id}mp"), format!("np{id}pp"));
    for (ns, name, kind, mtu) in [
        (&cli, "eth0", DevKind::Macvlan, 1500),
        (&srv, "eth0", DevKind::Macvlan, 1500),
        (&node, parent.as_str(), DevKind::MacvlanParent, 1500),
        (&mvp, peer.as_str(), DevKind::MacvlanParent, 1500),
        (&cli, "lo", DevKind::Loopback, 65536),
        (&srv, "lo", DevKind::Loopback, 65536),
        (&node, "lo", DevKind::Loopback, 65536),
        (&mvp, "lo", DevKind::Loopback, 65536),
    ] {
        let d = dev(&lab, &ns.name, name);
        assert_eq!((d.kind, d.mtu), (kind, mtu), "{d:?}");
    }
    assert_eq!(lab.devices.len(), 8);
    check_devices(&lab);

    // The children are macvlans in bridge mode; the parent is our veth, up, with its
    // peer up in our own namespace.
    for ns in [&cli, &srv] {
        let l = links_in(ns).unwrap();
        assert_eq!(l.len(), 2, "{l:?}");
        assert_eq!(l.iter().find(|l| l.name == "eth0").unwrap().kind, "macvlan");
        let mode = ns
            .run(|| netpath::sys::nl::Nl::new()?.macvlan_mode("eth0"))
            .unwrap();
        assert_eq!(mode.as_deref(), Some("bridge"));
    }
    let p = links_in(&node).unwrap();
    let p = p.iter().find(|l| l.name == parent).unwrap();
    assert_eq!(p.kind, "veth");
    assert!(p.up);
    let q = links_in(&mvp).unwrap();
    assert!(q.iter().any(|l| l.name == peer && l.up), "{q:?}");

    // Bridge mode: the children talk directly; at most broadcasts (ARP) leave through
    // the parent to its peer.
    let (cli_tx0, peer_rx0) = (packets(&cli, "eth0").1, packets(&mvp, &peer).0);
    rr_200(&lab);
    assert!(packets(&cli, "eth0").1 - cli_tx0 >= 220);
    let via_parent = packets(&mvp, &peer).0 - peer_rx0;
    assert!(
        via_parent < 10,
        "{via_parent} packets went out of the parent"
    );
    tear_down_cleanly(lab, &before);
}

/// Checks shared by both published drivers: node = client, srv = server, the bridge
/// devices without a client container.
fn check_published(lab: &NetPath) -> (Netns, Netns) {
    let id = &lab.run_id;
    assert_eq!(sorted_names(lab), want_names(id, &["node", "srv"]));
    let node = lab.node_ns.clone().unwrap();
    assert_eq!(lab.client_ns, node);
    assert_eq!(lab.server_ns.name, format!("np{id}-srv"));
    let (net, plen) = lab.subnet.unwrap();
    assert_eq!((net.octets()[..2].to_vec(), plen), (vec![10, 213], 24));
    assert_eq!(
        lab.server_bind,
        SocketAddrV4::new(Ipv4Addr::new(10, 213, net.octets()[2], 3), lab::LAB_PORT)
    );
    assert_eq!(lab.published, Some(lab.connect_to));
    let srv = lab.server_ns.clone();
    for (ns, name, kind, mtu) in [
        (&node, format!("np{id}br"), DevKind::Bridge, 1500),
        (&node, format!("np{id}s"), DevKind::BridgePort, 1500),
        (&srv, "eth0".to_string(), DevKind::Veth, 1500),
        (&srv, "lo".to_string(), DevKind::Loopback, 65536),
        (&node, "lo".to_string(), DevKind::Loopback, 65536),
    ] {
        let d = dev(lab, &ns.name, &name);
        assert_eq!((d.kind, d.mtu), (kind, mtu), "{d:?}");
    }
    assert_eq!(lab.devices.len(), 5, "{:?}", lab.devices);
    check_devices(lab);
    let table = lab.nft_table.clone().unwrap();
    let json = node.run(move || lab::nft::list_table(&table)).unwrap();
    assert!(json.contains("dnat"), "{json}");
    (node, srv)
}

#[test]
fn published_proxy_driver_runs_docker_proxy_in_the_node() {
    let _serial = need_root();
    let before = root_links();
    let lab = lab::build(Driver::PublishedProxy).unwrap();
    assert_eq!(lab.driver.to_string(), "published-proxy");
    let (node, _srv) = check_published(&lab);
    assert_eq!(
        lab.connect_to,
        SocketAddrV4::new(Ipv4Addr::LOCALHOST, lab::PUBLISHED_PORT)
    );

    // The real docker-proxy, inside the node netns, listening on 127.0.0.1 only.
    let pid = lab.proxy_pid.expect("no proxy pid");
    assert_eq!(
        std::fs::read_link(format!("/proc/{pid}/exe")).unwrap(),
        Path::new(DOCKER_PROXY)
    );
    assert_eq!(
        ns_inum(Path::new(&format!("/proc/{pid}/ns/net"))).unwrap(),
        node.inum
    );
    let cmdline = std::fs::read_to_string(format!("/proc/{pid}/cmdline")).unwrap();
    let args: Vec<&str> = cmdline.split('\0').collect();
    for w in [
        ["-host-ip", "127.0.0.1"],
        ["-host-port", "18080"],
        ["-container-port", "11111"],
    ] {
        assert!(args.windows(2).any(|a| a == w), "{args:?}");
    }
    // It inherited no namespace fds (they would keep lab namespaces alive).
    for fd in std::fs::read_dir(format!("/proc/{pid}/fd")).unwrap() {
        let t = std::fs::read_link(fd.unwrap().path()).unwrap();
        let t = t.to_string_lossy();
        assert!(
            !t.starts_with("net:[") && !t.starts_with("/run/netns"),
            "docker-proxy holds {t}"
        );
    }
    // 127.0.0.1:18080 is 0100007F:46A0 in /proc/net/tcp; nothing else listens.
    assert_eq!(listeners_of(pid), vec!["0100007F:46A0".to_string()]);
    // The one /proc scan (cleanup, inspect, the Docker driver) sees it, in the node, with
    // what it forwards.
    let seen: Vec<_> = proxy_processes()
        .into_iter()
        .filter(|p| p.pid == pid)
        .collect();
    assert_eq!(seen.len(), 1, "{seen:?}");
    let p = &seen[0];
    assert_eq!(p.netns_inum, node.inum);
    assert_eq!((p.host_ip.as_str(), p.host_port), ("127.0.0.1", 18080));
    assert_eq!(
        SocketAddrV4::new(p.container_ip.parse().unwrap(), p.container_port),
        lab.server_bind
    );

    // node -> 127.0.0.1:18080 -> docker-proxy -> bridge -> srv.
    let srv_rx0 = packets(&lab.server_ns, "eth0").0;
    rr_200(&lab);
    assert!(packets(&lab.server_ns, "eth0").0 - srv_rx0 >= 220);
    tear_down_cleanly(lab, &before);
    assert!(
        exited(pid) && !Path::new(&format!("/proc/{pid}")).exists(),
        "docker-proxy {pid} survived teardown"
    );
}

#[test]
fn published_nat_driver_dnats_the_gateway_address() {
    let _serial = need_root();
    let before = root_links();
    let lab = lab::build(Driver::PublishedNat).unwrap();
    assert_eq!(lab.driver.to_string(), "published-nat");
    let (node, _srv) = check_published(&lab);
    let k = lab.subnet.unwrap().0.octets()[2];
    assert_eq!(
        lab.connect_to,
        SocketAddrV4::new(Ipv4Addr::new(10, 213, k, 1), lab::PUBLISHED_PORT)
    );
    assert!(lab.proxy_pid.is_none());
    // No proxy anywhere in the node: the DNAT alone carries the connection.
    let inums: Vec<u32> = docker_proxy_pids()
        .into_iter()
        .filter_map(|p| ns_inum(Path::new(&format!("/proc/{p}/ns/net"))).ok())
        .collect();
    assert!(!inums.contains(&node.inum));
    // route_localnet stays off: 127.0.0.1 is not what is DNAT-ed.
    assert_eq!(
        node.run(|| read_sysctl("net.ipv4.conf.all.route_localnet"))
            .unwrap(),
        "0"
    );

    rr_200(&lab);
    tear_down_cleanly(lab, &before);
}

#[test]
fn dropping_a_published_proxy_lab_stops_the_proxy() {
    let _serial = need_root();
    let lab = lab::build(Driver::PublishedProxy).unwrap();
    let (id, pid) = (lab.run_id.clone(), lab.proxy_pid.unwrap());
    assert!(!exited(pid));
    drop(lab);
    assert!(
        !Path::new(&format!("/proc/{pid}")).exists(),
        "docker-proxy {pid} survived drop"
    );
    assert!(netns_files(&id).is_empty(), "{:?}", netns_files(&id));
}

#[test]
fn cleanup_leftovers_kills_a_dead_runs_docker_proxy() {
    let _serial = need_root();
    let lab = lab::build(Driver::PublishedProxy).unwrap();
    let (id, pid) = (lab.run_id.clone(), lab.proxy_pid.unwrap());
    let names = sorted_names(&lab);
    std::mem::forget(lab); // the process that built it "died"
    assert!(!exited(pid));
    assert_eq!(netns_files(&id).len(), 2);
    let removed = cleanup_leftovers().unwrap();
    for n in &names {
        assert!(removed.contains(n), "{n} not removed: {removed:?}");
    }
    // The proxy was our child: killed and reaped, so its pid is gone altogether.
    assert!(
        !Path::new(&format!("/proc/{pid}")).exists(),
        "docker-proxy {pid} survived cleanup"
    );
    assert!(netns_files(&id).is_empty(), "{:?}", netns_files(&id));
}

// --- a real killed run, in a child process ----------------------------------------

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

fn spawn_child() -> (KillOnDrop, String, u32) {
    let (child, v) = common::spawn_test_child(
        "child_published_proxy_process",
        (CHILD_ENV, "1"),
        Stdio::null(),
        "RUNID=",
        Duration::from_secs(30),
    );
    let (id, pid) = v.split_once(" PID=").expect("child printed no run id");
    assert!(lab::is_run_id(id), "{v}");
    (child, id.to_string(), pid.parse().unwrap())
}

#[test]
fn sigterm_stops_the_docker_proxy() {
    let _serial = need_root();
    let (mut child, id, pid) = spawn_child();
    assert!(!exited(pid));
    // While the child lives, cleanup_leftovers from here leaves its lab and proxy alone.
    let removed = cleanup_leftovers().unwrap();
    assert!(removed.iter().all(|n| !n.contains(&id)), "{removed:?}");
    assert!(!exited(pid));
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.0.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let st = child.0.wait().unwrap();
    assert_eq!(st.code(), Some(143), "{st:?}");
    assert!(
        !Path::new(&format!("/proc/{pid}")).exists(),
        "docker-proxy {pid} survived SIGTERM"
    );
    assert!(netns_files(&id).is_empty(), "{:?}", netns_files(&id));
}

#[test]
fn sigkilled_runs_proxy_is_removed_by_cleanup_leftovers() {
    let _serial = need_root();
    let (mut child, id, pid) = spawn_child();
    child.0.kill().unwrap(); // SIGKILL: no cleanup in the child at all
    child.0.wait().unwrap();
    // The orphaned proxy keeps running in the node namespace.
    assert!(!exited(pid));
    assert_eq!(netns_files(&id).len(), 2);
    let removed = cleanup_leftovers().unwrap();
    assert!(removed.iter().any(|n| n.contains(&id)), "{removed:?}");
    // Not our child: it is gone, or a zombie of whoever adopted it.
    assert!(wait_exited(pid), "docker-proxy {pid} survived cleanup");
    assert!(netns_files(&id).is_empty(), "{:?}", netns_files(&id));
}

// --- egress, host-egress, gateway ----------------------------------------------------

/// The uplink of an egress lab: `np<id>up` (.1) in the node, `np<id>rm` (.2) in the remote
/// `np<id>-rmt` on 10.217.K.0/24; the server listens on the remote's own address, which
/// knows no route beyond its subnet. Returns (node, remote).
fn check_uplink(lab: &NetPath) -> (Netns, Netns) {
    let id = &lab.run_id;
    let node = lab.node_ns.clone().unwrap();
    let rmt = lab.server_ns.clone();
    assert_eq!(rmt.name, format!("np{id}-rmt"));
    let (up, rm) = (format!("np{id}up"), format!("np{id}rm"));
    for (ns, name, kind, mtu) in [
        (&node, up.as_str(), DevKind::Uplink, 1500),
        (&rmt, rm.as_str(), DevKind::Uplink, 1500),
        (&rmt, "lo", DevKind::Loopback, 65536),
        (&node, "lo", DevKind::Loopback, 65536),
    ] {
        let d = dev(lab, &ns.name, name);
        assert_eq!((d.kind, d.mtu), (kind, mtu), "{d:?}");
    }
    // Where a delay between the hosts goes: both ends of the uplink.
    let ends: Vec<&str> = lab.uplinks().iter().map(|d| d.name.as_str()).collect();
    assert_eq!(ends, [up.as_str(), rm.as_str()]);
    let addr = |ns: &Netns, name: &str| {
        let l = links_in(ns).unwrap();
        l.iter().find(|l| l.name == name).unwrap().addrs.clone()
    };
    let k = addr(&node, &up)[0].0.octets()[2];
    assert_eq!(addr(&node, &up), [(Ipv4Addr::new(10, 217, k, 1), 24)]);
    assert_eq!(addr(&rmt, &rm), [(Ipv4Addr::new(10, 217, k, 2), 24)]);
    let server = SocketAddrV4::new(Ipv4Addr::new(10, 217, k, 2), lab::LAB_PORT);
    assert_eq!((lab.server_bind, lab.connect_to), (server, server));
    // The remote host routes nowhere but its own subnet: replies to a container can only
    // come back through the node's NAT.
    let routes = rmt
        .run(|| netpath::sys::nl::Nl::new()?.routes_v4())
        .unwrap();
    assert!(
        routes
            .iter()
            .all(|(a, l)| a.is_loopback() || (*l >= 24 && a.octets()[..3] == [10, 217, k])),
        "{routes:?}"
    );
    (node, rmt)
}

/// netpath's nft table in the node: Docker's outbound masquerade, no published port.
fn check_masquerade_only(lab: &NetPath, node: &Netns) {
    let table = lab.nft_table.clone().unwrap();
    let json = node.run(move || lab::nft::list_table(&table)).unwrap();
    assert_eq!(json.matches("\"masquerade\"").count(), 1, "{json}");
    assert!(!json.contains("dnat"), "{json}");
}

#[test]
fn egress_driver_masquerades_out_of_the_uplink() {
    let _serial = need_root();
    let before = root_links();
    let lab = lab::build(Driver::Egress).unwrap();
    let id = lab.run_id.clone();
    assert_eq!(lab.driver.to_string(), "egress");
    assert_eq!(sorted_names(&lab), want_names(&id, &["cli", "node", "rmt"]));
    let (node, rmt) = check_uplink(&lab);
    let cli = lab.client_ns.clone();
    assert_eq!(cli.name, format!("np{id}-cli"));
    let (net, plen) = lab.subnet.unwrap();
    assert_eq!((net.octets()[..2].to_vec(), plen), (vec![10, 213], 24));
    for (ns, name, kind) in [
        (&cli, "eth0".to_string(), DevKind::Veth),
        (&node, format!("np{id}c"), DevKind::BridgePort),
        (&node, format!("np{id}br"), DevKind::Bridge),
    ] {
        assert_eq!(dev(&lab, &ns.name, &name).kind, kind);
    }
    assert_eq!(lab.devices.len(), 8, "{:?}", lab.devices);
    check_devices(&lab);
    check_masquerade_only(&lab, &node);
    assert!(lab.published.is_none() && lab.proxy_pid.is_none());

    // cli → bridge → node's routing → uplink → remote, and back: the requests crossed the
    // bridge and the uplink.
    let up = format!("np{id}up");
    let (br0, up0) = (packets(&node, &format!("np{id}c")).0, packets(&node, &up).1);
    let rm0 = packets(&rmt, &format!("np{id}rm")).0;
    rr_200(&lab);
    assert!(packets(&node, &format!("np{id}c")).0 - br0 >= 220);
    assert!(packets(&node, &up).1 - up0 >= 220);
    assert!(packets(&rmt, &format!("np{id}rm")).0 - rm0 >= 220);
    tear_down_cleanly(lab, &before);
}

#[test]
fn host_egress_driver_leaves_from_the_nodes_own_stack() {
    let _serial = need_root();
    let before = root_links();
    let lab = lab::build(Driver::HostEgress).unwrap();
    let id = lab.run_id.clone();
    assert_eq!(lab.driver.to_string(), "host-egress");
    assert_eq!(sorted_names(&lab), want_names(&id, &["node", "rmt"]));
    let (node, rmt) = check_uplink(&lab);
    assert_eq!(lab.client_ns, node);
    // No container, no bridge: lo and the uplink in each namespace.
    assert_eq!(lab.devices.len(), 4, "{:?}", lab.devices);
    check_devices(&lab);
    // The node carries Docker's NAT table like egress's node (conntrack follows this path
    // too), though no rule rewrites it.
    check_masquerade_only(&lab, &node);

    let rm = format!("np{id}rm");
    let rm0 = packets(&rmt, &rm).0;
    rr_200(&lab);
    assert!(packets(&rmt, &rm).0 - rm0 >= 220);
    tear_down_cleanly(lab, &before);
}

#[test]
fn gateway_driver_serves_on_the_bridge_address() {
    let _serial = need_root();
    let before = root_links();
    let lab = lab::build(Driver::Gateway).unwrap();
    let id = lab.run_id.clone();
    assert_eq!(lab.driver.to_string(), "gateway");
    assert_eq!(sorted_names(&lab), want_names(&id, &["cli", "node"]));
    let node = lab.node_ns.clone().unwrap();
    assert_eq!(lab.server_ns, node);
    assert_eq!(lab.client_ns.name, format!("np{id}-cli"));
    let k = lab.subnet.unwrap().0.octets()[2];
    let gw = SocketAddrV4::new(Ipv4Addr::new(10, 213, k, 1), lab::LAB_PORT);
    assert_eq!((lab.server_bind, lab.connect_to), (gw, gw));
    let br = format!("np{id}br");
    let links = links_in(&node).unwrap();
    let brl = links.iter().find(|l| l.name == br).unwrap();
    assert_eq!(brl.addrs, [(*gw.ip(), 24)]);
    assert!(lab.uplinks().is_empty());
    assert_eq!(lab.devices.len(), 5, "{:?}", lab.devices);
    check_devices(&lab);
    check_masquerade_only(&lab, &node);

    let port = format!("np{id}c");
    let rx0 = packets(&node, &port).0;
    rr_200(&lab);
    assert!(packets(&node, &port).0 - rx0 >= 220);
    tear_down_cleanly(lab, &before);
}
