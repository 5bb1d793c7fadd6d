//! `ipvlan` driver, like two containers on a `-d ipvlan -o ipvlan_mode=l2` network.
//!
//! ```text
//!  np<id>-cli                 np<id>-node                         np<id>-srv
//!  eth0 .2 (ipvlan) ───┐                                    ┌── eth0 .3 (ipvlan)
//!                      └──── parent np<id>mp (veth, 1500) ──┘
//!                                   │
//!                            np<id>pp in np<id>-ivp (the parent's peer, up)
//!  subnet 10.218.K.0/24
//! ```
//!
//! Built like `macvlan` (see [`Children`]). The children share the parent's MAC address; in
//! L2 mode a frame from one child to another's address is handed straight to that child's
//! backlog (`ipvlan_rcv_frame` → `dev_forward_skb`): only broadcasts (ARP) cross the parent.

use anyhow::Result;

use super::macvlan::Children;
use crate::driver::Driver;
use crate::path::NetPath;

/// A kernel without ipvlan (CONFIG_IPVLAN unset) fails this with
/// [`UnknownLinkKind`](crate::sys::nl::UnknownLinkKind), which `compare` turns into a skipped
/// row.
pub(super) fn build(run_id: &str) -> Result<NetPath> {
    let children = Children {
        driver: Driver::Ipvlan,
        parent_ns: "ivp",
        subnet_b: 218,
        add: |nl, name, parent, ns| nl.add_ipvlan_into(name, parent, ns),
    };
    children.build(run_id)
}
