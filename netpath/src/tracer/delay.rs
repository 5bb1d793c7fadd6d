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
    /// thread inside the device's netns; the link goes with `detach_tc`.
    pub fn attach_delay_here(&mut self, ifname: &str) -> Result<()> {
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
        self.tc_links.push(("tc_delay", id));
        Ok(())
    }

    /// Holds every packet of at least `min_len` bytes for `ns` on the delay device (0: none).
    pub fn set_delay(&mut self, ns: u64, min_len: u64) -> Result<()> {
        let mut m: Array<&mut MapData, u64> =
            Array::try_from(self.ebpf.map_mut("DELAY").context("DELAY map")?)?;
        m.set(delay::MIN_LEN, min_len, 0)?;
        m.set(delay::NS, ns, 0)?;
        Ok(())
    }

    /// Packets the delay program held so far.
    pub fn delay_held(&self) -> Result<u64> {
        let m: Array<&MapData, u64> =
            Array::try_from(self.ebpf.map("DELAY").context("DELAY map")?)?;
        Ok(m.get(&delay::HELD, 0)?)
    }
}
