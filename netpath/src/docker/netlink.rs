//! Links (with the attributes the lab's `nl` does not keep: `IFLA_LINK`, the peer's
//! netns id, addresses) of a network namespace given by a path or an fd, read on a
//! short-lived thread that has entered it.

use std::net::{IpAddr, Ipv4Addr};
use std::os::fd::{AsFd, OwnedFd};
use std::path::Path;

use anyhow::{Context, Result, anyhow};
use futures::TryStreamExt;
use nix::sched::{CloneFlags, setns};
use rtnetlink::packet_route::address::AddressAttribute;
use rtnetlink::packet_route::link::{InfoKind, LinkAttribute, LinkFlags, LinkInfo, LinkMessage};

/// One link as netlink reports it.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Link {
    pub ifindex: u32,
    pub name: String,
    /// rtnetlink kind (`veth`, `bridge`, `vxlan`, `macvlan`, ...); empty for `lo` and
    /// physical devices.
    pub kind: String,
    pub mtu: u32,
    /// ifindex of the controller (bridge) it is enslaved to.
    pub master: Option<u32>,
    /// `IFLA_LINK` (the `@ifN` of `ip link`): for a veth the peer's ifindex, for a
    /// macvlan its parent's, for a vxlan its underlay's; in the namespace named by
    /// `link_netnsid` if that is set, else in this one.
    pub iflink: Option<u32>,
    /// `IFLA_LINK_NETNSID`: the peer/parent lives in another namespace.
    pub link_netnsid: Option<i32>,
    pub up: bool,
    /// IPv4 addresses with prefix length.
    pub addrs: Vec<(Ipv4Addr, u8)>,
}

/// Links of the namespace at `path` (`/proc/PID/ns/net`, `/run/docker/netns/…`).
pub fn links_at(path: &Path) -> Result<Vec<Link>> {
    let f = std::fs::File::open(path)
        .with_context(|| format!("cannot open network namespace {}", path.display()))?;
    links_in_fd(f.into()).with_context(|| format!("listing links in {}", path.display()))
}

/// Links of the namespace `fd` refers to.
pub fn links_in_fd(fd: OwnedFd) -> Result<Vec<Link>> {
    std::thread::Builder::new()
        .name("np-dk-links".into())
        .spawn(move || -> Result<Vec<Link>> {
            setns(fd.as_fd(), CloneFlags::CLONE_NEWNET).context("setns")?;
            list_here()
        })
        .context("spawning a netlink thread")?
        .join()
        .map_err(|_| anyhow!("netlink thread panicked"))?
}

/// Links of the calling thread's network namespace.
pub fn list_here() -> Result<Vec<Link>> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .build()
        .context("cannot start netlink runtime")?;
    rt.block_on(async {
        let (conn, handle, _) =
            rtnetlink::new_connection().context("cannot open rtnetlink socket")?;
        let task = tokio::spawn(conn);
        let msgs: Vec<LinkMessage> = handle
            .link()
            .get()
            .execute()
            .try_collect()
            .await
            .context("netlink: listing links")?;
        let addrs: Vec<_> = handle
            .address()
            .get()
            .execute()
            .try_collect()
            .await
            .context("netlink: listing addresses")?;
        task.abort();
        let mut links: Vec<Link> = msgs.iter().map(link_of).collect();
        for a in addrs {
            for attr in &a.attributes {
                if let AddressAttribute::Address(IpAddr::V4(ip)) = attr
                    && let Some(l) = links.iter_mut().find(|l| l.ifindex == a.header.index)
                {
                    l.addrs.push((*ip, a.header.prefix_len));
                }
            }
        }
        Ok(links)
    })
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
                        l.kind = kind_name(k);
                    }
                }
            }
            _ => {}
        }
    }
    l
}

fn kind_name(k: &InfoKind) -> String {
    match k {
        InfoKind::Veth => "veth".into(),
        InfoKind::Bridge => "bridge".into(),
        InfoKind::Vxlan => "vxlan".into(),
        InfoKind::MacVlan => "macvlan".into(),
        InfoKind::IpVlan => "ipvlan".into(),
        InfoKind::Dummy => "dummy".into(),
        InfoKind::Other(s) => s.clone(),
        other => format!("{other:?}").to_lowercase(),
    }
}
