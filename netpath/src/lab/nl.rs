//! Small synchronous rtnetlink wrapper.
//!
//! An [`Nl`] opens its netlink socket in the network namespace of the thread that
//! creates it; create it on a thread that has entered the target namespace (see
//! [`Netns::run`](super::Netns::run)) and drop it before that thread leaves.

use std::net::{IpAddr, Ipv4Addr};
use std::os::fd::{AsRawFd, BorrowedFd};

use anyhow::{Context, Result, anyhow};
use futures::TryStreamExt;
use rtnetlink::packet_route::link::{
    InfoData, InfoKind, InfoVeth, LinkAttribute, LinkFlags, LinkInfo, LinkMessage,
};
use rtnetlink::{
    Handle, LinkBridge, LinkMessageBuilder, LinkUnspec, LinkVeth, RouteMessageBuilder,
};

use super::Netns;

/// What netlink says about one link.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LinkSnapshot {
    pub ifindex: u32,
    pub name: String,
    /// rtnetlink kind (`veth`, `bridge`, ...); empty for `lo` and physical devices.
    pub kind: String,
    pub mtu: u32,
    /// ifindex of the bridge (or other controller) this link is enslaved to.
    pub master: Option<u32>,
    /// Administratively up (IFF_UP).
    pub up: bool,
}

/// A netlink connection in the calling thread's network namespace.
pub struct Nl {
    // Field order matters: the handle must go before the runtime.
    handle: Handle,
    rt: tokio::runtime::Runtime,
}

const ENODEV: i32 = 19;
const ENOENT: i32 = 2;

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

    /// All links of this namespace.
    pub fn links(&self) -> Result<Vec<LinkSnapshot>> {
        let msgs: Vec<LinkMessage> = self
            .block(self.handle.link().get().execute().try_collect())
            .context("netlink: listing links")?;
        Ok(msgs.iter().map(snapshot).collect())
    }

    /// One link by name, `None` if it does not exist.
    pub fn link(&self, name: &str) -> Result<Option<LinkSnapshot>> {
        let res: Result<Vec<LinkMessage>, _> = self.block(
            self.handle
                .link()
                .get()
                .match_name(name.to_string())
                .execute()
                .try_collect(),
        );
        match res {
            Ok(v) => Ok(v.first().map(snapshot)),
            Err(e) if matches!(nl_errno(&e), Some(ENODEV) | Some(ENOENT)) => Ok(None),
            Err(e) => Err(anyhow!(e)).with_context(|| format!("netlink: looking up link {name}")),
        }
    }

    pub fn require_link(&self, name: &str) -> Result<LinkSnapshot> {
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
    pub fn lo_up(&self) -> Result<LinkSnapshot> {
        let lo = self.require_link("lo")?;
        self.set_up(lo.ifindex)?;
        Ok(lo)
    }

    /// `ip link add NAME type bridge` (created up).
    pub fn add_bridge(&self, name: &str) -> Result<LinkSnapshot> {
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
    ) -> Result<LinkSnapshot> {
        let peer_msg = LinkMessageBuilder::<LinkUnspec>::new()
            .name(peer.to_string())
            .mtu(mtu)
            .setns_by_fd(peer_ns.as_raw_fd())
            .build();
        let msg = LinkMessageBuilder::<LinkVeth>::new_with_info_kind(InfoKind::Veth)
            .name(name.to_string())
            .mtu(mtu)
            .set_info_data(InfoData::Veth(InfoVeth::Peer(peer_msg)))
            .build();
        self.block(self.handle.link().add(msg).execute())
            .with_context(|| format!("netlink: creating veth pair {name} / {peer}"))?;
        self.require_link(name)
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

    /// Delete every link except `lo`, veths first (that also removes their peers
    /// elsewhere), then the rest. Returns the names deleted.
    pub fn purge_links(&self) -> Result<Vec<String>> {
        let mut links = self.links()?;
        links.retain(|l| l.name != "lo");
        // Ports before bridges so nothing is left dangling halfway.
        links.sort_by_key(|l| (l.kind == "bridge", l.ifindex));
        let mut gone = Vec::new();
        for l in links {
            if self.del_link(l.ifindex)? {
                gone.push(l.name);
            }
        }
        Ok(gone)
    }
}

fn snapshot(m: &LinkMessage) -> LinkSnapshot {
    let mut s = LinkSnapshot {
        ifindex: m.header.index,
        name: String::new(),
        kind: String::new(),
        mtu: 0,
        master: None,
        up: m.header.flags.contains(LinkFlags::Up),
    };
    for a in &m.attributes {
        match a {
            LinkAttribute::IfName(n) => s.name = n.clone(),
            LinkAttribute::Mtu(v) => s.mtu = *v,
            LinkAttribute::Controller(v) => s.master = Some(*v),
            LinkAttribute::LinkInfo(infos) => {
                for i in infos {
                    if let LinkInfo::Kind(k) = i {
                        s.kind = kind_name(k);
                    }
                }
            }
            _ => {}
        }
    }
    s
}

fn kind_name(k: &InfoKind) -> String {
    match k {
        InfoKind::Veth => "veth".into(),
        InfoKind::Bridge => "bridge".into(),
        InfoKind::Vxlan => "vxlan".into(),
        InfoKind::MacVlan => "macvlan".into(),
        InfoKind::Dummy => "dummy".into(),
        InfoKind::Other(s) => s.clone(),
        other => format!("{other:?}").to_lowercase(),
    }
}

/// Links of a namespace, read from a thread inside it.
pub fn links_in(ns: &Netns) -> Result<Vec<LinkSnapshot>> {
    ns.run(|| Nl::new()?.links())
        .with_context(|| format!("listing links in netns {}", ns.name))
}

/// Write a sysctl under /proc/sys for the calling thread's network namespace
/// (net.* sysctls follow the writer's netns).
pub fn write_sysctl(key: &str, value: &str) -> Result<()> {
    let path = format!("/proc/sys/{}", key.replace('.', "/"));
    std::fs::write(&path, value).with_context(|| format!("cannot write {value} to {path}"))
}

pub fn read_sysctl(key: &str) -> Result<String> {
    let path = format!("/proc/sys/{}", key.replace('.', "/"));
    Ok(std::fs::read_to_string(&path)
        .with_context(|| format!("cannot read {path}"))?
        .trim()
        .to_string())
}
