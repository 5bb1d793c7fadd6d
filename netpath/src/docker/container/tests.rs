//! `Interface::driver`: how a container's own link and its host peer name its driver.
use super::*;
use crate::driver::Driver;

fn link(name: &str, kind: &str) -> Link {
    Link {
        ifindex: 1,
        name: name.into(),
        kind: kind.into(),
        mtu: 1500,
        master: None,
        iflink: None,
        link_netnsid: None,
        up: true,
        loopback: false,
        addrs: Vec::new(),
    }
}

fn on(kind: &str, bridge: bool, vxlan: bool) -> Option<Driver> {
    let peer = bridge.then(|| PeerLink {
        netns: "host".into(),
        netns_path: PathBuf::new(),
        netns_inum: 1,
        link: link("veth0", "veth"),
        bridge: Some(link("docker0", "bridge")),
        vxlans: if vxlan {
            vec![link("vx0", "vxlan")]
        } else {
            Vec::new()
        },
    });
    let link = link("eth0", kind);
    (Interface {
        link,
        network: None,
        peer,
    })
    .driver()
}

#[test]
fn an_interface_says_its_driver_by_its_kind_or_its_host_peer() {
    assert_eq!(on("macvlan", false, false), Some(Driver::Macvlan));
    assert_eq!(on("ipvlan", false, false), Some(Driver::Ipvlan));
    assert_eq!(on("veth", true, false), Some(Driver::Bridge));
    assert_eq!(on("veth", true, true), Some(Driver::Overlay));
    assert_eq!(on("veth", false, false), None);
    assert_eq!(on("netkit", false, false), None);
}
