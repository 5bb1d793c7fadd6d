//! The devices the programs watch (`DEVS`): each one's kind and, for `serve`, where it sits
//! relative to a followed container (`netpath_common::devrole`), which decides where a journey
//! starts and which way it goes.
use anyhow::{Context as _, Result};
use aya::maps::{HashMap, MapData};
use netpath_common::{DEV_SLOTS, DevKey, DevSlot, devrole};

use super::{Tracer, load::clear_array};
use crate::path::Device;

impl Tracer {
    /// Tells the programs which devices form the path and what each is.
    pub fn set_devices(&mut self, devices: &[Device]) -> Result<()> {
        let any: Vec<(Device, u32)> = devices.iter().map(|d| (d.clone(), devrole::ANY)).collect();
        self.set_devices_with_roles(&any)
    }

    /// [`set_devices`](Self::set_devices) with each device's role (`devrole::*`).
    pub fn set_devices_with_roles(&mut self, devices: &[(Device, u32)]) -> Result<()> {
        let mut map: HashMap<&mut MapData, DevKey, u32> =
            HashMap::try_from(self.ebpf.map_mut("DEVS").context("DEVS map")?)?;
        let old: Vec<DevKey> = map.keys().filter_map(|k| k.ok()).collect();
        for k in old {
            map.remove(&k)?;
        }
        for (d, role) in devices {
            let key = DevKey {
                netns: d.netns_inum,
                ifindex: d.ifindex,
            };
            map.insert(key, d.kind as u32 | role << devrole::SHIFT, 0)?;
        }
        clear_array::<DevSlot>(
            self.ebpf.map_mut("DEVSLOTS").context("DEVSLOTS map")?,
            DEV_SLOTS,
        )?;
        Ok(())
    }
}
