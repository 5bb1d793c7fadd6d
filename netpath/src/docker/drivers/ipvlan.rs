//! `ipvlan` is a lab driver only: Docker has an ipvlan driver, but netpath does not build
//! it on a real engine yet (its macvlan builder is the model to follow).

use anyhow::Result;

use super::Build;
use crate::driver::LabOnly;
use crate::path::NetPath;

pub(super) fn build(_: &mut Build<'_>) -> Result<NetPath> {
    Err(LabOnly {
        driver: "ipvlan",
        why: "netpath builds it in its own lab only (`compare -d ipvlan` without --docker)",
    }
    .into())
}
