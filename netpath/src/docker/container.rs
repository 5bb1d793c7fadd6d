//! The network side of running containers (netpath's or anybody's) and of paths between them.
//!
//! Each one's namespace, interfaces, and where each interface's other end is on the host
//! (the bridge port of a veth, the bridge, an overlay's VXLAN device, a macvlan's parent);
//! the namespaces and devices of the paths between them.

use std::collections::HashMap;
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use anyhow::{Context, Result, bail};
use bollard::models::{ContainerInspectResponse, NetworkSettings};
use netpath_common::{DevKind, devrole};

use super::Engine;
use crate::path::{Device, Role, kind_of};
use crate::sys::netns::{Held, Netns, ns_inum};
use crate::sys::nl::{Link, links_in};

/// Links of the namespace at `path`.
fn links_at(path: &Path) -> Result<Vec<Link>> {
    links_in(&Netns::at(&path.display().to_string(), path)?)
}

/// A Docker network a container is attached to.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, schemars::JsonSchema)]
pub struct NetAttachment {
    pub name: String,
    pub network_id: String,
    pub ip: Option<Ipv4Addr>,
    pub prefix_len: Option<u8>,
    pub gateway: Option<Ipv4Addr>,
    pub mac: Option<String>,
}

/// The far end of a container interface, outside the container.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, schemars::JsonSchema)]
pub struct PeerLink {
    /// Name netpath uses for that namespace: `host` for the daemon's own, the file name
    /// under Docker's netns directory (`1-<netid>` for an overlay) otherwise.
    pub netns: String,
    pub netns_path: PathBuf,
    pub netns_inum: u32,
    /// The link itself: the host end of a veth, or a macvlan's parent.
    pub link: Link,
    /// The bridge it is a port of (`docker0`, `br-…`, an overlay's `br0`).
    pub bridge: Option<Link>,
    /// VXLAN devices on that bridge (overlay networks).
    pub vxlans: Vec<Link>,
}

/// One interface inside the container.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, schemars::JsonSchema)]
pub struct Interface {
    pub link: Link,
    /// The Docker network this interface belongs to (matched by address).
    pub network: Option<String>,
    pub peer: Option<PeerLink>,
}

impl Interface {
    /// The network driver this interface's link says: the driver whose facts name its kind
    /// (macvlan, ipvlan), overlay when its host peer has a VXLAN device beside it, bridge when
    /// the peer is a bridge port; `None` for anything else. Read through [`ContainerNet::driver`].
    pub fn driver(&self) -> Option<crate::driver::Driver> {
        use crate::driver::Driver;
        let kind = Some(self.link.kind.as_str());
        if let Some(d) = Driver::ALL
            .into_iter()
            .find(|d| d.facts().link_kind == kind)
        {
            return Some(d);
        }
        let p = self.peer.as_ref()?;
        if !p.vxlans.is_empty() {
            Some(Driver::Overlay)
        } else {
            p.bridge.is_some().then_some(Driver::Bridge)
        }
    }
}

/// One published port (`-p host_ip:host_port:container_port/proto`).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, schemars::JsonSchema)]
pub struct PortMapping {
    pub container_port: u16,
    pub proto: String,
    pub host_ip: String,
    pub host_port: u16,
}

/// The network view of a running container.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, schemars::JsonSchema)]
pub struct ContainerNet {
    pub id: String,
    /// Container name without the leading `/`; also the name netpath gives its netns.
    pub name: String,
    pub pid: u32,
    /// `HostConfig.NetworkMode`: `bridge`, `host`, `none`, `container:…` or a network name.
    pub network_mode: String,
    /// True if the container shares the daemon's namespace (`--network host`).
    pub host_network: bool,
    /// `/proc/PID/ns/net`.
    pub netns_path: PathBuf,
    pub netns_inum: u32,
    /// Docker's bind mount of the namespace (`/var/run/docker/netns/…`), if any.
    pub sandbox_key: Option<String>,
    pub networks: Vec<NetAttachment>,
    pub interfaces: Vec<Interface>,
    pub ports: Vec<PortMapping>,
    /// Name of the daemon's namespace in [`Device::netns`] (`host`).
    pub host_netns: String,
}

impl ContainerNet {
    /// The netns name used for this container's devices.
    pub fn netns_name(&self) -> String {
        if self.host_network {
            self.host_netns.clone()
        } else {
            self.name.clone()
        }
    }

    /// First IPv4 address on a Docker network.
    pub fn ip(&self) -> Option<Ipv4Addr> {
        self.networks.iter().find_map(|n| n.ip)
    }

    /// The interface whose link says which driver this container follows: its interface on
    /// Docker network `network`, or (`None`: a container no Docker network describes) its
    /// first one but `lo`.
    pub fn interface_on(&self, network: Option<&str>) -> Option<&Interface> {
        match network {
            Some(n) => self
                .interfaces
                .iter()
                .find(|i| i.network.as_deref() == Some(n)),
            None => self.interfaces.iter().find(|i| i.link.name != "lo"),
        }
    }

    /// The driver this container's interface on `network` (see [`interface_on`]) follows, by
    /// [`Interface::driver`]; `None` when there is no such interface or its link names none.
    /// The one answer of it: `compare --between` defaults to bridge, `serve`'s label to the
    /// link's kind.
    ///
    /// [`interface_on`]: Self::interface_on
    pub fn driver(&self, network: Option<&str>) -> Option<crate::driver::Driver> {
        self.interface_on(network)?.driver()
    }

    /// IPv4 address on network `name`.
    pub fn ip_on(&self, name: &str) -> Option<Ipv4Addr> {
        self.networks
            .iter()
            .find(|n| n.name == name || n.network_id.starts_with(name))
            .and_then(|n| n.ip)
    }

    /// Every device on this container's paths, for the tracer: `lo` and the interfaces
    /// inside (`Veth` or `Macvlan`), the host ends of the veths (`BridgePort`), their
    /// bridges (`Bridge`), an overlay's VXLAN devices (`Vxlan`), a macvlan's parent
    /// (`MacvlanParent`). For `--network host` only the host's `lo`.
    pub fn devices(&self) -> Vec<Device> {
        let mut v: Vec<Device> = Vec::new();
        let mut push = |ns: &str, inum: u32, l: &Link, role: Role| {
            if let Some(d) = Device::of((ns, inum), l, role)
                && !v
                    .iter()
                    .any(|x| x.netns_inum == inum && x.ifindex == l.ifindex)
            {
                v.push(d);
            }
        };
        let me = self.netns_name();
        for i in &self.interfaces {
            let Some(kind) = kind_of(&i.link, Role::Link) else {
                continue;
            };
            if self.host_network && kind != DevKind::Loopback {
                continue;
            }
            push(&me, self.netns_inum, &i.link, Role::Link);
            let Some(p) = &i.peer else { continue };
            // A macvlan's (or ipvlan's) other end is its lower device.
            let role = match kind {
                DevKind::Macvlan | DevKind::Ipvlan => Role::MacvlanParent,
                _ => Role::Link,
            };
            push(&p.netns, p.netns_inum, &p.link, role);
            for l in p.bridge.iter().chain(&p.vxlans) {
                push(&p.netns, p.netns_inum, l, Role::Link);
            }
        }
        v
    }

    /// Where device `d` sits for this container (`devrole::*`): in its namespace, the other
    /// end of one of its interfaces (a macvlan's parent excepted: every container on it shares
    /// it), or between. It decides where a passively traced journey starts and which way it goes.
    pub fn role(&self, d: &Device) -> u32 {
        if d.netns_inum == self.netns_inum {
            return devrole::OWN;
        }
        let peer = self
            .interfaces
            .iter()
            .filter_map(|i| i.peer.as_ref())
            .any(|p| {
                p.netns_inum == d.netns_inum
                    && p.link.ifindex == d.ifindex
                    && d.kind != DevKind::MacvlanParent
            });
        if peer { devrole::PEER } else { devrole::MIDDLE }
    }

    /// Distinct namespaces of [`devices`](Self::devices): `(name, path, inum)`.
    pub fn namespaces(&self) -> Vec<(String, PathBuf, u32)> {
        let mut v: Vec<(String, PathBuf, u32)> = Vec::new();
        if !self.host_network {
            v.push((self.name.clone(), self.netns_path.clone(), self.netns_inum));
        }
        for p in self.interfaces.iter().filter_map(|i| i.peer.as_ref()) {
            if !v.iter().any(|(_, _, i)| *i == p.netns_inum) {
                v.push((p.netns.clone(), p.netns_path.clone(), p.netns_inum));
            }
        }
        v
    }
}

/// Where the host's /proc is, when netpath runs in a PID namespace of its own: a swarm
/// service cannot share the host's (Docker 20.10 has no PID mode for services), so the stack
/// bind-mounts the host's /proc at /host/proc and `serve --host-proc` names it. Set once.
static HOST_PROC: OnceLock<PathBuf> = OnceLock::new();

/// Read containers' namespaces through the host's /proc mounted at `dir`.
pub fn set_host_proc(dir: PathBuf) -> Result<()> {
    if !dir.join("self/ns/net").exists() {
        bail!(
            "--host-proc {}: no host /proc there (mount it, e.g. `-v /proc:{}:ro`)",
            dir.display(),
            dir.display()
        );
    }
    let _ = HOST_PROC.set(dir);
    Ok(())
}

/// The host's /proc: `/proc`, or where `--host-proc` says it is mounted.
pub(crate) fn proc_root() -> PathBuf {
    HOST_PROC
        .get()
        .cloned()
        .unwrap_or_else(|| PathBuf::from("/proc"))
}

/// The network namespace file of the process Docker reports by its host PID.
fn netns_file(pid: u32) -> PathBuf {
    proc_root().join(pid.to_string()).join("ns/net")
}

pub(crate) fn from_inspect(engine: &Engine, c: &ContainerInspectResponse) -> Result<ContainerNet> {
    let cname = c
        .name
        .clone()
        .unwrap_or_default()
        .trim_start_matches('/')
        .to_string();
    let state = c.state.clone().unwrap_or_default();
    let pid = state.pid.unwrap_or(0);
    if !state.running.unwrap_or(false) || pid <= 0 {
        bail!("container {cname} is not running");
    }
    let pid = pid as u32;
    let network_mode = c
        .host_config
        .as_ref()
        .and_then(|h| h.network_mode.clone())
        .unwrap_or_default();
    let ns = c.network_settings.clone().unwrap_or_default();
    let sandbox_key = ns.sandbox_key.clone().filter(|s| !s.is_empty());
    let netns_path = netns_file(pid);
    let netns_inum = ns_inum(&netns_path)?;
    let host_network = netns_inum == ns_inum(&engine.host_netns)?;
    let networks = networks_of(&ns);
    let mut cn = ContainerNet {
        id: c.id.clone().unwrap_or_default(),
        name: cname,
        pid,
        network_mode,
        host_network,
        netns_path,
        netns_inum,
        sandbox_key,
        networks,
        interfaces: Vec::new(),
        ports: ports_of(&ns),
        host_netns: engine.host_netns_name.clone(),
    };
    cn.interfaces = interfaces_of(engine, &cn)?;
    Ok(cn)
}

/// The Docker networks of a container, by name.
/// The addressing `from_inspect` takes from an engine's inspect answer (networks with their
/// addresses, published ports), from the answer's JSON: the part of the answer that is parsed
/// rather than looked up in the kernel (and the fuzz target's entry point).
pub fn addressing_from_json(json: &[u8]) -> Result<(Vec<NetAttachment>, Vec<PortMapping>)> {
    let c: ContainerInspectResponse =
        serde_json::from_slice(json).context("not a container inspect answer")?;
    let ns = c.network_settings.unwrap_or_default();
    Ok((networks_of(&ns), ports_of(&ns)))
}

fn networks_of(ns: &NetworkSettings) -> Vec<NetAttachment> {
    let mut networks: Vec<NetAttachment> = ns
        .networks
        .clone()
        .unwrap_or_default()
        .into_iter()
        .map(|(name, e)| NetAttachment {
            name,
            network_id: e.network_id.unwrap_or_default(),
            ip: e.ip_address.as_deref().and_then(|s| s.parse().ok()),
            prefix_len: e.ip_prefix_len.and_then(|p| u8::try_from(p).ok()),
            gateway: e.gateway.as_deref().and_then(|s| s.parse().ok()),
            mac: e.mac_address.filter(|m| !m.is_empty()),
        })
        .collect();
    networks.sort_by(|a, b| a.name.cmp(&b.name));
    networks
}

/// The published ports of a container.
fn ports_of(ns: &NetworkSettings) -> Vec<PortMapping> {
    let mut ports = Vec::new();
    for (k, v) in ns.ports.clone().unwrap_or_default() {
        let (port, proto) = k.split_once('/').unwrap_or((k.as_str(), "tcp"));
        let Ok(port) = port.parse::<u16>() else {
            continue;
        };
        for b in v.unwrap_or_default() {
            ports.push(PortMapping {
                container_port: port,
                proto: proto.to_string(),
                host_ip: b.host_ip.unwrap_or_default(),
                host_port: b.host_port.and_then(|p| p.parse().ok()).unwrap_or(0),
            });
        }
    }
    ports.sort_by(|a, b| (a.container_port, &a.host_ip).cmp(&(b.container_port, &b.host_ip)));
    ports
}

/// The interfaces inside the container, each with its network and its other end.
fn interfaces_of(engine: &Engine, c: &ContainerNet) -> Result<Vec<Interface>> {
    let dir = c
        .sandbox_key
        .as_deref()
        .and_then(|k| Path::new(k).parent().map(Path::to_path_buf))
        .unwrap_or_else(|| engine.exec_root.join("netns"));
    let host = (engine.host_netns_name.as_str(), engine.host_netns.as_path());
    interfaces_with(host, &[dir], c)
}

/// The interfaces inside the container, each with its network (matched by address) and its
/// other end, looked for in the `host` namespace (its name and path) and then in the
/// namespaces bind-mounted in `dirs`.
pub(crate) fn interfaces_with(
    host: (&str, &Path),
    dirs: &[PathBuf],
    c: &ContainerNet,
) -> Result<Vec<Interface>> {
    let links = links_at(&c.netns_path)?;
    let mut interfaces = Vec::new();
    if c.host_network {
        // Same stack as the daemon: no peers to find; keep lo only.
        for l in links.into_iter().filter(|l| l.name == "lo") {
            interfaces.push(Interface {
                link: l,
                network: None,
                peer: None,
            });
        }
        return Ok(interfaces);
    }
    let mut cands = Candidates::new(host, dirs, c.netns_inum);
    for l in links {
        let network = c
            .networks
            .iter()
            .find(|n| n.ip.is_some_and(|ip| l.addrs.iter().any(|(a, _)| *a == ip)))
            .map(|n| n.name.clone());
        let peer = if l.link_netnsid.is_some() {
            cands.find_peer(&l)?
        } else {
            None
        };
        interfaces.push(Interface {
            link: l,
            network,
            peer,
        });
    }
    Ok(interfaces)
}

/// Namespaces where a container interface's other end may be: the daemon's own, then
/// every namespace in the given directories (Docker's netns directory: overlay networks'
/// `1-<id>`), listed lazily and once.
struct Candidates {
    list: Vec<(String, PathBuf, Option<u32>)>,
    links: HashMap<usize, Vec<Link>>,
}

impl Candidates {
    fn new(host: (&str, &Path), dirs: &[PathBuf], own_inum: u32) -> Candidates {
        let host_inum = ns_inum(host.1).ok();
        let mut list = vec![(host.0.to_string(), host.1.to_path_buf(), host_inum)];
        for rd in dirs.iter().filter_map(|d| std::fs::read_dir(d).ok()) {
            let mut more: Vec<(String, PathBuf, Option<u32>)> = rd
                .filter_map(|e| e.ok())
                .map(|e| (e.file_name().to_string_lossy().into_owned(), e.path()))
                // Only live namespaces (a stale mount point is an empty file on tmpfs).
                .filter_map(|(n, p)| {
                    if !is_nsfs(&p) {
                        return None;
                    }
                    let i = ns_inum(&p).ok()?;
                    (i != own_inum && Some(i) != host_inum).then_some((n, p, Some(i)))
                })
                .collect();
            // Overlay sandboxes first: that is where a veth's other end usually is.
            more.sort_by_key(|(n, _, _)| (!n.starts_with("1-"), n.clone()));
            list.extend(more);
        }
        Candidates {
            list,
            links: HashMap::new(),
        }
    }

    fn links(&mut self, i: usize) -> &[Link] {
        let path = self.list[i].1.clone();
        self.links
            .entry(i)
            .or_insert_with(|| links_at(&path).unwrap_or_default())
    }

    /// The other end of `l` (a veth: the link whose ifindex is `l`'s iflink and whose
    /// iflink is `l`'s ifindex; a macvlan/ipvlan: its parent in the daemon's namespace).
    fn find_peer(&mut self, l: &Link) -> Result<Option<PeerLink>> {
        let Some(iflink) = l.iflink else {
            return Ok(None);
        };
        let parent_only = matches!(l.kind.as_str(), "macvlan" | "ipvlan");
        for i in 0..self.list.len() {
            if parent_only && i > 0 {
                break;
            }
            let links = self.links(i).to_vec();
            let found = links.iter().find(|p| {
                p.ifindex == iflink
                    && (parent_only || (p.kind == "veth" && p.iflink == Some(l.ifindex)))
            });
            let Some(p) = found else { continue };
            let bridge = p
                .master
                .and_then(|m| links.iter().find(|b| b.ifindex == m && b.kind == "bridge"))
                .cloned();
            let vxlans = match &bridge {
                Some(b) => links
                    .iter()
                    .filter(|x| x.kind == "vxlan" && x.master == Some(b.ifindex))
                    .cloned()
                    .collect(),
                None => Vec::new(),
            };
            let (name, path, inum) = self.list[i].clone();
            let inum = match inum {
                Some(i) => i,
                None => ns_inum(&path)?,
            };
            return Ok(Some(PeerLink {
                netns: name,
                netns_path: path,
                netns_inum: inum,
                link: p.clone(),
                bridge,
                vxlans,
            }));
        }
        Ok(None)
    }
}

/// True if `p` is a namespace file (nsfs), i.e. a live bind mount of a namespace.
fn is_nsfs(p: &Path) -> bool {
    nix::sys::statfs::statfs(p).is_ok_and(|s| s.filesystem_type() == nix::sys::statfs::NSFS_MAGIC)
}

/// The namespaces on the paths of `containers` (theirs and their peers', plus the Docker
/// host's when `host_used`), each held through an fd and checked against its inode so a
/// container restarted meanwhile is noticed, and every device on those paths.
pub(crate) fn hold_paths(
    e: &Engine,
    containers: &[&ContainerNet],
    host_used: bool,
) -> Result<(Vec<Held>, Vec<Device>)> {
    hold_paths_in(
        &Netns::at(&e.host_netns_name, &e.host_netns)?,
        containers,
        host_used,
    )
}

/// [`hold_paths`] with the runtime's host namespace given.
pub(crate) fn hold_paths_in(
    host: &Netns,
    containers: &[&ContainerNet],
    host_used: bool,
) -> Result<(Vec<Held>, Vec<Device>)> {
    let mut wanted: Vec<(String, PathBuf, u32)> = Vec::new();
    let mut add = |n: (String, PathBuf, u32)| {
        if !wanted.iter().any(|w| w.2 == n.2) {
            wanted.push(n);
        }
    };
    for c in containers {
        c.namespaces().into_iter().for_each(&mut add);
    }
    if host_used {
        add((host.name.clone(), host.path.clone(), host.inum));
    }
    let held = wanted
        .iter()
        .map(|(name, path, inum)| Held::through_fd(name, path, Some(*inum)))
        .collect::<Result<Vec<_>>>()?;

    let mut devices: Vec<Device> = Vec::new();
    let mut push = |d: Device| {
        if !devices
            .iter()
            .any(|x| x.netns_inum == d.netns_inum && x.ifindex == d.ifindex)
        {
            devices.push(d);
        }
    };
    if host_used {
        for l in links_in(host)?.iter().filter(|l| l.name == "lo") {
            push(Device::of((&host.name, host.inum), l, Role::Link).context("host lo")?);
        }
    }
    for c in containers {
        c.devices().into_iter().for_each(&mut push);
    }
    Ok((held, devices))
}

#[cfg(test)]
impl ContainerNet {
    /// A container with `interfaces`, no Docker network and no host network: what tests of
    /// how a container names its driver build.
    pub fn with_interfaces(interfaces: Vec<Interface>) -> ContainerNet {
        ContainerNet {
            id: "c1".into(),
            name: "c1".into(),
            pid: 1,
            network_mode: String::new(),
            host_network: false,
            netns_path: PathBuf::new(),
            netns_inum: 2,
            sandbox_key: None,
            networks: Vec::new(),
            interfaces,
            ports: Vec::new(),
            host_netns: "host".into(),
        }
    }
}

#[cfg(test)]
mod tests;
