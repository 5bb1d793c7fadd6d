//! The drivers without a published port or an uplink: none (lo alone), overlay (two nodes'
//! bridges joined by VXLAN over an underlay, MTU 1450) and macvlan (bridge-mode children of a
//! veth parent): namespaces, devices, links, 200 requests where they should go, clean teardown.

use std::net::{Ipv4Addr, SocketAddrV4};

use netpath::driver::Driver;
use netpath::lab;
use netpath::path::NetPath;
use netpath::sys::netns::Netns;
use netpath::sys::nl::links_in;
use netpath_common::DevKind;

use super::Dir::{Rx, Tx};
use super::common::{build_checked, rr_200, tear_down_cleanly};
use super::{check_devices, check_kinds, dev, rr_200_counting, rr_200_through, subnet_k};

fn ns_of(lab: &NetPath, name: &str) -> Netns {
    lab.namespaces()
        .into_iter()
        .find(|n| n.name == name)
        .unwrap_or_else(|| panic!("no netns {name} in {:?}", lab.netns_names()))
}

#[test]
fn none_driver_builds_runs_and_tears_down() {
    let (_serial, before, lab) = build_checked(Driver::None, "none", &["ctr"]);
    assert_eq!(lab.driver, Driver::None);
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
    let roles = ["cli", "node1", "node2", "srv"];
    let (_serial, before, lab) = build_checked(Driver::Overlay, "overlay", &roles);
    let id = lab.run_id.clone();
    let (n1, n2) = (
        ns_of(&lab, &format!("np{id}-node1")),
        ns_of(&lab, &format!("np{id}-node2")),
    );
    let (cli, srv) = (lab.client_ns.clone(), lab.server_ns.clone());
    assert_eq!(cli.name, format!("np{id}-cli"));
    assert_eq!(srv.name, format!("np{id}-srv"));
    assert_eq!(lab.node_ns.as_ref(), Some(&n1));

    // Addresses: overlay 10.215.K.0/24 (cli .2, srv .3), underlay 10.214.K.0/24.
    let k = subnet_k(&lab, [10, 215]);
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
    check_kinds(
        &lab,
        &[
            (&cli, "eth0", DevKind::Veth, 1450),
            (&n1, &cp, DevKind::BridgePort, 1450),
            (&n1, &b1, DevKind::Bridge, 1450),
            (&n1, &v1, DevKind::Vxlan, 1450),
            (&n1, &u1, DevKind::Underlay, 1500),
            (&n2, &u2, DevKind::Underlay, 1500),
            (&n2, &v2, DevKind::Vxlan, 1450),
            (&n2, &b2, DevKind::Bridge, 1450),
            (&n2, &sp, DevKind::BridgePort, 1450),
            (&srv, "eth0", DevKind::Veth, 1450),
        ],
    );
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
    rr_200_through(&lab, &[(&n1, &v1, Tx), (&n2, &u2, Rx)]);
    tear_down_cleanly(lab, &before);
}

#[test]
fn macvlan_driver_builds_runs_and_tears_down() {
    let roles = ["cli", "mvp", "node", "srv"];
    let (_serial, before, lab) = build_checked(Driver::Macvlan, "macvlan", &roles);
    let id = lab.run_id.clone();
    let node = lab.node_ns.clone().unwrap();
    let mvp = ns_of(&lab, &format!("np{id}-mvp"));
    let (cli, srv) = (lab.client_ns.clone(), lab.server_ns.clone());
    let k = subnet_k(&lab, [10, 216]);
    assert_eq!(*lab.server_bind.ip(), Ipv4Addr::new(10, 216, k, 3));
    assert_eq!(lab.connect_to, lab.server_bind);

    let (parent, peer) = (format!("np{id}mp"), format!("np{id}pp"));
    check_kinds(
        &lab,
        &[
            (&cli, "eth0", DevKind::Macvlan, 1500),
            (&srv, "eth0", DevKind::Macvlan, 1500),
            (&node, &parent, DevKind::MacvlanParent, 1500),
            (&mvp, &peer, DevKind::MacvlanParent, 1500),
        ],
    );
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
    let counted = rr_200_counting(&lab, &[(&cli, "eth0", Tx), (&mvp, &peer, Rx)]);
    let (sent, via_parent) = (counted[0], counted[1]);
    assert!(sent >= 220, "{sent} packets sent");
    assert!(
        via_parent < 10,
        "{via_parent} packets went out of the parent"
    );
    tear_down_cleanly(lab, &before);
}
