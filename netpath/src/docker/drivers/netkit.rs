//! `netkit` is a lab driver only: Docker has no netkit network driver (Cilium creates
//! netkit pairs itself).

use anyhow::Result;

use super::Build;
use crate::driver::LabOnly;
use crate::path::NetPath;

pub(super) fn build(_: &mut Build<'_>) -> Result<NetPath> {
    Err(LabOnly {
        driver: "netkit",
        why: "Docker has no netkit network driver (`compare -d netkit` without --docker)",
    }
    .into())
}
