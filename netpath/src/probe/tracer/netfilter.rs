//! Netfilter parts: the boundary programs of `netpath-ebpf/src/probes/netfilter.rs`, loaded as
//! `BPF_PROG_TYPE_NETFILTER` and linked at the priorities `path::parts` placed, each from
//! inside its namespace (a netfilter link belongs to the namespace of the task that makes it).
//!
//! aya 0.14 has no netfilter program type, so this file does what its loader would: parse the
//! object with aya-obj, point its map references at the maps aya already created (the
//! programs share `FLIGHTS` and the load-time globals with the rest), and load and link with
//! the bpf syscall. Links are file descriptors only: closing them (drop, exit, a kill) unlinks,
//! so nothing can be left behind in a namespace.
use std::collections::HashSet;
use std::ffi::CString;
use std::os::fd::{AsFd as _, AsRawFd as _, FromRawFd as _, OwnedFd, RawFd};

use anyhow::{Context as _, Result, anyhow, bail};
use aya::maps::{Map, MapData, PerCpuArray};
use aya_obj::generated::{
    bpf_attach_type, bpf_attr, bpf_cmd, bpf_insn, bpf_prog_info, bpf_prog_type,
};
use netpath_common::{NF_BOUNDS, PartHist, QDISC_KINDS, hist::HIST_SLOTS};

use super::Tracer;
use crate::path::parts::Placement;

/// `NFPROTO_IPV4`: the lab and containers' paths are IPv4.
const NFPROTO_IPV4: u32 = 2;

/// How the run's netfilter parts are measured, said with its results (`nftchain.rs` has the
/// function probes' `VIA_CHAINS`).
pub const VIA_LINKS: &str = "netfilter links (BPF_PROG_TYPE_NETFILTER at each boundary)";

/// The loaded boundary programs and the links of the current run.
pub(super) struct NfState {
    /// Every map of the object by name, duplicated when it was loaded (the tracer takes some
    /// maps out of `Ebpf` later); the boundary programs are relocated against them.
    maps: Vec<(String, OwnedFd)>,
    progs: Vec<OwnedFd>,
    links: Vec<OwnedFd>,
    /// Loaded with `TracerOptions::parts`: the qdisc parts are timed (a load-time setting).
    qdisc: bool,
    /// Whether the chain probes can run (nf_tables' offsets read at load), or why not.
    pub(super) nft: std::result::Result<(), String>,
    /// The chain probes' links of the current run (`nftchain.rs`).
    pub(super) chain_links: Vec<(&'static str, aya::programs::kprobe::KProbeLinkId)>,
    /// How the current run's netfilter parts are measured (`None`: not linked).
    pub(super) via: Option<&'static str>,
}

impl NfState {
    /// (name, runs, run time ns) of each loaded boundary program, as `Tracer::prog_costs`
    /// has aya's (zeros unless the kernel's statistics are on).
    pub(super) fn costs(&self) -> Vec<(String, u64, u64)> {
        (self.progs.iter().enumerate())
            .filter_map(|(k, fd)| {
                let (runs, ns) = run_stats(fd.as_raw_fd()).ok()?;
                Some((format!("np_nf_{k}"), runs, ns))
            })
            .collect()
    }

    pub(super) fn new(
        ebpf: &aya::Ebpf,
        qdisc: bool,
        nft: std::result::Result<(), String>,
    ) -> Result<NfState> {
        let maps = (ebpf.maps())
            .filter_map(|(name, m)| Some((name, map_fd(m)?)))
            .map(|(name, fd)| Ok((name.to_string(), fd.try_clone_to_owned()?)))
            .collect::<Result<_>>()?;
        Ok(NfState {
            maps,
            progs: Vec::new(),
            links: Vec::new(),
            qdisc,
            nft,
            chain_links: Vec::new(),
            via: None,
        })
    }
}

/// One part's histogram for one direction, summed over CPUs.
#[derive(Clone, Debug)]
pub struct PartCounts {
    pub sum_ns: u64,
    /// Where the packets were when they entered the part (`netpath_common::part_at`; 0: none).
    pub at: u64,
    pub buckets: Vec<u64>,
}

impl Tracer {
    /// Links a boundary program at each of the placement's bounds, in its namespace. The
    /// programs are loaded on first use. A kernel without netfilter programs (before 6.4)
    /// times the placed chains with function probes instead where the backend has them
    /// (`nftchain.rs`), else says why not.
    pub fn link_parts(&mut self, placement: &Placement) -> Result<()> {
        let bounds = &placement.bounds;
        if !self.nf.qdisc {
            bail!(
                "parts asked of a tracer loaded without them (load it with TracerOptions::parts)"
            );
        }
        if bounds.len() > NF_BOUNDS {
            bail!("{} netfilter boundaries: at most {NF_BOUNDS}", bounds.len());
        }
        if self.nf.progs.is_empty() {
            if let Err(why) = check_ctx_layout() {
                return self.link_chain_probes(placement, format!("{why:#}"));
            }
            self.nf.progs = load_programs(&self.nf.maps)?;
        }
        for (ns, b) in bounds {
            let prog = self.nf.progs[b.k].as_raw_fd();
            let link = ns
                .run(|| link_create(prog, b.hook as u32, b.priority))
                .with_context(|| format!("linking a netfilter boundary in {} ({b:?})", ns.name))?;
            self.nf.links.push(link);
        }
        self.nf.via = Some(VIA_LINKS);
        Ok(())
    }

    /// Closes the run's links (the programs stay loaded for the next run).
    pub fn unlink_parts(&mut self) {
        self.nf.links.clear();
        self.unlink_chain_probes();
    }

    /// How the current run's netfilter parts are measured (`None`: none linked yet).
    pub fn parts_via(&self) -> Option<&'static str> {
        self.nf.via
    }

    /// Per boundary `k` and direction (0 request, 1 response): the part that starts there.
    pub fn read_parts(&self) -> Result<Vec<[PartCounts; 2]>> {
        self.read_hists("NF_PARTS", NF_BOUNDS as u32)
    }

    /// Per device kind (`DevKind` as a number) and direction: the transmits' qdisc parts;
    /// `at` holds the last device's `netns << 32 | ifindex`.
    pub fn read_qdisc_parts(&self) -> Result<Vec<[PartCounts; 2]>> {
        self.read_hists("QDISC_PARTS", QDISC_KINDS)
    }

    /// `n` pairs of per-CPU part histograms of map `name`, summed over CPUs.
    fn read_hists(&self, name: &str, n: u32) -> Result<Vec<[PartCounts; 2]>> {
        let data = self.ebpf.map(name).with_context(|| format!("map {name}"))?;
        let map: PerCpuArray<&MapData, PartHist> = PerCpuArray::try_from(data)?;
        let read = |i: u32| -> Result<PartCounts> {
            let mut c = PartCounts {
                sum_ns: 0,
                at: 0,
                buckets: vec![0; HIST_SLOTS],
            };
            for h in map.get(&i, 0)?.iter() {
                c.sum_ns += h.sum_ns;
                c.at = c.at.max(h.at);
                (c.buckets.iter_mut().zip(h.buckets)).for_each(|(a, b)| *a += b);
            }
            Ok(c)
        };
        (0..n)
            .map(|k| Ok([read(k * 2)?, read(k * 2 + 1)?]))
            .collect()
    }

    /// Zeroes the parts' histograms, netfilter and qdisc (before a run).
    pub fn clear_parts(&mut self) -> Result<()> {
        let zero = PartHist {
            sum_ns: 0,
            at: 0,
            buckets: [0; HIST_SLOTS],
        };
        let cpus = aya::util::nr_cpus().map_err(|(_, e)| e)?;
        for (name, n) in [("NF_PARTS", NF_BOUNDS as u32), ("QDISC_PARTS", QDISC_KINDS)] {
            let data = self
                .ebpf
                .map_mut(name)
                .with_context(|| format!("map {name}"))?;
            let mut map: PerCpuArray<&mut MapData, PartHist> = PerCpuArray::try_from(data)?;
            for i in 0..n * 2 {
                map.set(i, aya::maps::PerCpuValues::try_from(vec![zero; cpus])?, 0)?;
            }
        }
        Ok(())
    }
}

/// Loads the `NF_BOUNDS` boundary programs, relocated against the maps of `ebpf`.
fn load_programs(fds: &[(String, OwnedFd)]) -> Result<Vec<OwnedFd>> {
    check_ctx_layout()?;
    let mut obj = aya_obj::Object::parse(super::object()?).context("parsing the eBPF object")?;
    let maps = obj.maps.clone();
    // Every map the object defines must resolve: one left out would be looked up by its
    // section instead, which for the `maps` section is any map in it.
    let fds = maps
        .iter()
        .map(|(name, m)| {
            let fd = fds
                .iter()
                .find(|(n, _)| n == name)
                .map(|(_, fd)| fd.as_raw_fd());
            Ok((
                name.as_str(),
                fd.with_context(|| format!("map {name} not created"))?,
                m,
            ))
        })
        .collect::<Result<Vec<(&str, RawFd, &aya_obj::Map)>>>()?;
    let text: HashSet<usize> = obj.functions.keys().map(|(s, _)| *s).collect();
    obj.relocate_maps(fds.into_iter(), &text)
        .map_err(|e| anyhow!("relocating the netfilter programs: {e}"))?;
    obj.relocate_calls(&text)
        .map_err(|e| anyhow!("relocating the netfilter programs' calls: {e}"))?;
    (0..NF_BOUNDS)
        .map(|k| {
            let name = format!("np_nf_{k}");
            let p = obj
                .programs
                .get(&name)
                .with_context(|| format!("{name} missing from the object"))?;
            let f = &obj.functions[&p.function_key()];
            prog_load(&name, &f.instructions)
        })
        .collect()
}

/// The boundary programs read `bpf_nf_ctx.skb` at the offset the verifier checks; this kernel's
/// BTF must agree (the struct is the kernel's, not a UAPI one).
pub(super) fn check_ctx_layout() -> Result<()> {
    let btf = crate::sys::btf::load_vmlinux()?;
    let off = crate::sys::btf::offset_of(&btf, "bpf_nf_ctx", "skb")
        .context("netfilter programs need kernel 6.4 or later (no struct bpf_nf_ctx here)")?;
    if off != 8 {
        bail!(
            "this kernel's struct bpf_nf_ctx has skb at {off}, the programs read 8: no netfilter parts"
        );
    }
    Ok(())
}

/// The descriptor of a map aya created.
fn map_fd(m: &Map) -> Option<std::os::fd::BorrowedFd<'_>> {
    let d: &MapData = match m {
        Map::Array(d)
        | Map::HashMap(d)
        | Map::PerCpuArray(d)
        | Map::PerCpuHashMap(d)
        | Map::RingBuf(d)
        | Map::LruHashMap(d)
        | Map::Unsupported(d) => d,
        _ => return None,
    };
    Some(d.fd().as_fd())
}

/// A program's run count and run time (`BPF_OBJ_GET_INFO_BY_FD`).
fn run_stats(prog: RawFd) -> std::io::Result<(u64, u64)> {
    // SAFETY: all-zero is a valid bpf_prog_info and bpf_attr (plain integers).
    let mut info: bpf_prog_info = unsafe { std::mem::zeroed() };
    let mut attr: bpf_attr = unsafe { std::mem::zeroed() };
    let i = unsafe { &mut attr.info };
    i.bpf_fd = prog as u32;
    i.info_len = std::mem::size_of::<bpf_prog_info>() as u32;
    i.info = &mut info as *mut bpf_prog_info as u64;
    // SAFETY: as in `bpf`; the kernel writes at most `info_len` bytes to `info`.
    let r = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            bpf_cmd::BPF_OBJ_GET_INFO_BY_FD as libc::c_long,
            &mut attr as *mut bpf_attr,
            std::mem::size_of::<bpf_attr>(),
        )
    };
    if r < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok((info.run_cnt, info.run_time_ns))
}

fn bpf(cmd: bpf_cmd, attr: &mut bpf_attr) -> std::io::Result<OwnedFd> {
    // SAFETY: `attr` is a zero-initialised bpf_attr with the command's fields set; the kernel
    // reads `size_of::<bpf_attr>()` bytes of it.
    let r = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            cmd as libc::c_long,
            attr as *mut bpf_attr,
            std::mem::size_of::<bpf_attr>(),
        )
    };
    if r < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: a successful BPF_PROG_LOAD / BPF_LINK_CREATE returns a new descriptor we own.
    Ok(unsafe { OwnedFd::from_raw_fd(r as RawFd) })
}

fn prog_load(name: &str, insns: &[bpf_insn]) -> Result<OwnedFd> {
    let license = CString::new("GPL")?;
    let mut log = vec![0u8; 1 << 20];
    // SAFETY: all-zero is a valid bpf_attr (a union of plain integer structs).
    let mut attr: bpf_attr = unsafe { std::mem::zeroed() };
    let u = unsafe { &mut attr.__bindgen_anon_3 };
    u.prog_type = bpf_prog_type::BPF_PROG_TYPE_NETFILTER as u32;
    u.expected_attach_type = bpf_attach_type::BPF_NETFILTER as u32;
    u.insns = insns.as_ptr() as u64;
    u.insn_cnt = insns.len() as u32;
    u.license = license.as_ptr() as u64;
    u.log_level = 1;
    u.log_buf = log.as_mut_ptr() as u64;
    u.log_size = log.len() as u32;
    for (d, s) in u.prog_name.iter_mut().zip(name.bytes().take(15)) {
        *d = s as libc::c_char;
    }
    bpf(bpf_cmd::BPF_PROG_LOAD, &mut attr).map_err(|e| {
        let log = String::from_utf8_lossy(&log);
        let last = log
            .lines()
            .rev()
            .find(|l| !l.trim().is_empty())
            .unwrap_or("");
        anyhow!("the verifier rejected {name} ({e}): {last}")
    })
}

/// Links `prog` on IPv4 hook `hooknum` at `priority` in the calling thread's namespace.
fn link_create(prog: RawFd, hooknum: u32, priority: i32) -> Result<OwnedFd> {
    // SAFETY: as in `prog_load`.
    let mut attr: bpf_attr = unsafe { std::mem::zeroed() };
    let l = unsafe { &mut attr.link_create };
    l.__bindgen_anon_1.prog_fd = prog as u32;
    l.attach_type = bpf_attach_type::BPF_NETFILTER as u32;
    let nf = unsafe { &mut l.__bindgen_anon_3.netfilter };
    nf.pf = NFPROTO_IPV4;
    nf.hooknum = hooknum;
    nf.priority = priority;
    Ok(bpf(bpf_cmd::BPF_LINK_CREATE, &mut attr)?)
}
