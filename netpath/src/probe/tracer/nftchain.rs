//! Chain probes: the netfilter parts where the kernel has no netfilter programs (before 6.4)
//! but the backend has function probes. A kprobe and a kretprobe on `nft_do_chain` time each
//! base chain of the placement on followed packets (`netpath-ebpf/src/probes/nftchain.rs`);
//! the chain is known in the kernel by its namespace, hook and names, which this file writes
//! into `NFT_CHAIN_PARTS` with the boundary number of the part that holds it, so the time
//! lands in the same `NF_PARTS` histograms the boundary programs fill.
//!
//! What they cannot see: conntrack and other hook entries that are not nf_tables chains (a
//! `conntrack` part stays empty), and legacy iptables (`ipt_do_table`).
use anyhow::{Context as _, Result, bail};
use aya::maps::{HashMap, MapData};
use aya::programs::KProbe;
use netpath_common::{NftChainKey, NftOffsets, config::NFT_NAME_BYTES};

use super::{Tracer, load::program};
use crate::path::parts::Placement;
use crate::probe::backend::Backend;

/// The functions the chain probes time: (function, entry kprobe, exit kretprobe, the slot
/// number that keys a whole hook entry in `NFT_CHAIN_PARTS`, 0 for chains by name).
const PROBES: [(&str, &str, &str, u8); 3] = [
    ("nft_do_chain", "kp_nft_chain_in", "kp_nft_chain_out", 0),
    ("nf_conntrack_in", "kp_nf_ct_in", "kp_nf_ct_out", 1),
    ("nf_nat_inet_fn", "kp_nf_nat_in", "kp_nf_nat_out", 2),
];

/// How the run's netfilter parts are measured, said with its results (`netfilter.rs` has the
/// links' `VIA_LINKS`).
pub const VIA_CHAINS: &str = "function probes (kprobe + kretprobe on nft_do_chain, \
     nf_conntrack_in, nf_nat_inet_fn: those calls only, not the whole hook between them)";

impl Tracer {
    /// Times the placed chains with the chain probes, the kernel having no netfilter links
    /// (`why`). Refused in one line where the backend has no function probes or nf_tables'
    /// offsets could not be read.
    pub(super) fn link_chain_probes(&mut self, placement: &Placement, why: String) -> Result<()> {
        if self.backend == Backend::Tracepoint {
            bail!(
                "{why}, and the tracepoint backend has no function probes to time the chains \
                 instead: --parts here needs --backend kprobe (or fentry), or a 6.4+ kernel"
            );
        }
        if let Err(e) = &self.nf.nft {
            bail!("{why}, and the chain probes cannot read nf_tables' structs: {e}");
        }
        self.fill_chain_keys(placement)?;
        let wants = |kind: u8| match kind {
            0 => true,
            1 => placement.parts.values().any(|p| p.name == "conntrack"),
            _ => !placement.nat.is_empty(),
        };
        for (function, entry, exit, kind) in PROBES {
            if !wants(kind) {
                continue;
            }
            for prog in [entry, exit] {
                self.attach_kprobe(prog, function)?;
            }
        }
        self.nf.via = Some(VIA_CHAINS);
        Ok(())
    }

    fn attach_kprobe(&mut self, prog: &'static str, function: &str) -> Result<()> {
        let p: &mut KProbe = program(&mut self.ebpf, prog)?;
        if p.fd().is_err() {
            p.load().map_err(|e| super::load::verifier_error(prog, e))?;
        }
        let id = (p.attach(function, 0))
            .with_context(|| format!("attaching {prog} to {function} (module loaded?)"))?;
        self.nf.chain_links.push((prog, id));
        Ok(())
    }

    /// Writes each placed chain's key → its part's boundary; a part of several chains (one
    /// priority) gets each of them.
    fn fill_chain_keys(&mut self, placement: &Placement) -> Result<()> {
        let data = self
            .ebpf
            .map_mut("NFT_CHAIN_PARTS")
            .context("map NFT_CHAIN_PARTS")?;
        let mut map: HashMap<&mut MapData, NftChainKey, u32> = HashMap::try_from(data)?;
        let old: Vec<NftChainKey> = map.keys().filter_map(|k| k.ok()).collect();
        for k in old {
            map.remove(&k)?;
        }
        for (ns, b) in &placement.bounds {
            let Some(part) = placement.parts.get(&b.k) else {
                continue;
            };
            let key = |table, chain| NftChainKey {
                netns: ns.inum,
                hook: b.hook as u32,
                table,
                chain,
            };
            // Conntrack's and NAT's entries by their slot (see `PROBES`); a NAT part's own
            // chain calls run inside NAT's entry, which the kernel side leaves them to.
            let entry = |slot: u8| {
                let mut t = [0; NFT_NAME_BYTES];
                (t[0], t[1]) = (0xff, slot);
                key(t, [0; NFT_NAME_BYTES])
            };
            if part.name == "conntrack" {
                map.insert(entry(1), b.k as u32, 0)?;
                continue;
            }
            if placement.nat.contains(&b.k) {
                map.insert(entry(2), b.k as u32, 0)?;
            }
            for (table, chain) in part.name.split('+').filter_map(|c| c.split_once('/')) {
                map.insert(key(name_bytes(table), name_bytes(chain)), b.k as u32, 0)?;
            }
        }
        Ok(())
    }

    /// Detaches the chain probes (the end of a run).
    pub(super) fn unlink_chain_probes(&mut self) {
        for (prog, id) in std::mem::take(&mut self.nf.chain_links) {
            if let Ok(p) = program::<KProbe>(&mut self.ebpf, prog)
                && let Err(e) = p.detach(id)
            {
                log::warn!("detaching {prog}: {e}");
            }
        }
    }
}

/// nf_tables' offsets for the chain probes, read at load (they are load-time settings) when
/// they may be used: `--parts` with function probes on a kernel without netfilter programs.
/// Otherwise, or if they cannot be read, why not. `links`: the kernel has netfilter programs.
pub(super) fn nft_offsets(
    btf: &btf_rs::Btf,
    backend: Backend,
    opts: &super::TracerOptions,
    links: bool,
) -> std::result::Result<NftOffsets, String> {
    if !opts.parts || backend == Backend::Tracepoint || links {
        return Err("not needed".into());
    }
    crate::sys::btf::nft_offsets(btf).map_err(|e| format!("{e:#}"))
}

/// A name as the kernel probe reads it: at most `NFT_NAME_BYTES - 1` bytes, NUL-filled.
pub(crate) fn name_bytes(name: &str) -> [u8; NFT_NAME_BYTES] {
    let mut out = [0; NFT_NAME_BYTES];
    for (d, s) in out.iter_mut().zip(name.bytes().take(NFT_NAME_BYTES - 1)) {
        *d = s;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_cut_and_nul_filled_as_the_kernel_reads_them() {
        let n = name_bytes("filter");
        assert_eq!(&n[..7], b"filter\0");
        assert!(n[6..].iter().all(|&b| b == 0));
        let long = name_bytes(&"x".repeat(40));
        assert_eq!(long[NFT_NAME_BYTES - 1], 0);
        assert!(long[..NFT_NAME_BYTES - 1].iter().all(|&b| b == b'x'));
    }
}
