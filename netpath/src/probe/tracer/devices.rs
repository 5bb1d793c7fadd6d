//! The devices the programs know (`DEVS`): the watched path, where passively traced journeys
//! start, each with its kind and, for `serve`, where it sits relative to a followed container
//! (`netpath_common::devrole`, which decides where a journey starts and which way it goes);
//! and every other device a journey may cross, known for its kind alone.
use anyhow::{Context as _, Result};
use aya::maps::{HashMap, MapData};
use netpath_common::{DEV_SLOTS, DEV_WATCHED, DevKey, DevKind, DevSlot, devrole, run};

use super::{Tracer, load::clear_array};
use crate::path::Device;

impl Tracer {
    /// Tells the programs which devices form the path and what each is.
    pub fn set_devices(&mut self, devices: &[Device]) -> Result<()> {
        self.set_devices_known(devices, &[])
    }

    /// `watched`, as [`set_devices`](Self::set_devices), and besides them the devices a
    /// journey may cross beyond the watched path (the rest of the node's, in every namespace):
    /// known only for their kind, so the hops they bound are named; no journey starts there.
    pub fn set_devices_known(&mut self, watched: &[Device], known: &[Device]) -> Result<()> {
        let any: Vec<(Device, u32)> = watched.iter().map(|d| (d.clone(), devrole::ANY)).collect();
        self.set_devices_with_roles(&any, known)
    }

    /// [`set_devices_known`](Self::set_devices_known) with each watched device's role
    /// (`devrole::*`). The map is changed entry by entry (programs keep running: a device of
    /// both the old and the new set never goes missing), then the device cache is cleared if
    /// any entry changed.
    pub fn set_devices_with_roles(
        &mut self,
        watched: &[(Device, u32)],
        known: &[Device],
    ) -> Result<()> {
        let mut want: std::collections::HashMap<(u32, u32), u32> = known
            .iter()
            .filter(|d| d.kind != DevKind::Unknown)
            .map(|d| ((d.netns_inum, d.ifindex), d.kind as u32))
            .collect();
        for (d, role) in watched {
            let v = d.kind as u32 | role << devrole::SHIFT | DEV_WATCHED;
            want.insert((d.netns_inum, d.ifindex), v);
        }
        let mut map: HashMap<&mut MapData, DevKey, u32> =
            HashMap::try_from(self.ebpf.map_mut("DEVS").context("DEVS map")?)?;
        let old: Vec<(DevKey, u32)> = map.iter().filter_map(|e| e.ok()).collect();
        let mut changed = false;
        for (k, _) in &old {
            if !want.contains_key(&(k.netns, k.ifindex)) {
                map.remove(k)?;
                changed = true;
            }
        }
        for ((netns, ifindex), v) in want {
            let key = DevKey { netns, ifindex };
            if !old.iter().any(|(k, o)| *k == key && *o == v) {
                map.insert(key, v, 0)
                    .with_context(|| format!("adding device {ifindex} of netns {netns}"))?;
                changed = true;
            }
        }
        // Whether a receive point must read its device to learn if a journey starts there.
        let rx = watched.iter().any(|(d, role)| rx_entry(d.kind, *role));
        (self.tids.4.lock().unwrap()).set(run::TX_ENTRIES_ONLY, u32::from(!rx), 0)?;
        if !changed {
            return Ok(());
        }
        clear_array::<DevSlot>(
            self.ebpf.map_mut("DEVSLOTS").context("DEVSLOTS map")?,
            DEV_SLOTS,
        )?;
        Ok(())
    }
}

/// Every watched device once, with its role, in a stable order: a device several followed
/// containers share keeps a container's own or peer role over another's "between"
/// (`devrole::MIDDLE`). `serve` and `trace --container` both set their devices from this.
pub fn watched_once(devices: impl IntoIterator<Item = (Device, u32)>) -> Vec<(Device, u32)> {
    let mut v: Vec<(Device, u32)> = Vec::new();
    for (d, r) in devices {
        match v
            .iter_mut()
            .find(|(x, _)| x.netns_inum == d.netns_inum && x.ifindex == d.ifindex)
        {
            Some(e) if e.1 == devrole::MIDDLE => e.1 = r,
            Some(_) => {}
            None => v.push((d, r)),
        }
    }
    v.sort_by_key(|(d, _)| (d.netns_inum, d.ifindex));
    v
}

/// Whether a watched device of `kind` with `role` starts journeys at a receive point (the
/// kernel's `entry` in `netpath-ebpf/src/path.rs`): a device without a role, and a macvlan's
/// or ipvlan's own interface (no peer transmits what it receives).
fn rx_entry(kind: DevKind, role: u32) -> bool {
    role == devrole::ANY
        || role == devrole::OWN && matches!(kind, DevKind::Macvlan | DevKind::Ipvlan)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn receive_entries_are_where_the_kernel_starts_journeys_at_a_receive() {
        assert!(rx_entry(DevKind::Veth, devrole::ANY));
        assert!(rx_entry(DevKind::Macvlan, devrole::OWN));
        assert!(rx_entry(DevKind::Ipvlan, devrole::OWN));
        assert!(!rx_entry(DevKind::Veth, devrole::OWN));
        assert!(!rx_entry(DevKind::Veth, devrole::PEER));
        assert!(!rx_entry(DevKind::Bridge, devrole::MIDDLE));
    }
}
