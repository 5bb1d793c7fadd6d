//! The Docker network drivers netpath measures: one enum, and the one table of them.
//!
//! Each driver is built twice, by a file of the same name in `lab/` (namespaces netpath makes
//! itself) and in `docker/drivers/` (a real Docker engine). `driver_table!` lists every
//! driver once; the enum below and both builders' dispatch (with their `mod` lines) are
//! generated from it, so adding a driver is one line here plus its two files.

/// Calls the macro `$then` with the driver table, one `Variant module "cli-name" "help";`
/// per driver. `module` is the file in `lab/` and in `docker/drivers/`.
macro_rules! driver_table {
    ($then:ident) => {
        $then! {
            Host host "host"
                "`--network host`: client and server share one stack, over loopback.";
            Bridge bridge "bridge"
                "The default bridge: veth pairs into a Linux bridge.";
            None none "none"
                "`--network none`: one isolated namespace, client and server over its loopback.";
            Overlay overlay "overlay"
                "A swarm overlay: two nodes, a bridge and a VXLAN device in each, joined by an underlay link.";
            Macvlan macvlan "macvlan"
                "macvlan in bridge mode: two children of one parent link talk directly.";
            PublishedProxy published_proxy "published-proxy"
                "`-p 127.0.0.1:P:…` with the userland proxy: the client on the node connects to docker-proxy, which connects to the container over the bridge.";
            PublishedNat published_nat "published-nat"
                "`-p` with `--userland-proxy=false`: the client on the node reaches the container through netpath's OUTPUT-chain DNAT.";
            Egress egress "egress"
                "A bridge container to another host: out through the bridge, routed and MASQUERADEd by the node, over its uplink.";
            HostEgress host_egress "host-egress"
                "`--network host` to another host: the node's own stack over the same uplink as egress.";
            Gateway gateway "gateway"
                "A bridge container to its bridge's own address on the node: one veth crossing and local delivery.";
            Ipvlan ipvlan "ipvlan"
                "ipvlan in L2 mode: two children of one parent link, the frame handed from one child to the other (lab only; CONFIG_IPVLAN).";
            Netkit netkit "netkit"
                "A netkit pair in L3 mode, the device Cilium uses in place of veth, between the two namespaces (lab only; kernel 6.7+, CONFIG_NETKIT).";
        }
    };
}
pub(crate) use driver_table;

macro_rules! driver_enum {
    ($($variant:ident $module:ident $name:literal $help:literal;)*) => {
        crate::choice::choice! {
            /// Which Docker data path to build.
            pub enum Driver {
                $(#[doc = $help] $variant => $name,)*
            }
        }
    };
}
driver_table!(driver_enum);

/// What the rest of netpath needs to know of a driver's path, one row per driver in
/// `Driver::facts` (a full match: a new driver is a row the compiler asks for). A refusal is
/// the line that says why (`None`: it applies); the harness, tune and record read them here.
#[derive(Clone, Copy, Debug)]
pub struct Facts {
    /// Client and server stand for two nodes joined by a wire (the overlay's underlay, the
    /// egress drivers' uplink to `remote`) that `compare --underlay-delay` can slow down.
    pub crosses_nodes: bool,
    /// Client and server talk over loopback alone: no link of the lab's to tune.
    pub loopback_only: bool,
    /// The client runs in the Docker host's own namespace (`--network host`).
    pub client_on_host: bool,
    /// The path's packets pass a conntrack of netpath's that only tracks them (no NAT of
    /// theirs depends on it): `tune --knob conntrack` applies.
    pub conntrack_knob: bool,
    /// A published port (through docker-proxy or netpath's DNAT): `tune --knob proxy`
    /// compares the two.
    pub published: bool,
    /// A userland relay (docker-proxy) copies every byte: it needs a CPU of its own beside
    /// the two sides, so on a small machine the driver is measured blocking.
    pub relay: bool,
    /// The drivers this one is measured against, the first of them measured (none: it is
    /// the reference of others).
    pub references: &'static [Driver],
    /// Why netpath cannot measure `--proto udp` on this path (TCP every path carries).
    pub udp_refused: Option<&'static str>,
    /// Why netpath cannot measure `--proto icmp` on this path.
    pub icmp_refused: Option<&'static str>,
    /// Why `tune --knob gro|tso|gso` (veth features) does not apply.
    pub offloads_refused: Option<&'static str>,
    /// Why `tune --knob mtu` does not apply.
    pub mtu_refused: Option<&'static str>,
    /// The rtnetlink kind of a container's own link that alone says a container is on this
    /// driver's path (a child of a parent link); the bridged drivers are told by the host peer
    /// instead (`docker::container::Interface::driver`).
    pub link_kind: Option<&'static str>,
}

impl Driver {
    /// This driver's row of facts.
    pub const fn facts(self) -> Facts {
        const NONE: Facts = Facts {
            crosses_nodes: false,
            loopback_only: false,
            client_on_host: false,
            conntrack_knob: false,
            published: false,
            relay: false,
            references: &[Driver::Bridge],
            udp_refused: None,
            icmp_refused: None,
            offloads_refused: None,
            mtu_refused: None,
            link_kind: None,
        };
        match self {
            Driver::Host => Facts {
                loopback_only: true,
                client_on_host: true,
                references: &[],
                ..NONE
            },
            Driver::Bridge => Facts {
                references: &[Driver::Host],
                ..NONE
            },
            Driver::None => Facts {
                loopback_only: true,
                ..NONE
            },
            Driver::Overlay => Facts {
                crosses_nodes: true,
                mtu_refused: Some(
                    "the overlay's MTU follows its underlay minus VXLAN's 50 bytes; tune mtu on bridge, macvlan, gateway or egress",
                ),
                ..NONE
            },
            Driver::Egress => Facts {
                crosses_nodes: true,
                ..NONE
            },
            Driver::HostEgress => Facts {
                crosses_nodes: true,
                client_on_host: true,
                conntrack_knob: true,
                ..NONE
            },
            Driver::Gateway => Facts {
                conntrack_knob: true,
                ..NONE
            },
            // The same published port without the relay first.
            Driver::PublishedProxy => Facts {
                published: true,
                relay: true,
                references: &[Driver::PublishedNat, Driver::Bridge],
                udp_refused: Some(
                    "docker-proxy relays UDP on sockets of its own with read/write, and netpath \
                     continues a journey across the relay only for TCP; use -d published-nat (the same \
                     published port without the proxy)",
                ),
                icmp_refused: Some(
                    "docker-proxy relays TCP and UDP ports, an echo request to the published address \
                     is answered by the node itself; use -d gateway (an echo to the node's own address) or -d bridge",
                ),
                ..NONE
            },
            Driver::PublishedNat => Facts {
                published: true,
                icmp_refused: Some(
                    "a published port maps TCP and UDP ports, an echo request to the published address \
                     is answered by the node itself; use -d bridge (the same container path)",
                ),
                ..NONE
            },
            // No link kind: a netkit container is Cilium's, in a mode netpath does not know.
            Driver::Netkit => Facts {
                offloads_refused: Some("netkit has no veth"),
                ..NONE
            },
            Driver::Macvlan => Facts {
                link_kind: Some("macvlan"),
                ..NONE
            },
            Driver::Ipvlan => Facts {
                link_kind: Some("ipvlan"),
                ..NONE
            },
        }
    }
}

/// A driver netpath builds in its own lab only: its Docker builder refuses with this before
/// anything is made, and `compare --docker` skips its row with this line.
#[derive(Debug)]
pub struct LabOnly {
    pub driver: &'static str,
    pub why: &'static str,
}

impl std::fmt::Display for LabOnly {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} is a lab driver: {}", self.driver, self.why)
    }
}

impl std::error::Error for LabOnly {}

/// A driver whose path cannot carry a protocol the way netpath measures it: said before
/// anything is built; `compare` skips that row with this line when other drivers were asked.
#[derive(Debug)]
pub struct ProtoUnsupported {
    pub driver: &'static str,
    /// `Proto::name` (the driver table sits below the harness, which owns `Proto`).
    pub proto: &'static str,
    pub why: String,
}

impl std::fmt::Display for ProtoUnsupported {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "--proto {} cannot be measured on {}: {}",
            self.proto, self.driver, self.why
        )
    }
}

impl std::error::Error for ProtoUnsupported {}

/// Why `driver` cannot be built here, if that is what `e` says: a kernel without its device
/// kind, or a lab-only driver asked of Docker. `compare` skips such a row with this line
/// instead of failing the whole run.
pub fn unavailable(e: &anyhow::Error) -> Option<String> {
    if let Some(k) = e.downcast_ref::<crate::sys::nl::UnknownLinkKind>() {
        return Some(k.to_string());
    }
    if let Some(p) = e.downcast_ref::<ProtoUnsupported>() {
        return Some(p.to_string());
    }
    e.downcast_ref::<LabOnly>().map(ToString::to_string)
}

#[cfg(test)]
mod tests {
    use clap::ValueEnum;

    use super::*;

    #[test]
    fn the_facts_table_says_what_the_paths_are() {
        let with = |f: fn(Facts) -> bool| -> Vec<&str> {
            (Driver::ALL.iter())
                .filter(|d| f(d.facts()))
                .map(|d| d.name())
                .collect()
        };
        assert_eq!(
            with(|f| f.crosses_nodes),
            ["overlay", "egress", "host-egress"]
        );
        assert_eq!(with(|f| f.loopback_only), ["host", "none"]);
        assert_eq!(with(|f| f.client_on_host), ["host", "host-egress"]);
        assert_eq!(with(|f| f.conntrack_knob), ["host-egress", "gateway"]);
        assert_eq!(with(|f| f.published), ["published-proxy", "published-nat"]);
        assert_eq!(with(|f| f.relay), ["published-proxy"]);
        assert_eq!(with(|f| f.references.is_empty()), ["host"]);
        assert_eq!(with(|f| f.udp_refused.is_some()), ["published-proxy"]);
        assert_eq!(
            with(|f| f.icmp_refused.is_some()),
            ["published-proxy", "published-nat"]
        );
        assert_eq!(with(|f| f.offloads_refused.is_some()), ["netkit"]);
        assert_eq!(with(|f| f.mtu_refused.is_some()), ["overlay"]);
        assert_eq!(with(|f| f.link_kind.is_some()), ["macvlan", "ipvlan"]);
    }

    #[test]
    fn names_are_the_cli_names() {
        assert_eq!(Driver::ALL.len(), 12);
        for d in &Driver::ALL {
            let v = d.to_possible_value().unwrap();
            assert_eq!(v.get_name(), d.name());
            assert_eq!(
                serde_json::to_value(d).unwrap(),
                serde_json::Value::String(d.name().into())
            );
        }
    }
}
