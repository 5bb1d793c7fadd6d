//! `Interface::driver`: how a container's own link and its host peer name its driver;
//! `ContainerNet::driver`: which of its interfaces says it.
use super::*;
use crate::driver::Driver;

fn link(name: &str, kind: &str) -> Link {
    Link::up(name, kind)
}

fn iface(kind: &str, bridge: bool, vxlan: bool) -> Interface {
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
    Interface {
        link: link("eth0", kind),
        network: None,
        peer,
    }
}

fn on(kind: &str, bridge: bool, vxlan: bool) -> Option<Driver> {
    iface(kind, bridge, vxlan).driver()
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

#[test]
fn a_container_says_its_driver_by_its_interface_on_the_network_or_its_first_but_lo() {
    let lo = Interface {
        link: link("lo", "loopback"),
        network: None,
        peer: None,
    };
    let mut mv = iface("macvlan", false, false);
    mv.network = Some("lan".into());
    let mut br = iface("veth", true, false);
    br.network = Some("web".into());
    let c = ContainerNet::with_interfaces(vec![lo.clone(), mv, br]);
    assert_eq!(c.driver(None), Some(Driver::Macvlan));
    assert_eq!(c.driver(Some("lan")), Some(Driver::Macvlan));
    assert_eq!(c.driver(Some("web")), Some(Driver::Bridge));
    assert_eq!(c.driver(Some("other")), None);
    assert_eq!(ContainerNet::with_interfaces(vec![lo]).driver(None), None);
}
