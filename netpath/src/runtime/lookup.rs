//! `inspect` on a node, whatever runs the container: the name resolved by the node, its
//! network side read.

use anyhow::Result;

use super::InspectReport;
use super::{Node, Runtime, host_netns};
use crate::sys::netns::Netns;

/// `inspect NAME`, whatever runs it: the Docker report for Docker's, the same report read
/// from the namespaces for the others, with who runs it and its pod.
pub fn inspect(node: &mut Node, name: &str) -> Result<InspectReport> {
    let r = node.resolve(name)?;
    let host = match r.record.runtime {
        Runtime::Docker => {
            let e = node.engine()?;
            Netns::at(&e.host_netns_name, &e.host_netns)?
        }
        _ => host_netns()?,
    };
    let mut rep = super::inspect_net(&host, r.net);
    rep.record = Some(r.record);
    Ok(rep)
}
