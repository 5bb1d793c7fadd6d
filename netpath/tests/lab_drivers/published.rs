//! The published drivers: published-proxy runs the real docker-proxy in the node (127.0.0.1
//! only, no namespace fds, seen by the /proc scan), published-nat DNATs the gateway address
//! with no proxy and route_localnet off; both reach the server through the bridge.

use std::collections::HashSet;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::path::Path;
use std::sync::MutexGuard;

use netpath::driver::Driver;
use netpath::lab;
use netpath::path::NetPath;
use netpath::sys::netns::{Netns, ns_inum, read_sysctl};
use netpath::sys::proxy::{DOCKER_PROXY, proxy_processes};
use netpath_common::DevKind;

use super::Dir::Rx;
use super::common::{build_checked, rr_200, tear_down_cleanly};
use super::{check_devices, check_kinds, exited, rr_200_through, subnet_k};

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

/// The lab of a published driver (`name` in the CLI) and the checks both share: node =
/// client, srv = server, the bridge devices without a client container.
/// Returns (lock, root links, lab, node).
fn build_published(
    driver: Driver,
    name: &str,
) -> (MutexGuard<'static, ()>, HashSet<String>, NetPath, Netns) {
    let (serial, before, lab) = build_checked(driver, name, &["node", "srv"]);
    let id = &lab.run_id;
    let node = lab.node_ns.clone().unwrap();
    assert_eq!(lab.client_ns, node);
    assert_eq!(lab.server_ns.name, format!("np{id}-srv"));
    let k = subnet_k(&lab, [10, 213]);
    assert_eq!(
        lab.server_bind,
        SocketAddrV4::new(Ipv4Addr::new(10, 213, k, 3), lab::LAB_PORT)
    );
    assert_eq!(lab.published, Some(lab.connect_to));
    let (br, port) = (format!("np{id}br"), format!("np{id}s"));
    check_kinds(
        &lab,
        &[
            (&node, &br, DevKind::Bridge, 1500),
            (&node, &port, DevKind::BridgePort, 1500),
            (&lab.server_ns, "eth0", DevKind::Veth, 1500),
        ],
    );
    assert_eq!(lab.devices.len(), 5, "{:?}", lab.devices);
    check_devices(&lab);
    let table = lab.nft_table.clone().unwrap();
    let json = node.run(move || lab::nft::list_table(&table)).unwrap();
    assert!(json.contains("dnat"), "{json}");
    (serial, before, lab, node)
}

#[test]
fn published_proxy_driver_runs_docker_proxy_in_the_node() {
    let (_serial, before, lab, node) = build_published(Driver::PublishedProxy, "published-proxy");
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
    rr_200_through(&lab, &[(&lab.server_ns, "eth0", Rx)]);
    tear_down_cleanly(lab, &before);
    assert!(
        exited(pid) && !Path::new(&format!("/proc/{pid}")).exists(),
        "docker-proxy {pid} survived teardown"
    );
}

#[test]
fn published_nat_driver_dnats_the_gateway_address() {
    let (_serial, before, lab, node) = build_published(Driver::PublishedNat, "published-nat");
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
