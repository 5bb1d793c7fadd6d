//! The host, none, overlay (a single-node swarm, MTU 1450) and macvlan Docker labs: each
//! built, 200 requests run, torn down with nothing left; host and none also through
//! `compare --between`.

use std::net::Ipv4Addr;

use netpath::driver::Driver;
use netpath_common::DevKind;

use super::common;
use super::{compare_between, has, opts, rr_on, server_name, setup};

#[test]
fn host_lab_runs_rr() {
    let (_g, engine) = setup();
    rr_on(&engine, Driver::Host, &opts(), |dl, id| {
        assert_eq!(dl.path.client_ns.inum, dl.path.server_ns.inum);
        assert_eq!(dl.path.server_bind.ip(), &Ipv4Addr::LOCALHOST);
        assert_eq!(dl.path.devices.len(), 1);
        assert_eq!(dl.path.devices[0].kind, DevKind::Loopback);
        // Two --network host containers: --between measures over the host's loopback.
        let (cli, srv) = (format!("np{id}-cli"), format!("np{id}-srv"));
        let r = compare_between(&cli, &srv, 200).unwrap();
        assert_eq!(r["driver"], format!("{cli}→{srv} (host via host)"), "{r}");
        let hops = common::json_hops(&r, "hops");
        assert!(
            hops.contains(&"loopback") && !hops.contains(&"veth"),
            "{hops:?}"
        );
    });
}

#[test]
fn none_lab_runs_rr() {
    let (_g, engine) = setup();
    rr_on(&engine, Driver::None, &opts(), |dl, id| {
        assert_eq!(dl.path.client_ns.inum, dl.path.server_ns.inum);
        // A --network none container shares no network with anyone: one clear line.
        let srv = format!("np{id}-srv");
        let err = compare_between(&srv, &srv, 10).unwrap_err();
        assert!(
            err.contains("share no Docker network") && err.trim().lines().count() == 1,
            "{err}"
        );
    });
}

#[test]
fn overlay_lab_runs_rr_and_inspect_reports_mtu_1450() {
    let (_g, engine) = setup();
    let (state_before, _) = engine.swarm_state().unwrap();
    rr_on(&engine, Driver::Overlay, &opts(), |dl, _| {
        assert!(
            has(&dl.path.devices, DevKind::Vxlan, "vxlan"),
            "{:?}",
            dl.path.devices
        );
        assert!(has(&dl.path.devices, DevKind::Bridge, "br0"));
        let rep = netpath::runtime::inspect_docker(&engine, &server_name(dl)).unwrap();
        eprintln!("{}", rep.render());
        assert_eq!(rep.mtu, Some(1450));
        let eth0 = rep.interfaces.iter().find(|i| i.name == "eth0").unwrap();
        assert_eq!(eth0.bridge.as_deref(), Some("br0"));
        assert!(!eth0.vxlans.is_empty());
        assert!(eth0.peer.as_deref().unwrap().starts_with("1-"), "{eth0:?}");
    });
    // A swarm netpath initialised is gone again; one that was there stays.
    let (state_after, _) = engine.swarm_state().unwrap();
    assert_eq!(state_before, state_after);
}

#[test]
fn macvlan_lab_runs_rr() {
    let (_g, engine) = setup();
    rr_on(&engine, Driver::Macvlan, &opts(), |dl, id| {
        assert_eq!(
            dl.path
                .devices
                .iter()
                .filter(|d| d.kind == DevKind::Macvlan)
                .count(),
            2,
            "{:?}",
            dl.path.devices
        );
        assert!(has(
            &dl.path.devices,
            DevKind::MacvlanParent,
            &format!("np{id}mp")
        ));
    });
}
