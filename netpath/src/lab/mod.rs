//! Embedded netns lab: Docker's data paths built by hand in network namespaces.
//!
//! Everything a lab creates is named `np<runid>…` and lives in namespaces the lab
//! created itself (`/run/netns/np<runid>-<role>`); nothing is created in the root
//! network namespace. Where a driver needs a Docker host, a "node" namespace stands in
//! for it and carries the bridge, the host ends of the veths, netpath's nft table and
//! (published-proxy) the docker-proxy process.
//!
//! | driver            | namespaces                  | client → server                          |
//! |-------------------|-----------------------------|------------------------------------------|
//! | `host`            | host                        | lo                                       |
//! | `none`            | ctr                         | lo                                       |
//! | `bridge`          | node, cli, srv              | veth → bridge → veth                     |
//! | `overlay`         | node1, node2, cli, srv      | veth → bridge → vxlan ~underlay~ vxlan → bridge → veth |
//! | `macvlan`         | node, mvp, cli, srv         | macvlan → macvlan (bridge mode)          |
//! | `published-proxy` | node, srv                   | lo → docker-proxy → bridge → veth        |
//! | `published-nat`   | node, srv                   | OUTPUT DNAT → bridge → veth              |

mod bridge;
mod cleanup;
mod host;
mod macvlan;
mod netns;
pub mod nft;
pub mod nl;
mod none;
mod overlay;
mod published;

use std::net::{Ipv4Addr, SocketAddrV4};
use std::os::fd::{AsFd, OwnedFd};

use anyhow::{Context, Result, bail};
use netpath_common::DevKind;

pub use cleanup::{cleanup_leftovers, install_signal_cleanup, on_interrupt, wait_if_interrupted};
pub use netns::{NETNS_RUN_DIR, Netns, current_inum, ns_inum};
pub use nl::{LinkSnapshot, links_in};

/// Longest interface name the kernel accepts (IFNAMSIZ - 1).
pub const IFNAME_MAX: usize = 15;
/// Prefix of every object netpath creates.
pub const PREFIX: &str = "np";
/// Length of a run id (lowercase hex).
pub const RUN_ID_LEN: usize = 6;
/// Port the lab server listens on (inside the lab namespaces only).
pub const LAB_PORT: u16 = 11111;
/// Port published on the node address by the bridge driver's DNAT rule (like `-p`).
pub const PUBLISHED_PORT: u16 = 18080;
/// UDP port of the overlay's VXLAN tunnels (IANA, what Docker's overlay uses).
pub const VXLAN_PORT: u16 = 4789;
/// VNI of the overlay network (Docker hands out overlay VNIs from 4096 up).
pub const OVERLAY_VNI: u32 = 4096;
/// MTU of Docker's overlay networks (1500 underlay minus 50 bytes of VXLAN encapsulation).
pub const OVERLAY_MTU: u32 = 1450;
/// MTU of the overlay's underlay link and of the macvlan parent.
pub const UNDERLAY_MTU: u32 = 1500;
/// Docker's userland proxy for published ports (Debian package docker.io).
pub const DOCKER_PROXY: &str = "/usr/sbin/docker-proxy";

/// Which Docker data path to build.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Driver {
    /// `--network host`: client and server share one stack, over loopback.
    Host,
    /// The default bridge: veth pairs into a Linux bridge.
    Bridge,
    /// `--network none`: one isolated namespace, client and server over its loopback.
    None,
    /// A swarm overlay: two nodes, a bridge and a VXLAN device in each, joined by an
    /// underlay link.
    Overlay,
    /// macvlan in bridge mode: two children of one parent link talk directly.
    Macvlan,
    /// `-p 127.0.0.1:P:…` with the userland proxy: the client on the node connects to
    /// docker-proxy, which connects to the container over the bridge.
    PublishedProxy,
    /// `-p` with `--userland-proxy=false`: the client on the node reaches the container
    /// through netpath's OUTPUT-chain DNAT.
    PublishedNat,
}

impl Driver {
    pub const ALL: [Driver; 7] = [
        Driver::Host,
        Driver::Bridge,
        Driver::None,
        Driver::Overlay,
        Driver::Macvlan,
        Driver::PublishedProxy,
        Driver::PublishedNat,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Driver::Host => "host",
            Driver::Bridge => "bridge",
            Driver::None => "none",
            Driver::Overlay => "overlay",
            Driver::Macvlan => "macvlan",
            Driver::PublishedProxy => "published-proxy",
            Driver::PublishedNat => "published-nat",
        }
    }
}

impl std::fmt::Display for Driver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// A network device in a lab, as the loader needs it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LabDevice {
    pub name: String,
    /// Name of the netns the device is in.
    pub netns: String,
    /// Inode number of that netns.
    pub netns_inum: u32,
    pub ifindex: u32,
    pub kind: DevKind,
    pub mtu: u32,
}

/// A built lab. Dropping it tears it down (best effort); prefer [`Lab::teardown`] to see
/// errors.
pub struct Lab {
    pub driver: Driver,
    pub run_id: String,
    pub client_ns: Netns,
    pub server_ns: Netns,
    pub server_bind: SocketAddrV4,
    pub connect_to: SocketAddrV4,
    pub devices: Vec<LabDevice>,
    /// The namespace standing in for the Docker host (for overlay: node1, the client's).
    pub node_ns: Option<Netns>,
    /// The published address on the node, reachable from the node namespace like `-p` is
    /// from the Docker host: `gateway:PUBLISHED_PORT` (DNAT to the server) for bridge and
    /// published-nat, `127.0.0.1:PUBLISHED_PORT` (docker-proxy) for published-proxy.
    pub published: Option<SocketAddrV4>,
    /// The lab's private subnet, if it has one.
    pub subnet: Option<(Ipv4Addr, u8)>,
    /// Name of netpath's nft table in the node namespace (family `ip`).
    pub nft_table: Option<String>,
    /// PID of the docker-proxy serving the published port (published-proxy), running in
    /// the node namespace; killed and reaped on teardown.
    pub proxy_pid: Option<u32>,
    nss: LabNamespaces,
}

impl std::fmt::Debug for Lab {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Lab")
            .field("driver", &self.driver)
            .field("run_id", &self.run_id)
            .field("client_ns", &self.client_ns.name)
            .field("server_ns", &self.server_ns.name)
            .field("server_bind", &self.server_bind)
            .field("connect_to", &self.connect_to)
            .field("devices", &self.devices)
            .field("published", &self.published)
            .field("proxy_pid", &self.proxy_pid)
            .finish()
    }
}

impl Lab {
    /// Build a lab for `driver` with a fresh random run id.
    pub fn build(driver: Driver) -> Result<Lab> {
        Self::build_with_id(driver, &new_run_id()?)
    }

    /// Build with a given run id (6 lowercase hex chars).
    pub fn build_with_id(driver: Driver, run_id: &str) -> Result<Lab> {
        netns::require_root()?;
        if !is_run_id(run_id) {
            bail!("invalid run id {run_id:?}: want {RUN_ID_LEN} lowercase hex characters");
        }
        let existing = netns_of_run(run_id)?;
        if !existing.is_empty() {
            bail!(
                "run id {run_id} is already in use ({}); run `netpath lab cleanup` if it is a leftover",
                existing.join(", ")
            );
        }
        let r = match driver {
            Driver::Host => host::build(run_id),
            Driver::Bridge => bridge::build(run_id),
            Driver::None => none::build(run_id),
            Driver::Overlay => overlay::build(run_id),
            Driver::Macvlan => macvlan::build(run_id),
            Driver::PublishedProxy => published::build(run_id, published::Mode::Proxy),
            Driver::PublishedNat => published::build(run_id, published::Mode::Nat),
        };
        r.with_context(|| format!("cannot build the {} lab (run {run_id})", driver.name()))
    }

    /// Remove everything the lab created: processes first (docker-proxy, killed and
    /// reaped), then links (so veths are gone for sure, even if something still holds a
    /// namespace), then the namespaces.
    pub fn teardown(mut self) -> Result<()> {
        self.nss.destroy()
    }

    /// Names of every namespace of this lab.
    pub fn netns_names(&self) -> Vec<String> {
        self.nss.list.iter().map(|(n, _)| n.name.clone()).collect()
    }

    /// Every namespace of this lab.
    pub fn namespaces(&self) -> Vec<Netns> {
        self.nss.list.iter().map(|(n, _)| n.clone()).collect()
    }

    /// A lab whose namespaces and devices something else built and tears down (real
    /// Docker containers, see `docker::DockerLab::to_lab`). The lab only holds the fds in
    /// `parts.namespaces` (which keep those namespaces alive while it exists, and which
    /// the `Netns` paths may refer to as `/proc/self/fd/N`); `teardown` and drop remove
    /// nothing.
    pub fn from_parts(parts: LabParts) -> Lab {
        Lab {
            driver: parts.driver,
            run_id: parts.run_id.clone(),
            client_ns: parts.client_ns,
            server_ns: parts.server_ns,
            server_bind: parts.server_bind,
            connect_to: parts.connect_to,
            devices: parts.devices,
            node_ns: parts.node_ns,
            published: parts.published,
            subnet: None,
            nft_table: None,
            proxy_pid: parts.proxy_pid,
            nss: LabNamespaces {
                run_id: parts.run_id,
                list: parts.namespaces,
                procs: Vec::new(),
                done: true,
            },
        }
    }

    /// The device with this name in this namespace.
    pub fn device(&self, netns: &str, name: &str) -> Option<&LabDevice> {
        self.devices
            .iter()
            .find(|d| d.netns == netns && d.name == name)
    }
}

/// What [`Lab::from_parts`] needs: a lab built by something else (real Docker).
pub struct LabParts {
    pub driver: Driver,
    pub run_id: String,
    pub client_ns: Netns,
    pub server_ns: Netns,
    pub server_bind: SocketAddrV4,
    pub connect_to: SocketAddrV4,
    pub devices: Vec<LabDevice>,
    /// The Docker host's namespace, if the lab uses it.
    pub node_ns: Option<Netns>,
    pub published: Option<SocketAddrV4>,
    /// docker-proxy serving the published port (not the lab's to stop).
    pub proxy_pid: Option<u32>,
    /// Every namespace of the lab with an fd on it (client, server and every device's).
    pub namespaces: Vec<(Netns, OwnedFd)>,
}

/// Namespaces (and helper processes) of one lab, deleted on drop unless torn down
/// already.
pub(crate) struct LabNamespaces {
    run_id: String,
    /// Each namespace with an fd held open: it marks the namespace as in use by this
    /// process for `cleanup_leftovers` run from elsewhere.
    list: Vec<(Netns, OwnedFd)>,
    /// Processes the lab started inside its namespaces (docker-proxy), stopped first.
    procs: Vec<std::process::Child>,
    done: bool,
}

impl LabNamespaces {
    fn new(run_id: &str) -> LabNamespaces {
        LabNamespaces {
            run_id: run_id.to_string(),
            list: Vec::new(),
            procs: Vec::new(),
            done: false,
        }
    }

    /// Take ownership of a process running inside one of the lab's namespaces: it is
    /// registered for signal/panic cleanup and stopped (and reaped) before the
    /// namespaces go.
    fn adopt(&mut self, child: std::process::Child) {
        cleanup::register_pid(&self.run_id, child.id());
        self.procs.push(child);
    }

    /// Create `np<runid>-<role>`, registered for signal/panic cleanup right away.
    fn create(&mut self, role: &str) -> Result<Netns> {
        let name = netns_name(&self.run_id, role);
        let ns = Netns::create(&name)?;
        // Registered only once it is ours, so signal cleanup never touches a name that
        // someone else created.
        cleanup::register(&self.run_id, &name);
        let fd = match ns.open() {
            Ok(fd) => fd,
            Err(e) => {
                let _ = ns.delete();
                return Err(e);
            }
        };
        self.list.push((ns.clone(), fd));
        Ok(ns)
    }

    fn fd(&self, ns: &Netns) -> Result<std::os::fd::BorrowedFd<'_>> {
        self.list
            .iter()
            .find(|(n, _)| n == ns)
            .map(|(_, fd)| fd.as_fd())
            .with_context(|| format!("netns {} is not part of this lab", ns.name))
    }

    fn destroy(&mut self) -> Result<()> {
        if self.done {
            return Ok(());
        }
        self.done = true;
        let mut first_err = None;
        for mut child in std::mem::take(&mut self.procs) {
            // Only if the signal/panic cleanup or `cleanup_leftovers` did not already
            // stop (and reap) it: never signal a pid that may have been reused.
            if cleanup::take_pid(&self.run_id, child.id())
                && let Err(e) = cleanup::stop_child(&mut child)
            {
                first_err.get_or_insert(e);
            }
        }
        let nss: Vec<Netns> = self.list.iter().map(|(n, _)| n.clone()).collect();
        for ns in &nss {
            if let Err(e) = ns.run(|| nl::Nl::new()?.purge_links()) {
                first_err.get_or_insert(e.context(format!("removing links in {}", ns.name)));
            }
        }
        self.list.clear(); // closes our fds
        for ns in &nss {
            if let Err(e) = ns.delete() {
                first_err.get_or_insert(e);
            }
        }
        cleanup::unregister(&self.run_id);
        match netns_of_run(&self.run_id) {
            Ok(left) if !left.is_empty() => {
                first_err.get_or_insert(anyhow::anyhow!(
                    "namespaces still present after teardown: {}",
                    left.join(", ")
                ));
            }
            Ok(_) => {}
            Err(e) => {
                first_err.get_or_insert(e);
            }
        }
        match first_err {
            None => Ok(()),
            Some(e) => Err(e.context(format!("teardown of lab {} incomplete", self.run_id))),
        }
    }
}

impl Drop for LabNamespaces {
    fn drop(&mut self) {
        if !self.done
            && let Err(e) = self.destroy()
        {
            log::warn!("{e:#}");
        }
    }
}

/// A fresh run id: 6 lowercase hex characters from the kernel's random pool.
pub fn new_run_id() -> Result<String> {
    let mut b = [0u8; 3];
    nix_getrandom(&mut b)?;
    Ok(format!("{:02x}{:02x}{:02x}", b[0], b[1], b[2]))
}

fn nix_getrandom(buf: &mut [u8]) -> Result<()> {
    // SAFETY: buf is valid for buf.len() bytes.
    let n = unsafe { libc::getrandom(buf.as_mut_ptr().cast(), buf.len(), 0) };
    if n != buf.len() as isize {
        bail!("getrandom failed: {}", std::io::Error::last_os_error());
    }
    Ok(())
}

pub fn is_run_id(s: &str) -> bool {
    s.len() == RUN_ID_LEN
        && s.bytes()
            .all(|c| c.is_ascii_digit() || (b'a'..=b'f').contains(&c))
}

/// `np<runid>-<role>`.
pub fn netns_name(run_id: &str, role: &str) -> String {
    format!("{PREFIX}{run_id}-{role}")
}

/// `np<runid><suffix>`, checked against IFNAMSIZ.
pub fn ifname(run_id: &str, suffix: &str) -> Result<String> {
    let n = format!("{PREFIX}{run_id}{suffix}");
    if n.len() > IFNAME_MAX {
        bail!("interface name {n} is longer than {IFNAME_MAX} characters");
    }
    Ok(n)
}

/// If `name` is a namespace name netpath makes (`np` + 6 hex + `-` + role of lowercase
/// letters/digits), its run id.
pub fn run_id_of_netns(name: &str) -> Option<&str> {
    let rest = name.strip_prefix(PREFIX)?;
    if rest.len() < RUN_ID_LEN + 2 {
        return None;
    }
    let (id, role) = rest.split_at(RUN_ID_LEN);
    let role = role.strip_prefix('-')?;
    if !is_run_id(id)
        || role.is_empty()
        || role.len() > 16
        || !role
            .bytes()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit())
    {
        return None;
    }
    Some(id)
}

/// Names in /run/netns that belong to this run id.
pub fn netns_of_run(run_id: &str) -> Result<Vec<String>> {
    Ok(list_netpath_netns()?
        .into_iter()
        .filter(|n| run_id_of_netns(n) == Some(run_id))
        .collect())
}

/// Every netpath-named namespace in /run/netns (sorted).
pub fn list_netpath_netns() -> Result<Vec<String>> {
    let rd = match std::fs::read_dir(NETNS_RUN_DIR) {
        Ok(rd) => rd,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e).with_context(|| format!("cannot list {NETNS_RUN_DIR}")),
    };
    let mut v: Vec<String> = rd
        .filter_map(|e| e.ok())
        .filter_map(|e| e.file_name().into_string().ok())
        .filter(|n| run_id_of_netns(n).is_some())
        .collect();
    v.sort();
    Ok(v)
}

/// The lab's /24: 10.213.K.0/24 with K derived from the run id. Each lab's addresses
/// exist only inside its own namespaces, so two labs with the same K do not clash.
pub(crate) fn lab_subnet(run_id: &str) -> (Ipv4Addr, u8) {
    lab_subnet_in(run_id, 213)
}

/// 10.B.K.0/24 with the same K as [`lab_subnet`]: the overlay uses B = 214 (underlay) and
/// 215 (overlay), macvlan 216.
pub(crate) fn lab_subnet_in(run_id: &str, b: u8) -> (Ipv4Addr, u8) {
    let k = u8::from_str_radix(&run_id[..2], 16).unwrap_or(0) % 254 + 1;
    (Ipv4Addr::new(10, b, k, 0), 24)
}

pub(crate) fn subnet_host(net: Ipv4Addr, host: u8) -> Ipv4Addr {
    let o = net.octets();
    Ipv4Addr::new(o[0], o[1], o[2], host)
}

/// Best effort: no IPv6 in lab namespaces (no DAD, RS or MLD packets muddying traces).
pub(crate) fn quiet_ipv6() {
    for k in [
        "net.ipv6.conf.all.disable_ipv6",
        "net.ipv6.conf.default.disable_ipv6",
    ] {
        let _ = nl::write_sysctl(k, "1");
    }
}

/// Build a `LabDevice` from a netlink snapshot.
/// A container namespace's `eth0`: address `ip/plen`, up, and a default route via `gw` if
/// given (on-link subnets need none).
pub(crate) fn address_eth0(ns: &Netns, ip: Ipv4Addr, plen: u8, gw: Option<Ipv4Addr>) -> Result<()> {
    ns.run(|| {
        let nl = nl::Nl::new()?;
        let eth0 = nl.require_link("eth0")?;
        nl.add_addr(eth0.ifindex, ip, plen)?;
        nl.set_up(eth0.ifindex)?;
        if let Some(gw) = gw {
            nl.add_default_route(gw)?;
        }
        Ok(())
    })
    .with_context(|| format!("setting up eth0 in {}", ns.name))
}

pub(crate) fn device(ns: &Netns, l: &LinkSnapshot, kind: DevKind) -> LabDevice {
    LabDevice {
        name: l.name.clone(),
        netns: ns.name.clone(),
        netns_inum: ns.inum,
        ifindex: l.ifindex,
        kind,
        mtu: l.mtu,
    }
}

/// The device called `name` in a netlink listing of `ns`.
pub(crate) fn device_named(
    ns: &Netns,
    links: &[LinkSnapshot],
    name: &str,
    kind: DevKind,
) -> Result<LabDevice> {
    let l = links
        .iter()
        .find(|l| l.name == name)
        .with_context(|| format!("{name} missing in {}", ns.name))?;
    Ok(device(ns, l, kind))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn run_ids() {
        for _ in 0..100 {
            let id = new_run_id().unwrap();
            assert!(is_run_id(&id), "{id}");
        }
        assert!(!is_run_id("ABCDEF"));
        assert!(!is_run_id("abcde"));
    }

    #[test]
    fn netns_pattern() {
        assert_eq!(run_id_of_netns("np1a2b3c-cli"), Some("1a2b3c"));
        assert_eq!(run_id_of_netns("np1a2b3c-node2"), Some("1a2b3c"));
        assert_eq!(run_id_of_netns("np1a2b3c-"), None);
        assert_eq!(run_id_of_netns("np1a2b3c"), None);
        assert_eq!(run_id_of_netns("npzzzzzz-cli"), None);
        assert_eq!(run_id_of_netns("np1a2b3-cli"), None);
        assert_eq!(run_id_of_netns("xx1a2b3c-cli"), None);
        assert_eq!(run_id_of_netns("np1a2b3c-Cli"), None);
        assert_eq!(run_id_of_netns("np1a2b3c-cli.x"), None);
    }

    #[test]
    fn ifnames_fit() {
        let id = "ffffff";
        for s in [
            "br", "c", "s", "u1", "u2", "b1", "b2", "v1", "v2", "mp", "pp",
        ] {
            assert!(ifname(id, s).unwrap().len() <= IFNAME_MAX);
        }
        assert!(ifname(id, "toolongsuffix").is_err());
    }

    #[test]
    fn subnets() {
        let (net, len) = lab_subnet("000000");
        assert_eq!((net, len), (Ipv4Addr::new(10, 213, 1, 0), 24));
        let (net, _) = lab_subnet("ff0000");
        assert_eq!(net, Ipv4Addr::new(10, 213, 2, 0));
        let (ov, _) = lab_subnet_in("ff0000", 215);
        assert_eq!(ov, Ipv4Addr::new(10, 215, 2, 0));
        assert_eq!(subnet_host(net, 3), Ipv4Addr::new(10, 213, 2, 3));
    }
}
