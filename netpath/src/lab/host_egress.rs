//! `host-egress` driver: the node's own stack talking to the same remote host as `egress`,
//! what a `--network host` container gets; `egress` minus the container, its veth, the
//! bridge and the forwarding with its SNAT.
//!
//! ```text
//!  np<id>-node                                    np<id>-rmt
//!  client → np<id>up .1 ──────────veth────────── np<id>rm .2:11111
//!  nft table ip netpath_<id> (Docker's NAT, no rule matches this path)
//! ```
//!
//! The node carries the same nft table as `egress`'s (Docker's NAT rules for a bridge
//! subnet), so conntrack follows these packets too, as on a Docker host; none of its rules
//! rewrites them. There is no bridge: nothing on this path crosses one.

use anyhow::{Context, Result};

use super::nft::{NatSpec, apply_docker_nat};
use super::{LabNamespaces, PUBLISHED_PORT, devices_in, ifname, lab_subnet, lo_up};
use crate::driver::Driver;
use crate::path::{NetPath, Role};

pub(super) fn build(run_id: &str) -> Result<NetPath> {
    let mut nss = LabNamespaces::new(run_id);
    let node = nss.create("node")?;
    lo_up(&[&node])?;
    let spec = NatSpec {
        run_id: run_id.to_string(),
        bridge: ifname(run_id, "br")?,
        subnet: lab_subnet(run_id),
        published_port: PUBLISHED_PORT,
        target: None,
    };
    node.run(|| apply_docker_nat(&spec))
        .with_context(|| format!("installing nft rules in {}", node.name))?;
    let up = super::egress::uplink(&mut nss, &node, run_id)?;
    let mut p = NetPath::new(Driver::HostEgress, run_id, node.clone(), up.remote, up.server);
    p.devices = up.devices;
    p.devices.extend(devices_in(&node, &[("lo", Role::Link)])?);
    p.node_ns = Some(node);
    p.nft_table = Some(spec.table_name());
    p.keep = nss.into_keep();
    Ok(p)
}
