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
//! Built like `macvlan` (see there: the parent is a link netpath creates, never a host
//! interface). The children share the parent's MAC address; in L2 mode a frame from one
//! child to another's address is handed straight to that child's backlog
//! (`ipvlan_rcv_frame` → `dev_forward_skb`), so unicast never crosses the parent, only
//! broadcasts (ARP) do. A kernel without ipvlan (CONFIG_IPVLAN unset) fails the build with
//! [`UnknownLinkKind`](crate::sys::nl::UnknownLinkKind), which `compare` turns into a skipped row.

use anyhow::Result;

use super::macvlan::Children;
use crate::driver::Driver;
use crate::path::NetPath;

pub(super) fn build(run_id: &str) -> Result<NetPath> {
    let children = Children {
        driver: Driver::Ipvlan,
        parent_ns: "ivp",
        subnet_b: 218,
        add: |nl, name, parent, ns| nl.add_ipvlan_into(name, parent, ns),
    };
    children.build(run_id)
}
