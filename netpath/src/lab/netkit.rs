//! `netkit` driver: a netkit pair in L3 mode (kernel 6.7+), the device Cilium puts in
//! place of veth, straight between the two container namespaces.
//!
//! ```text
//!  np<id>-cli                                 np<id>-srv
//!  eth0 .2 (netkit, primary) ══ pair ══ eth0 .3 (netkit peer)
//!  subnet 10.219.K.0/24, MTU 1500
//! ```
//!
//! Like veth, a transmit on one end ends in the peer's backlog (`__netif_rx`); unlike veth
//! there is no Ethernet header and no ARP (L3 mode), and with no BPF program attached both
//! ends' policy is pass. The pair links the two namespaces directly (no node, no bridge):
//! what `compare` weighs against the bridge driver's veth → bridge → veth is the device
//! itself. A kernel without netkit (before 6.7, or CONFIG_NETKIT unset) fails the build with
//! [`UnknownLinkKind`](crate::sys::nl::UnknownLinkKind), which `compare` turns into a skipped row.

use std::net::SocketAddrV4;

use anyhow::{Context, Result};

use super::{LAB_PORT, LabNamespaces, UNDERLAY_MTU, devices_in, lab_subnet_in, lo_up, subnet_host};
use crate::driver::Driver;
use crate::sys::nl::Nl;
use crate::path::{NetPath, Role};

pub(super) fn build(run_id: &str) -> Result<NetPath> {
    let mut nss = LabNamespaces::new(run_id);
    let [cli, srv] = nss.create_all(["cli", "srv"])?;
    let (net, plen) = lab_subnet_in(run_id, 219);
    let (cli_ip, srv_ip) = (subnet_host(net, 2), subnet_host(net, 3));
    lo_up(&[&cli, &srv])?;
    let srv_fd = nss.fd(&srv)?;
    cli.run(|| {
        let nl = Nl::new()?;
        nl.add_netkit_into("eth0", "eth0", srv_fd, UNDERLAY_MTU)
            .map(drop)
    })
    .with_context(|| format!("creating the netkit pair {} ⇄ {}", cli.name, srv.name))?;
    for (ns, ip) in [(&cli, cli_ip), (&srv, srv_ip)] {
        super::address_eth0(ns, ip, plen, None)?;
    }

    let names = [("lo", Role::Link), ("eth0", Role::Link)];
    let mut devices = devices_in(&cli, &names)?;
    devices.extend(devices_in(&srv, &names)?);

    let server = SocketAddrV4::new(srv_ip, LAB_PORT);
    let mut p = NetPath::new(Driver::Netkit, run_id, cli, srv, server);
    p.devices = devices;
    p.subnet = Some((net, plen));
    p.keep = nss.into_keep();
    Ok(p)
}
