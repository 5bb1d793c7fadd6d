//! Leaving the node: egress (out of a container, masqueraded over the uplink to a remote that
//! routes nowhere else), host-egress (from the node's own stack) and gateway (the server on
//! the bridge's address); Docker's masquerade-only nft table in the node.

use std::net::{Ipv4Addr, SocketAddrV4};

use netpath::driver::Driver;
use netpath::lab;
use netpath::path::NetPath;
use netpath::sys::netns::Netns;
use netpath::sys::nl::links_in;
use netpath_common::DevKind;

use super::Dir::{Rx, Tx};
use super::common::{build_checked, tear_down_cleanly};
use super::{check_devices, check_kinds, rr_200_through, subnet_k};

/// The uplink of an egress lab: `np<id>up` (.1) in the node, `np<id>rm` (.2) in the remote
/// `np<id>-rmt` on 10.217.K.0/24; the server listens on the remote's own address, which
/// knows no route beyond its subnet. Returns (node, remote).
fn check_uplink(lab: &NetPath) -> (Netns, Netns) {
    let id = &lab.run_id;
    let node = lab.node_ns.clone().unwrap();
    let rmt = lab.server_ns.clone();
    assert_eq!(rmt.name, format!("np{id}-rmt"));
    let (up, rm) = (format!("np{id}up"), format!("np{id}rm"));
    check_kinds(
        lab,
        &[
            (&node, &up, DevKind::Uplink, 1500),
            (&rmt, &rm, DevKind::Uplink, 1500),
        ],
    );
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
    let (_serial, before, lab) = build_checked(Driver::Egress, "egress", &["cli", "node", "rmt"]);
    let id = lab.run_id.clone();
    let (node, rmt) = check_uplink(&lab);
    let cli = lab.client_ns.clone();
    assert_eq!(cli.name, format!("np{id}-cli"));
    subnet_k(&lab, [10, 213]);
    let (port, br) = (format!("np{id}c"), format!("np{id}br"));
    check_kinds(
        &lab,
        &[
            (&cli, "eth0", DevKind::Veth, 1500),
            (&node, &port, DevKind::BridgePort, 1500),
            (&node, &br, DevKind::Bridge, 1500),
        ],
    );
    assert_eq!(lab.devices.len(), 8, "{:?}", lab.devices);
    check_devices(&lab);
    check_masquerade_only(&lab, &node);
    assert!(lab.published.is_none() && lab.proxy_pid.is_none());

    // cli → bridge → node's routing → uplink → remote, and back: the requests crossed the
    // bridge and the uplink.
    let (up, rm) = (format!("np{id}up"), format!("np{id}rm"));
    rr_200_through(
        &lab,
        &[(&node, &port, Rx), (&node, &up, Tx), (&rmt, &rm, Rx)],
    );
    tear_down_cleanly(lab, &before);
}

#[test]
fn host_egress_driver_leaves_from_the_nodes_own_stack() {
    let (_serial, before, lab) = build_checked(Driver::HostEgress, "host-egress", &["node", "rmt"]);
    let id = lab.run_id.clone();
    let (node, rmt) = check_uplink(&lab);
    assert_eq!(lab.client_ns, node);
    // No container, no bridge: lo and the uplink in each namespace.
    assert_eq!(lab.devices.len(), 4, "{:?}", lab.devices);
    check_devices(&lab);
    // The node carries Docker's NAT table like egress's node (conntrack follows this path
    // too), though no rule rewrites it.
    check_masquerade_only(&lab, &node);

    rr_200_through(&lab, &[(&rmt, &format!("np{id}rm"), Rx)]);
    tear_down_cleanly(lab, &before);
}

#[test]
fn gateway_driver_serves_on_the_bridge_address() {
    let (_serial, before, lab) = build_checked(Driver::Gateway, "gateway", &["cli", "node"]);
    let id = lab.run_id.clone();
    let node = lab.node_ns.clone().unwrap();
    assert_eq!(lab.server_ns, node);
    assert_eq!(lab.client_ns.name, format!("np{id}-cli"));
    let k = subnet_k(&lab, [10, 213]);
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

    rr_200_through(&lab, &[(&node, &format!("np{id}c"), Rx)]);
    tear_down_cleanly(lab, &before);
}
