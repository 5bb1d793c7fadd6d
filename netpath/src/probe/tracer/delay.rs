//! `netpath validate`'s injected delay: the `tc_delay` program on one device's ingress holds
//! each data packet for the time set here (`netpath-ebpf/src/probes/delay.rs`).
use anyhow::{Context as _, Result};
use aya::{
    maps::{Array, MapData},
    programs::{SchedClassifier, TcAttachType},
};
use netpath_common::delay;

use super::load::add_clsact;

impl super::Tracer {
    /// Attaches the delay program to `ifname`'s ingress (loaded on first use). Must run on a
    /// thread inside the device's netns; `detach_delay` removes it (the TC counters' detach
    /// between runs leaves it).
    pub fn attach_delay_here(&mut self, ifname: &str) -> Result<()> {
        self.detach_delay();
        add_clsact(ifname)?;
        let p: &mut SchedClassifier = self
            .ebpf
            .program_mut("tc_delay")
            .context("tc_delay program missing from the object")?
            .try_into()?;
        if p.fd().is_err() {
            p.load().context("loading tc_delay")?;
        }
        let id = p
            .attach(ifname, TcAttachType::Ingress)
            .with_context(|| format!("attaching tc_delay to {ifname}"))?;
        self.delay_link = Some(id);
        Ok(())
    }

    pub fn detach_delay(&mut self) {
        if let Some(id) = self.delay_link.take()
            && let Some(p) = self.ebpf.program_mut("tc_delay")
        {
            let p: Result<&mut SchedClassifier, _> = p.try_into();
            if let Ok(p) = p {
                let _ = p.detach(id);
            }
        }
    }

    /// Holds every packet of at least `min_len` bytes for `ns` on the delay device (0: none).
    pub fn set_delay(&mut self, ns: u64, min_len: u64) -> Result<()> {
        let mut m: Array<&mut MapData, u64> =
            Array::try_from(self.ebpf.map_mut("DELAY").context("DELAY map")?)?;
        m.set(delay::MIN_LEN, min_len, 0)?;
        m.set(delay::NS, ns, 0)?;
        Ok(())
    }

    /// Packets the delay program held so far, and the ns it held them in all.
    pub fn delay_held(&self) -> Result<(u64, u64)> {
        let m: Array<&MapData, u64> =
            Array::try_from(self.ebpf.map("DELAY").context("DELAY map")?)?;
        Ok((m.get(&delay::HELD, 0)?, m.get(&delay::HELD_NS, 0)?))
    }
}
