//! The embedded lab: Docker's data paths built by hand in network namespaces netpath owns.
//!
//! Everything a lab creates is named `np<runid>…` and lives in namespaces the lab
//! created itself (`/run/netns/np<runid>-<role>`); nothing is created in the root
//! network namespace. Where a driver needs a Docker host, a "node" namespace stands in
//! for it and carries the bridge, the host ends of the veths, netpath's nft table and
//! (published-proxy) the docker-proxy process. One file per driver builds its
//! [`NetPath`]; `namespaces.rs` owns the namespaces and removes them. docs/drivers.md
//! ("The lab's drivers") lists each driver's namespaces and path.

pub(crate) mod cleanup;
mod namespaces;
pub mod netem;
pub mod nft;

use std::net::Ipv4Addr;

use anyhow::{Context, Result, bail};

pub use cleanup::{
    before_labs_go, cleanup_leftovers, install_signal_cleanup, on_interrupt, wait_if_interrupted,
};
use namespaces::LabNamespaces;

use crate::driver::Driver;
use crate::path::{Device, NetPath, Role};
use crate::sys::netns::{NETNS_RUN_DIR, Netns, require_root};
use crate::sys::nl::{self, Link};

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
/// MTU of the overlay's underlay link, of the macvlan parent and of the egress uplink.
pub const UNDERLAY_MTU: u32 = 1500;
/// Second octet of the egress drivers' uplink subnet, 10.217.K.0/24 (lab and Docker).
pub const UPLINK_B: u8 = 217;

macro_rules! lab_drivers {
    ($($variant:ident $module:ident $name:literal $help:literal;)*) => {
        $(mod $module;)*

        fn build_driver(driver: Driver, run_id: &str) -> Result<NetPath> {
            match driver {
                $(Driver::$variant => $module::build(run_id),)*
            }
        }
    };
}
crate::driver::driver_table!(lab_drivers);

/// Build the lab of `driver` with a fresh random run id. Tear it down with
/// [`NetPath::teardown`] (dropping it does too, best effort).
pub fn build(driver: Driver) -> Result<NetPath> {
    build_with_id(driver, &new_run_id()?)
}

/// Build with a given run id (6 lowercase hex chars).
pub fn build_with_id(driver: Driver, run_id: &str) -> Result<NetPath> {
    require_root()?;
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
    build_driver(driver, run_id).map_err(|e| {
        // What this kernel lacks, without the build steps around it (the fix is a kernel),
        // still typed for `driver::unavailable`.
        let e = match e.downcast::<nl::UnknownLinkKind>() {
            Ok(k) => {
                return anyhow::Error::new(k).context(format!("cannot build the {driver} lab"));
            }
            Err(e) => e,
        };
        e.context(format!("cannot build the {driver} lab (run {run_id})"))
    })
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
    let (id, role) = split_run_name(name)?;
    let role = role.strip_prefix('-')?;
    let ok = !role.is_empty()
        && role.len() <= 16
        && role
            .bytes()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit());
    ok.then_some(id)
}

/// A name netpath gives its objects, `np` + run id + the rest: the run id and the rest.
pub fn split_run_name(name: &str) -> Option<(&str, &str)> {
    let rest = name.strip_prefix(PREFIX)?;
    let id = rest.get(..RUN_ID_LEN)?;
    is_run_id(id).then(|| (id, &rest[RUN_ID_LEN..]))
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
/// 215 (overlay), macvlan 216, the egress uplink 217 ([`UPLINK_B`]).
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
        let _ = crate::sys::netns::write_sysctl(k, "1");
    }
}

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

/// `lo` up, and no IPv6, in each of `nss`.
pub(crate) fn lo_up(nss: &[&Netns]) -> Result<()> {
    for ns in nss {
        ns.run(|| {
            quiet_ipv6();
            nl::Nl::new()?.lo_up()
        })
        .with_context(|| format!("setting up {}", ns.name))?;
    }
    Ok(())
}

/// The device called `name` in a netlink listing of `ns`, with the kind its link and `role`
/// give it.
pub(crate) fn device_named(ns: &Netns, links: &[Link], name: &str, role: Role) -> Result<Device> {
    let l = links
        .iter()
        .find(|l| l.name == name)
        .with_context(|| format!("{name} missing in {}", ns.name))?;
    Device::of((&ns.name, ns.inum), l, role)
        .with_context(|| format!("{name} in {} is a {:?} link", ns.name, l.kind))
}

/// The devices `(name, role)` of `ns`, read back from netlink (ifindex, final MTU).
pub(crate) fn devices_in(ns: &Netns, names: &[(&str, Role)]) -> Result<Vec<Device>> {
    let links = nl::links_in(ns)?;
    names
        .iter()
        .map(|(n, role)| device_named(ns, &links, n, *role))
        .collect()
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
            "br", "c", "s", "u1", "u2", "b1", "b2", "v1", "v2", "mp", "pp", "up", "rm",
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
