//! rtnetlink, the one reader and writer of links for the lab and for Docker alike.
//!
//! An [`Nl`] opens its netlink socket in the network namespace of the thread that
//! creates it; create it on a thread that has entered the target namespace (see
//! [`Netns::run`]) and drop it before that thread leaves. [`links_in`] does both.

use std::net::{IpAddr, Ipv4Addr};
use std::os::fd::{AsRawFd, BorrowedFd};

use anyhow::{Context, Result, anyhow};
use futures::TryStreamExt;
use rtnetlink::packet_route::AddressFamily;
use rtnetlink::packet_route::address::AddressAttribute;
use rtnetlink::packet_route::link::{
    InfoData, InfoKind, InfoMacVlan, InfoNetkit, InfoVeth, InfoVxlan, IpVlanMode, LinkAttribute,
    LinkFlags, LinkInfo, LinkMessage, MacVlanMode, NetkitMode,
};
use rtnetlink::packet_route::route::{RouteAddress, RouteAttribute, RouteMessage};
use rtnetlink::{
    Handle, LinkBridge, LinkIpVlan, LinkMacVlan, LinkMessageBuilder, LinkNetkit, LinkUnspec,
    LinkVeth, LinkVxlan, RouteMessageBuilder,
};

use crate::sys::netns::Netns;

mod tc;

/// One link as netlink reports it.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, schemars::JsonSchema)]
pub struct Link {
    pub ifindex: u32,
    pub name: String,
    /// rtnetlink kind (`veth`, `bridge`, `vxlan`, `macvlan`, ...); empty for `lo` and
    /// physical devices.
    pub kind: String,
    pub mtu: u32,
    /// ifindex of the bridge (or other controller) this link is enslaved to.
    pub master: Option<u32>,
    /// `IFLA_LINK` (the `@ifN` of `ip link`): for a veth the peer's ifindex, for a
    /// macvlan its parent's, for a vxlan its underlay's; in the namespace named by
    /// `link_netnsid` if that is set, else in this one.
    pub iflink: Option<u32>,
    /// `IFLA_LINK_NETNSID`: the peer/parent lives in another namespace.
    pub link_netnsid: Option<i32>,
    /// Administratively up (IFF_UP).
    pub up: bool,
    /// A loopback device (IFF_LOOPBACK).
    pub loopback: bool,
    /// IPv4 addresses with prefix length.
    pub addrs: Vec<(Ipv4Addr, u8)>,
}

#[cfg(test)]
impl Link {
    /// An up link named `name` of `kind`, ifindex 1, no addresses: what tests build paths of.
    pub fn up(name: &str, kind: &str) -> Link {
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
}

/// The VXLAN attributes netpath sets, as netlink reports them.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct VxlanInfo {
    pub vni: u32,
    /// UDP destination port.
    pub port: u16,
    pub local: Option<Ipv4Addr>,
    /// Unicast remote (IFLA_VXLAN_GROUP holding a unicast address).
    pub remote: Option<Ipv4Addr>,
    /// ifindex of the underlay link (`dev`).
    pub link: Option<u32>,
    pub learning: bool,
}

/// What netpath asks for when it creates a VXLAN device.
#[derive(Clone, Debug)]
pub struct VxlanSpec<'a> {
    pub name: &'a str,
    pub vni: u32,
    pub port: u16,
    /// Underlay link ifindex.
    pub dev: u32,
    pub local: Ipv4Addr,
    pub remote: Ipv4Addr,
    pub mtu: u32,
}

/// A netlink connection in the calling thread's network namespace.
pub struct Nl {
    // Field order matters: the handle must go before the runtime.
    handle: Handle,
    rt: tokio::runtime::Runtime,
}

const ENODEV: i32 = 19;
const ENOENT: i32 = 2;
const EOPNOTSUPP: i32 = 95;

/// The kernel has no qdisc of this kind (neither built in nor loadable as a module).
#[derive(Debug)]
pub struct UnknownQdisc(pub String);

impl std::fmt::Display for UnknownQdisc {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "this kernel has no {} qdisc", self.0)
    }
}

impl std::error::Error for UnknownQdisc {}

/// The kernel cannot create links of this kind: rtnetlink answers EOPNOTSUPP for a kind that
/// is neither built in nor loadable as a module.
#[derive(Debug)]
pub struct UnknownLinkKind {
    pub kind: &'static str,
    /// The kernel option that provides it, e.g. `CONFIG_IPVLAN`.
    pub config: &'static str,
}

impl std::fmt::Display for UnknownLinkKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
        write!(
            f,
            "this kernel ({}) cannot create {} devices: {} is unset or its module is missing",
            release.trim(),
            self.kind,
            self.config
        )
    }
}

impl std::error::Error for UnknownLinkKind {}

/// `Err(UnknownLinkKind)` for EOPNOTSUPP, else the error with `what` as context.
fn link_added(
    res: std::result::Result<(), rtnetlink::Error>,
    kind: &'static str,
    config: &'static str,
    what: impl FnOnce() -> String,
) -> Result<()> {
    match res {
        Ok(()) => Ok(()),
        Err(e) if nl_errno(&e) == Some(EOPNOTSUPP) => Err(UnknownLinkKind { kind, config }.into()),
        Err(e) => Err(anyhow!(e)).with_context(what),
    }
}

fn nl_errno(e: &rtnetlink::Error) -> Option<i32> {
    match e {
        rtnetlink::Error::NetlinkError(m) => Some(-m.raw_code()),
        _ => None,
    }
}

impl Nl {
    pub fn new() -> Result<Nl> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_io()
            .build()
            .context("cannot start netlink runtime")?;
        let handle = {
            let _g = rt.enter();
            let (conn, handle, _) =
                rtnetlink::new_connection().context("cannot open rtnetlink socket")?;
            rt.spawn(conn);
            handle
        };
        Ok(Nl { handle, rt })
    }

    fn block<F: std::future::Future>(&self, f: F) -> F::Output {
        self.rt.block_on(f)
    }

    /// All links of this namespace, with their IPv4 addresses.
    pub fn links(&self) -> Result<Vec<Link>> {
        let msgs: Vec<LinkMessage> = self
            .block(self.handle.link().get().execute().try_collect())
            .context("netlink: listing links")?;
        let mut links: Vec<Link> = msgs.iter().map(link_of).collect();
        self.add_addrs(&mut links)?;
        Ok(links)
    }

    /// One link by name (with its IPv4 addresses), `None` if it does not exist.
    pub fn link(&self, name: &str) -> Result<Option<Link>> {
        let Some(m) = self.link_message(name)? else {
            return Ok(None);
        };
        let mut l = [link_of(&m)];
        self.add_addrs(&mut l)?;
        let [l] = l;
        Ok(Some(l))
    }

    fn add_addrs(&self, links: &mut [Link]) -> Result<()> {
        let addrs: Vec<_> = self
            .block(self.handle.address().get().execute().try_collect())
            .context("netlink: listing addresses")?;
        for a in addrs {
            for attr in &a.attributes {
                if let AddressAttribute::Address(IpAddr::V4(ip)) = attr
                    && let Some(l) = links.iter_mut().find(|l| l.ifindex == a.header.index)
                {
                    l.addrs.push((*ip, a.header.prefix_len));
                }
            }
        }
        Ok(())
    }

    pub fn require_link(&self, name: &str) -> Result<Link> {
        self.link(name)?
            .ok_or_else(|| anyhow!("link {name} not found after creating it"))
    }

    pub fn set_up(&self, ifindex: u32) -> Result<()> {
        self.block(
            self.handle
                .link()
                .set(LinkUnspec::new_with_index(ifindex).up().build())
                .execute(),
        )
        .with_context(|| format!("netlink: setting link {ifindex} up"))
    }

    /// `ip addr add ADDR/PREFIX dev NAME && ip link set NAME up`.
    pub fn address_up(&self, name: &str, addr: Ipv4Addr, prefix: u8) -> Result<()> {
        let l = self.require_link(name)?;
        self.add_addr(l.ifindex, addr, prefix)?;
        self.set_up(l.ifindex)
    }

    pub fn set_mtu(&self, ifindex: u32, mtu: u32) -> Result<()> {
        self.block(
            self.handle
                .link()
                .set(LinkUnspec::new_with_index(ifindex).mtu(mtu).build())
                .execute(),
        )
        .with_context(|| format!("netlink: setting MTU {mtu} on link {ifindex}"))
    }

    /// Bring `lo` up.
    pub fn lo_up(&self) -> Result<Link> {
        let lo = self.require_link("lo")?;
        self.set_up(lo.ifindex)?;
        Ok(lo)
    }

    /// `ip link add NAME type bridge` (created up).
    pub fn add_bridge(&self, name: &str) -> Result<Link> {
        self.block(
            self.handle
                .link()
                .add(LinkBridge::new(name).build())
                .execute(),
        )
        .with_context(|| format!("netlink: creating bridge {name}"))?;
        self.require_link(name)
    }

    /// `ip link add NAME mtu MTU type veth peer name PEER netns PEER_NS mtu MTU`:
    /// the peer is created directly inside `peer_ns`, so no temporary name is needed.
    pub fn add_veth_into(
        &self,
        name: &str,
        peer: &str,
        peer_ns: BorrowedFd<'_>,
        mtu: u32,
    ) -> Result<Link> {
        let peer_msg = peer_in(peer, peer_ns, mtu);
        let msg = LinkMessageBuilder::<LinkVeth>::new_with_info_kind(InfoKind::Veth)
            .name(name.to_string())
            .mtu(mtu)
            .set_info_data(InfoData::Veth(InfoVeth::Peer(peer_msg)))
            .build();
        self.block(self.handle.link().add(msg).execute())
            .with_context(|| format!("netlink: creating veth pair {name} / {peer}"))?;
        self.require_link(name)
    }

    /// `ip link add NAME mtu MTU type vxlan id VNI dstport PORT local L remote R dev DEV
    /// nolearning`. With a unicast `remote` the kernel installs the default FDB entry
    /// `00:00:00:00:00:00 dst R` itself, the same entry Docker's overlay appends with
    /// `bridge fdb append`, so no flooding to other destinations is possible.
    pub fn add_vxlan(&self, v: &VxlanSpec<'_>) -> Result<Link> {
        let msg = LinkVxlan::new(v.name, v.vni)
            .dev(v.dev)
            .port(v.port)
            .local(v.local)
            .remote(v.remote)
            .learning(false)
            .mtu(v.mtu)
            .build();
        self.block(self.handle.link().add(msg).execute())
            .with_context(|| format!("netlink: creating vxlan {} (vni {})", v.name, v.vni))?;
        self.require_link(v.name)
    }

    /// `ip link add link PARENT name NAME netns NS type macvlan mode bridge`: the child
    /// is created directly inside `ns` (the parent stays here).
    pub fn add_macvlan_into(&self, name: &str, parent: u32, ns: BorrowedFd<'_>) -> Result<()> {
        let msg = LinkMacVlan::new(name, parent, MacVlanMode::Bridge)
            .setns_by_fd(ns.as_raw_fd())
            .build();
        self.block(self.handle.link().add(msg).execute())
            .with_context(|| format!("netlink: creating macvlan {name} on link {parent}"))
    }

    /// `ip link add link PARENT name NAME netns NS type ipvlan mode l2`: the child is created
    /// directly inside `ns` (the parent stays here). [`UnknownLinkKind`] without ipvlan.
    pub fn add_ipvlan_into(&self, name: &str, parent: u32, ns: BorrowedFd<'_>) -> Result<()> {
        let msg = LinkIpVlan::new(name, parent, IpVlanMode::L2)
            .setns_by_fd(ns.as_raw_fd())
            .build();
        let res = self.block(self.handle.link().add(msg).execute());
        link_added(res, "ipvlan", "CONFIG_IPVLAN", || {
            format!("netlink: creating ipvlan {name} on link {parent}")
        })
    }

    /// A netkit pair in L3 mode (6.7+; iproute2 6.1 cannot make one): `name` here, `peer`
    /// created directly inside `peer_ns`, both with policy pass (no BPF program attached).
    /// [`UnknownLinkKind`] without netkit.
    pub fn add_netkit_into(
        &self,
        name: &str,
        peer: &str,
        peer_ns: BorrowedFd<'_>,
        mtu: u32,
    ) -> Result<Link> {
        let peer_msg = peer_in(peer, peer_ns, mtu);
        let msg = LinkMessageBuilder::<LinkNetkit>::new_with_info_kind(InfoKind::Netkit)
            .name(name.to_string())
            .mtu(mtu)
            .set_info_data(InfoData::Netkit(vec![
                InfoNetkit::Peer(peer_msg),
                InfoNetkit::Mode(NetkitMode::L3),
            ]))
            .build();
        let res = self.block(self.handle.link().add(msg).execute());
        link_added(res, "netkit", "CONFIG_NETKIT (6.7+)", || {
            format!("netlink: creating netkit pair {name} / {peer}")
        })?;
        self.require_link(name)
    }

    /// The VXLAN attributes of link `name`; `None` if it is not a VXLAN device.
    pub fn vxlan_info(&self, name: &str) -> Result<Option<VxlanInfo>> {
        let Some(m) = self.link_message(name)? else {
            return Ok(None);
        };
        let Some(data) = info_data(&m) else {
            return Ok(None);
        };
        let InfoData::Vxlan(attrs) = data else {
            return Ok(None);
        };
        let mut v = VxlanInfo::default();
        for a in attrs {
            match a {
                InfoVxlan::Id(i) => v.vni = *i,
                InfoVxlan::Port(p) => v.port = *p,
                InfoVxlan::Local(a) => v.local = Some(*a),
                InfoVxlan::Group(a) => v.remote = Some(*a),
                InfoVxlan::Link(l) => v.link = Some(*l),
                InfoVxlan::Learning(b) => v.learning = *b,
                _ => {}
            }
        }
        Ok(Some(v))
    }

    /// The macvlan mode of link `name` (`"bridge"`, `"private"`, ...); `None` if it is
    /// not a macvlan device.
    pub fn macvlan_mode(&self, name: &str) -> Result<Option<String>> {
        let Some(m) = self.link_message(name)? else {
            return Ok(None);
        };
        let Some(InfoData::MacVlan(attrs)) = info_data(&m) else {
            return Ok(None);
        };
        Ok(attrs.iter().find_map(|a| match a {
            InfoMacVlan::Mode(m) => Some(format!("{m:?}").to_lowercase()),
            _ => None,
        }))
    }

    fn link_message(&self, name: &str) -> Result<Option<LinkMessage>> {
        let res: Result<Vec<LinkMessage>, _> = self.block(
            self.handle
                .link()
                .get()
                .match_name(name.to_string())
                .execute()
                .try_collect(),
        );
        match res {
            Ok(mut v) => Ok(v.drain(..).next()),
            Err(e) if matches!(nl_errno(&e), Some(ENODEV) | Some(ENOENT)) => Ok(None),
            Err(e) => Err(anyhow!(e)).with_context(|| format!("netlink: looking up link {name}")),
        }
    }

    /// `ip link set IFINDEX master BRIDGE up`.
    pub fn enslave_up(&self, ifindex: u32, bridge: u32) -> Result<()> {
        self.block(
            self.handle
                .link()
                .set(
                    LinkUnspec::new_with_index(ifindex)
                        .controller(bridge)
                        .up()
                        .build(),
                )
                .execute(),
        )
        .with_context(|| format!("netlink: enslaving link {ifindex} to bridge {bridge}"))
    }

    pub fn add_addr(&self, ifindex: u32, addr: Ipv4Addr, prefix: u8) -> Result<()> {
        self.block(
            self.handle
                .address()
                .add(ifindex, IpAddr::V4(addr), prefix)
                .execute(),
        )
        .with_context(|| format!("netlink: adding {addr}/{prefix} to link {ifindex}"))
    }

    /// Destinations (address, prefix length) of every IPv4 route of this namespace, all
    /// tables (the local table lists the addresses too); the default route is `0.0.0.0/0`.
    pub fn routes_v4(&self) -> Result<Vec<(Ipv4Addr, u8)>> {
        let all = RouteMessageBuilder::<Ipv4Addr>::new().build();
        let msgs: Vec<RouteMessage> = self
            .block(self.handle.route().get(all).execute().try_collect())
            .context("netlink: listing routes")?;
        Ok(msgs
            .iter()
            .filter(|m| m.header.address_family == AddressFamily::Inet)
            .map(|m| {
                let dst = m.attributes.iter().find_map(|a| match a {
                    RouteAttribute::Destination(RouteAddress::Inet(d)) => Some(*d),
                    _ => None,
                });
                (
                    dst.unwrap_or(Ipv4Addr::UNSPECIFIED),
                    m.header.destination_prefix_length,
                )
            })
            .collect())
    }

    /// `ip route add default via GW`.
    pub fn add_default_route(&self, gw: Ipv4Addr) -> Result<()> {
        let route = RouteMessageBuilder::<Ipv4Addr>::new().gateway(gw).build();
        self.block(self.handle.route().add(route).execute())
            .with_context(|| format!("netlink: adding default route via {gw}"))
    }

    /// Delete a link; a link that is already gone is fine. Returns whether it was deleted.
    pub fn del_link(&self, ifindex: u32) -> Result<bool> {
        match self.block(self.handle.link().del(ifindex).execute()) {
            Ok(()) => Ok(true),
            Err(e) if matches!(nl_errno(&e), Some(ENODEV) | Some(ENOENT)) => Ok(false),
            Err(e) => Err(anyhow!(e)).with_context(|| format!("netlink: deleting link {ifindex}")),
        }
    }

    /// Delete every link except `lo`: stacked devices (vxlan, macvlan) first, then veths
    /// (that also removes their peers elsewhere), then the rest, bridges last. Links that
    /// vanished on the way (a macvlan or vxlan goes with its lower link) are fine.
    /// Returns the names deleted.
    pub fn purge_links(&self) -> Result<Vec<String>> {
        let mut links = self.links()?;
        links.retain(|l| l.name != "lo");
        // Ports before bridges so nothing is left dangling halfway.
        let rank = |k: &str| match k {
            "vxlan" | "macvlan" => 0,
            "veth" => 1,
            "bridge" => 3,
            _ => 2,
        };
        links.sort_by_key(|l| (rank(&l.kind), l.ifindex));
        let mut gone = Vec::new();
        for l in links {
            if self.del_link(l.ifindex)? {
                gone.push(l.name);
            }
        }
        Ok(gone)
    }
}

fn link_of(m: &LinkMessage) -> Link {
    let mut l = Link {
        ifindex: m.header.index,
        name: String::new(),
        kind: String::new(),
        mtu: 0,
        master: None,
        iflink: None,
        link_netnsid: None,
        up: m.header.flags.contains(LinkFlags::Up),
        loopback: m.header.flags.contains(LinkFlags::Loopback),
        addrs: Vec::new(),
    };
    for a in &m.attributes {
        match a {
            LinkAttribute::IfName(n) => l.name = n.clone(),
            LinkAttribute::Mtu(v) => l.mtu = *v,
            LinkAttribute::Controller(v) => l.master = Some(*v),
            LinkAttribute::Link(v) => l.iflink = Some(*v),
            LinkAttribute::LinkNetNsId(v) => l.link_netnsid = Some(*v),
            LinkAttribute::LinkInfo(infos) => {
                for i in infos {
                    if let LinkInfo::Kind(k) = i {
                        // The kernel's own name (`veth`, `bridge`, `ipvlan`, ...).
                        l.kind = k.to_string();
                    }
                }
            }
            _ => {}
        }
    }
    l
}

fn info_data(m: &LinkMessage) -> Option<&InfoData> {
    m.attributes.iter().find_map(|a| match a {
        LinkAttribute::LinkInfo(infos) => infos.iter().find_map(|i| match i {
            LinkInfo::Data(d) => Some(d),
            _ => None,
        }),
        _ => None,
    })
}

/// Links of a namespace, read from a thread inside it.
pub fn links_in(ns: &Netns) -> Result<Vec<Link>> {
    ns.run(|| Nl::new()?.links())
        .with_context(|| format!("listing links in netns {}", ns.name))
}

/// The far end of a pair, created directly inside `ns` (no temporary name needed).
fn peer_in(name: &str, ns: BorrowedFd<'_>, mtu: u32) -> LinkMessage {
    LinkMessageBuilder::<LinkUnspec>::new()
        .name(name.to_string())
        .mtu(mtu)
        .setns_by_fd(ns.as_raw_fd())
        .build()
}
