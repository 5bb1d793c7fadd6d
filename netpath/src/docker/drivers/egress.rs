//! `egress` on Docker: a container on a bridge network (`np<id>-net`, or docker0 with
//! `default_bridge`) talking to a remote host netpath makes, through Docker's own MASQUERADE.
//!
//! ```text
//!  container          Docker host's namespace                                 np<id>-rmt
//!  eth0 ─veth─ vethX ─ docker0 ⇒ route, Docker's MASQUERADE ⇒ np<id>up .1 ─veth─ np<id>rm .2
//!                                                           10.217.K.0/24 (free on the host)
//! ```
//!
//! The remote is a namespace of netpath's standing in for another host, behind a veth netpath
//! adds to the Docker host's namespace ([`HostVeth`]) on a /24 no address or route of the host
//! overlaps. That link's connected route is all netpath adds: Docker's own FORWARD accepts and
//! MASQUERADE do the rest (docs/drivers.md, "egress on Docker", lists them). The remote knows
//! only its uplink subnet, so the replies come back through conntrack's de-NAT.

use std::net::{Ipv4Addr, SocketAddrV4};

use anyhow::{Context, Result, bail};

use super::{Build, Client, Server, bridge};
use crate::docker::AGENT_PORT;
use crate::docker::hostveth::{HostVeth, UPLINK};
use crate::lab::{UNDERLAY_MTU, UPLINK_B, device_named, lab_subnet_in, quiet_ipv6, subnet_host};
use crate::sys::netns::{Netns, read_sysctl};
use crate::sys::nl::{Nl, links_in};
use crate::path::{Device, NetPath, Role};

pub(super) fn build(b: &mut Build<'_>) -> Result<NetPath> {
    require_forwarding(b)?;
    let net = bridge::network_or_default(b)?;
    let remote = remote(b)?;
    b.client(&net, None)?;
    let server = remote.server;
    b.path_to(Client::Container, remote.into_server(), server, server)
}

/// Containers reach other hosts only if the Docker host routes: dockerd turns
/// `net.ipv4.ip_forward` on (unless `--ip-forward=false`); netpath never changes it.
fn require_forwarding(b: &Build<'_>) -> Result<()> {
    let host = Netns::at("host", &b.res.ctr().host_netns)?;
    if host.run(|| read_sysctl("net.ipv4.ip_forward"))? != "1" {
        bail!(
            "net.ipv4.ip_forward is 0 on the Docker host, so containers cannot reach other \
             hosts: start dockerd without --ip-forward=false (netpath does not change host sysctls)"
        );
    }
    Ok(())
}

/// The remote host of a Docker lab: its namespace, where the server listens, and the
/// devices leading there.
pub(super) struct Remote {
    ns: Netns,
    pub server: SocketAddrV4,
    /// `np<id>up` (Docker host) and `np<id>rm` (remote), both of kind `Uplink`, the
    /// remote's lo.
    devices: Vec<Device>,
}

impl Remote {
    pub(super) fn into_server(self) -> Server {
        Server::Netns(self.ns, self.devices)
    }
}

/// `np<id>-rmt` behind the uplink `np<id>up` in the Docker host's namespace (.1), its end
/// `np<id>rm` (.2) in the remote; registered with the lab's resources before anything else
/// can fail.
pub(super) fn remote(b: &mut Build<'_>) -> Result<Remote> {
    let (host_netns, host_name) = (&b.res.ctr().host_netns, &b.res.ctr().host_netns_name);
    let host = Netns::at(host_name, host_netns)?;
    let (net, plen) = free_uplink_subnet(&host, &b.res.run_id)?;
    let hv = HostVeth::create(UPLINK, &b.res.run_id, host_netns, UNDERLAY_MTU)?;
    let (up, rm) = (hv.host_link.clone(), hv.peer_link.clone());
    let rmt = hv.peer_ns.ns.clone();
    b.res.others.push(Box::new(hv));
    let (host_ip, remote_ip) = (subnet_host(net, 1), subnet_host(net, 2));
    host.run(|| Nl::new()?.address_up(&up, host_ip, plen))
        .with_context(|| format!("setting up {up} in the Docker host"))?;
    rmt.run(|| {
        quiet_ipv6();
        let nl = Nl::new()?;
        nl.lo_up()?;
        nl.address_up(&rm, remote_ip, plen)
    })
    .with_context(|| format!("setting up {}", rmt.name))?;
    let (hl, rl) = (links_in(&host)?, links_in(&rmt)?);
    let devices = vec![
        device_named(&host, &hl, &up, Role::Uplink)?,
        device_named(&rmt, &rl, &rm, Role::Uplink)?,
        device_named(&rmt, &rl, "lo", Role::Link)?,
    ];
    Ok(Remote {
        ns: rmt,
        server: SocketAddrV4::new(remote_ip, AGENT_PORT),
        devices,
    })
}

/// The first 10.217.K.0/24, from the run's own K on, that no address or route of `host`
/// overlaps (the default route aside).
fn free_uplink_subnet(host: &Netns, run_id: &str) -> Result<(Ipv4Addr, u8)> {
    let used = host
        .run(|| {
            let nl = Nl::new()?;
            let mut v: Vec<(Ipv4Addr, u8)> = nl.links()?.into_iter().flat_map(|l| l.addrs).collect();
            v.extend(nl.routes_v4()?);
            Ok(v)
        })
        .context("listing the Docker host's addresses and routes")?;
    let (first, plen) = lab_subnet_in(run_id, UPLINK_B);
    let k0 = u16::from(first.octets()[2]);
    (0..254u16)
        .map(|i| Ipv4Addr::new(10, UPLINK_B, ((k0 - 1 + i) % 254 + 1) as u8, 0))
        .find(|net| !used.iter().any(|u| u.1 > 0 && overlaps((*net, plen), *u)))
        .map(|net| (net, plen))
        .with_context(|| {
            format!(
                "every /24 of 10.{UPLINK_B}.0.0/16 overlaps an address or route of the Docker \
                 host: remove it, or run `netpath cleanup` if a killed run left its uplinks"
            )
        })
}

/// Whether two IPv4 prefixes share addresses.
fn overlaps((a, al): (Ipv4Addr, u8), (b, bl): (Ipv4Addr, u8)) -> bool {
    let l = u32::from(al.min(bl).min(32));
    let mask = u32::MAX.checked_shl(32 - l).unwrap_or(0);
    u32::from(a) & mask == u32::from(b) & mask
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefixes_overlap() {
        let ip = |s: &str| s.parse::<Ipv4Addr>().unwrap();
        assert!(overlaps((ip("10.217.5.0"), 24), (ip("10.217.5.1"), 32)));
        assert!(overlaps((ip("10.217.5.0"), 24), (ip("10.0.0.0"), 8)));
        assert!(!overlaps((ip("10.217.5.0"), 24), (ip("10.217.6.0"), 24)));
        assert!(!overlaps((ip("10.217.5.0"), 24), (ip("172.17.0.1"), 16)));
        assert!(overlaps((ip("10.217.5.0"), 24), (ip("0.0.0.0"), 0)));
    }
}
