//! The one place device kinds are assigned: the kernel's link kind plus the link's role.

use netpath_common::DevKind;

use crate::sys::nl::Link;

/// What a link is on a path beyond what the kernel says about the link alone.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// Nothing more: its kind, and whether it is enslaved, decide.
    Link,
    /// The link carrying an overlay's VXLAN packets between the nodes.
    Underlay,
    /// Either end of a node's link to another host (egress paths): the kind names the hop
    /// crossing it, and says where a delay between hosts would go.
    Uplink,
    /// The lower device of macvlan children (in the lab, both ends of that veth pair): the
    /// children point at it from other namespaces, which no listing of its own shows.
    MacvlanParent,
}

/// The kind of `link` on a path, or `None` for a kind netpath follows no packet through (a
/// tunnel or dummy device beside the path). A veth enslaved to a bridge is a bridge port.
pub fn kind_of(link: &Link, role: Role) -> Option<DevKind> {
    if link.loopback {
        return Some(DevKind::Loopback);
    }
    Some(match (role, link.kind.as_str()) {
        (Role::Underlay, _) => DevKind::Underlay,
        (Role::Uplink, _) => DevKind::Uplink,
        (Role::MacvlanParent, _) => DevKind::MacvlanParent,
        (Role::Link, "bridge") => DevKind::Bridge,
        (Role::Link, "vxlan") => DevKind::Vxlan,
        (Role::Link, "macvlan") => DevKind::Macvlan,
        (Role::Link, "ipvlan") => DevKind::Ipvlan,
        (Role::Link, "netkit") => DevKind::Netkit,
        (Role::Link, "veth") if link.master.is_some() => DevKind::BridgePort,
        (Role::Link, "veth") => DevKind::Veth,
        (Role::Link, _) => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn link(kind: &str, master: Option<u32>, loopback: bool) -> Link {
        Link {
            master,
            loopback,
            ..Link::up("x", kind)
        }
    }

    #[test]
    fn kinds_from_link_kind_and_role() {
        let k = |kind, master, role| kind_of(&link(kind, master, false), role);
        assert_eq!(
            kind_of(&link("", None, true), Role::Link),
            Some(DevKind::Loopback)
        );
        assert_eq!(k("veth", None, Role::Link), Some(DevKind::Veth));
        assert_eq!(k("veth", Some(3), Role::Link), Some(DevKind::BridgePort));
        assert_eq!(k("bridge", None, Role::Link), Some(DevKind::Bridge));
        assert_eq!(k("vxlan", Some(3), Role::Link), Some(DevKind::Vxlan));
        assert_eq!(k("macvlan", None, Role::Link), Some(DevKind::Macvlan));
        assert_eq!(k("ipvlan", None, Role::Link), Some(DevKind::Ipvlan));
        assert_eq!(k("netkit", None, Role::Link), Some(DevKind::Netkit));
        assert_eq!(k("veth", None, Role::Underlay), Some(DevKind::Underlay));
        assert_eq!(k("veth", None, Role::Uplink), Some(DevKind::Uplink));
        assert_eq!(
            k("veth", None, Role::MacvlanParent),
            Some(DevKind::MacvlanParent)
        );
        assert_eq!(k("ipip", None, Role::Link), None);
        assert_eq!(k("", None, Role::Link), None);
    }
}
