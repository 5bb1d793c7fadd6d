//! Loading helpers: function probes (fentry or kprobe per function), what this kernel has
//! (tracepoints, TCX, release), map clearing, and one-line verifier errors.
use anyhow::{Context as _, Result, anyhow, bail};
use aya::{
    Ebpf,
    maps::{Array, HashMap, MapData},
    programs::{FEntry, KProbe, Program, ProgramError, RawTracePoint, SchedClassifier, TracePoint},
};
use netpath_common::{FLIGHT_SLOTS, FilterConfig, KernelOffsets, LoadConfig, NftOffsets, config};

use super::{FnProbe, TracerOptions};
use crate::probe::backend::{
    Backend,
    probes::{self, Kind, Probe, Role},
};

/// The programs' load-time settings (`CONFIG` in the object) for these options and offsets.
pub(super) fn load_config(
    opts: &TracerOptions,
    offsets: KernelOffsets,
    nft: NftOffsets,
) -> Result<LoadConfig> {
    if !opts.flight_slots.is_power_of_two() || opts.flight_slots > FLIGHT_SLOTS {
        bail!(
            "flight table of {} slots: use a power of two up to {FLIGHT_SLOTS}",
            opts.flight_slots
        );
    }
    let f = &opts.filter;
    let filter = FilterConfig {
        on: f.port.map_or(0, |_| config::F_PORT)
            | f.addr.map_or(0, |_| config::F_ADDR)
            | f.proto.map_or(0, |_| config::F_PROTO)
            | f.netns.map_or(0, |_| config::F_NETNS)
            | f.ifindex.map_or(0, |_| config::F_IFINDEX),
        port: f.port.unwrap_or(0).to_be() as u32,
        port2: f.also_port.unwrap_or(0).to_be() as u32,
        addr2: u32::from_ne_bytes(f.also_addr.map_or([0; 4], |a| a.octets())),
        addr: u32::from_ne_bytes(f.addr.map_or([0; 4], |a| a.octets())),
        proto: f.proto.unwrap_or(0) as u32,
        netns: f.netns.unwrap_or(0),
        ifindex: f.ifindex.unwrap_or(0),
    };
    Ok(LoadConfig {
        max_gap_ns: opts.max_gap_ns,
        offsets,
        sample_every: opts.sample_every,
        flight_mask: opts.flight_slots - 1,
        trace_any: opts.trace_any as u32,
        own_every: opts.own_every,
        xmit: (opts.detail as u32 * config::XMIT_POINT) | (opts.parts as u32 * config::XMIT_QDISC),
        // Known before load (the config is fixed then): does this kernel have
        // sock:sk_data_ready?
        ready_fallback: (!tracepoint_exists("sock", "sk_data_ready")) as u32,
        filter,
        nft,
    })
}

/// Loads the backend's tracepoint, raw tracepoint and TC programs from the probe table.
/// Returns the raw tracepoints this kernel has, those it lacks, and whether journeys must be
/// bounded by syscall tracepoints (a socket tracepoint is missing).
/// What [`load_tracepoints`] found on this kernel.
pub(super) struct Tracepoints {
    /// Raw tracepoints to attach.
    pub plan: Vec<&'static Probe>,
    /// Those the kernel lacks (`raw_tp/<name>`), bounds excepted.
    pub missing: Vec<String>,
    /// TCP journeys bounded by syscall tracepoints: some socket tracepoint is missing
    /// (`tcp:tcp_sendmsg_locked` came in 6.13).
    pub syscall_bounds: bool,
    /// `sock:sock_send_length` and `sock:sock_recv_length` attach (6.3+): a datagram's
    /// journey can end at the receive that returns it.
    pub dgram_bounds: bool,
}

/// Loads every tracepoint, raw tracepoint and TC program of `backend` from the table, and
/// probes each raw tracepoint once.
pub(super) fn load_tracepoints(
    ebpf: &mut Ebpf,
    backend: Backend,
    opts: &TracerOptions,
) -> Result<Tracepoints> {
    let mut missing = Vec::new();
    let mut plan = Vec::new();
    let mut sock_missing = Vec::new();
    let raw = probes::of_kind(Kind::RawTracepoint)
        .filter(|p| p.backends.contains(&backend))
        .filter(|p| opts.detail || opts.parts || p.role != Role::Detail)
        .filter(|p| opts.trace_any || p.role != Role::Passive);
    for probe in raw {
        let p: &mut RawTracePoint = program(ebpf, probe.prog)?;
        p.load().map_err(|e| verifier_error(probe.prog, e))?;
        // Probe the tracepoint once: a kernel without it loses only that point.
        match probe_attach(p, probe.target) {
            Ok(()) => plan.push(probe),
            Err(_) if probe.role == Role::SockBound => sock_missing.push(probe.target),
            Err(None) => missing.push(format!("raw_tp/{}", probe.target)),
            Err(Some(e)) => missing.push(format!("raw_tp/{} (attach refused: {e})", probe.target)),
        }
    }
    let dgram_bounds = !sock_missing.iter().any(|t| t.starts_with("sock_"));
    if !dgram_bounds {
        plan.retain(|p| p.role != Role::SockBound);
    }
    for probe in probes::of_kind(Kind::Tracepoint).filter(|p| p.backends.contains(&backend)) {
        let p: &mut TracePoint = program(ebpf, probe.prog)?;
        p.load().map_err(|e| verifier_error(probe.prog, e))?;
    }
    for probe in probes::of(backend, Role::Counter) {
        let p: &mut SchedClassifier = program(ebpf, probe.prog)?;
        p.load().map_err(|e| verifier_error(probe.prog, e))?;
    }
    Ok(Tracepoints {
        plan,
        missing,
        syscall_bounds: !sock_missing.is_empty(),
        dgram_bounds,
    })
}

/// Attaches and detaches `target` once. A kernel that lacks the tracepoint says ENOENT
/// (`Err(None)`); any other refusal (memory, a descriptor limit) may be transient, so it is
/// tried again before the point is given up, and the reason is kept for the run's output.
fn probe_attach(p: &mut RawTracePoint, target: &str) -> Result<(), Option<String>> {
    let mut last = None;
    for attempt in 0..3 {
        match p.attach(target) {
            Ok(id) => return p.detach(id).map_err(|e| Some(e.to_string())),
            Err(e) => {
                if matches!(&e, aya::programs::ProgramError::SyscallError(s)
                    if s.io_error.raw_os_error() == Some(nix::libc::ENOENT))
                {
                    return Err(None);
                }
                last = Some(format!("{e:#}"));
                std::thread::sleep(std::time::Duration::from_millis(20 << attempt));
            }
        }
    }
    Err(last)
}

/// Program `prog` of the object as its kind `T` (`TracePoint`, `KProbe`, ...): the one lookup
/// every load, attach and detach makes; a name missing from the object is an error.
pub(crate) fn program<'a, T>(ebpf: &'a mut Ebpf, prog: &str) -> Result<&'a mut T>
where
    &'a mut T: TryFrom<&'a mut Program, Error = ProgramError>,
{
    let p = ebpf
        .program_mut(prog)
        .ok_or_else(|| anyhow!("program {prog} missing from the object"))?;
    Ok(p.try_into()?)
}

/// Whether the running kernel's release is at least `major.minor`.
pub(super) fn kernel_at_least(major: u32, minor: u32) -> bool {
    nix::sys::utsname::uname()
        .is_ok_and(|u| release_at_least(&u.release().to_string_lossy(), major, minor))
}

/// `release` as `uname -r` prints it ("6.1.0-57-cloud-amd64").
pub(super) fn release_at_least(release: &str, major: u32, minor: u32) -> bool {
    let mut parts = release
        .split(|c: char| !c.is_ascii_digit())
        .map(|n| n.parse::<u32>().unwrap_or(0));
    let v = (parts.next().unwrap_or(0), parts.next().unwrap_or(0));
    v >= (major, minor)
}

/// Loads the function probes: fentry where the function's BTF is reachable (vmlinux: aya
/// cannot load fentry against module BTF), else a kprobe, per function. A function the kernel
/// does not have (module not loaded, inlined) is reported and skipped; if none works, the
/// backend is refused.
pub(super) fn load_fn_probes(
    ebpf: &mut Ebpf,
    btf: &btf_rs::Btf,
    backend: Backend,
) -> Result<Vec<FnProbe>> {
    let want_fentry = backend == Backend::Fentry;
    let aya_btf = if want_fentry {
        Some(aya::Btf::from_sys_fs().context("kernel BTF for fentry")?)
    } else {
        None
    };
    let mut out = Vec::new();
    for (function, kprog, fprog) in probes::functions(backend) {
        // Why this function gets a kprobe on the fentry backend (said in the run's output).
        let mut why_not_fentry = String::new();
        if let Some(aya_btf) = &aya_btf
            && let Some(fprog) = fprog
        {
            if !crate::sys::btf::has_func(btf, function) {
                why_not_fentry = " (no vmlinux BTF: module function)".into();
            } else {
                let p: &mut FEntry = program(ebpf, fprog)?;
                match p.load(function, aya_btf) {
                    Ok(()) => {
                        out.push(FnProbe {
                            function,
                            mechanism: "fentry".into(),
                            prog: Some(fprog),
                            fentry: true,
                        });
                        continue;
                    }
                    Err(e) => {
                        log::warn!("fentry on {function} refused, trying kprobe: {e:?}");
                        why_not_fentry = format!(" (fentry refused: {})", first_line(&e));
                    }
                }
            }
        }
        let p: &mut KProbe = program(ebpf, kprog)?;
        if p.fd().is_err() {
            p.load().map_err(|e| verifier_error(kprog, e))?;
        }
        match p.attach(function, 0) {
            Ok(id) => {
                p.detach(id)?;
                out.push(FnProbe {
                    function,
                    mechanism: format!("kprobe{why_not_fentry}"),
                    prog: Some(kprog),
                    fentry: false,
                });
            }
            Err(e) => out.push(FnProbe {
                function,
                mechanism: format!("unavailable: {}", crate::error_chain(&e)),
                prog: None,
                fentry: false,
            }),
        }
    }
    if out.iter().all(|f| f.prog.is_none()) {
        bail!(
            "no function probe attaches on this kernel: {}",
            out.first().map(|f| f.mechanism.as_str()).unwrap_or("")
        );
    }
    Ok(out)
}

/// An error in a line: its first line and, for a verifier log, its last four (where the
/// verifier says why it stopped), shortened.
fn first_line(e: &impl std::fmt::Display) -> String {
    let s = e.to_string();
    let lines: Vec<&str> = s.lines().filter(|l| !l.trim().is_empty()).collect();
    let head: String = lines
        .first()
        .copied()
        .unwrap_or_default()
        .chars()
        .take(120)
        .collect();
    if lines.len() <= 1 {
        return head;
    }
    let tail = &lines[lines.len().saturating_sub(4).max(1)..];
    format!(
        "{head} … {}",
        tail.join(" / ").chars().take(400).collect::<String>()
    )
}

/// Whether tracefs lists `category:name` on this kernel.
pub(super) fn tracepoint_exists(category: &str, name: &str) -> bool {
    [
        "/sys/kernel/tracing/events",
        "/sys/kernel/debug/tracing/events",
    ]
    .iter()
    .any(|d| std::path::Path::new(d).join(category).join(name).exists())
}

/// TCX links (6.6+) rather than netlink TC filters.
pub(super) fn tcx() -> bool {
    aya::util::KernelVersion::current().is_ok_and(|v| v >= aya::util::KernelVersion::new(6, 6, 0))
}

/// Before 6.6 (no TCX) TC programs attach through a clsact qdisc, which must exist. Only ever
/// called for devices netpath created (lab devices, a doctor netns loopback).
pub fn add_clsact(ifname: &str) -> Result<()> {
    if aya::util::KernelVersion::current()
        .is_ok_and(|v| v >= aya::util::KernelVersion::new(6, 6, 0))
    {
        return Ok(());
    }
    match aya::programs::tc::qdisc_add_clsact(ifname) {
        Ok(()) => Ok(()),
        Err(e) if crate::error_chain(&e).contains("exists") => Ok(()),
        Err(e) => Err(anyhow!(
            "adding a clsact qdisc to {ifname}: {}",
            crate::error_chain(&e)
        )),
    }
}

/// Zeroes the first `len` entries of an array map.
pub(super) fn clear_array<V: aya::Pod + Default>(map: &mut aya::maps::Map, len: u32) -> Result<()> {
    let mut m: Array<&mut MapData, V> = Array::try_from(map)?;
    for i in 0..len {
        m.set(i, V::default(), 0)?;
    }
    Ok(())
}

/// Empties a hash map keyed by u64 (skb or device addresses).
pub(super) fn clear_u64_keys<V: aya::Pod>(map: &mut aya::maps::Map) -> Result<()> {
    let mut m: HashMap<&mut MapData, u64, V> = HashMap::try_from(map)?;
    let keys: Vec<u64> = m.keys().filter_map(|k| k.ok()).collect();
    for k in keys {
        let _ = m.remove(&k);
    }
    Ok(())
}

/// One clear line for a verifier rejection, with the kernel's log kept for `-v`.
pub(super) fn verifier_error(prog: &str, e: aya::programs::ProgramError) -> anyhow::Error {
    log::debug!("verifier output for {prog}: {e:?}");
    anyhow!(
        "the kernel's verifier rejected program {prog}: {e} (run with RUST_LOG=debug for the verifier log)"
    )
}

#[cfg(test)]
mod tests {
    use super::release_at_least;

    #[test]
    fn kernel_releases_compare_by_major_and_minor() {
        assert!(!release_at_least("6.1.0-57-cloud-amd64", 6, 7));
        assert!(release_at_least("6.18.44", 6, 7));
        assert!(release_at_least("6.7.0", 6, 7));
        assert!(release_at_least("7.0-rc1", 6, 7));
        assert!(!release_at_least("5.15.0-91-generic", 6, 7));
    }
}
