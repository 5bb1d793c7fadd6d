//! Loads the embedded eBPF object, attaches the chosen backend, and reads what the programs
//! aggregated. One `Tracer` per process; probes can be detached and re-attached so the same run
//! measures with and without them.
use std::sync::Mutex;

mod delay;
mod devices;
mod floor;
mod load;
mod netfilter;
mod nftchain;
mod own;
mod proto;
mod samples;
mod tids;

pub use devices::watched_once;
pub use load::add_clsact;
pub(crate) use load::program;
use load::{
    clear_array, clear_u64_keys, kernel_at_least, load_config, load_fn_probes, load_tracepoints,
    tcx,
};
pub use netfilter::PartCounts;
pub use own::RunCost;
pub use tids::TidControl;

use anyhow::{Context as _, Result, bail};
use aya::{
    Ebpf, EbpfLoader,
    maps::{Array, HashMap, MapData, PerCpuArray, PerCpuHashMap, PerCpuValues, RingBuf},
    programs::{
        FEntry, KProbe, RawTracePoint, SchedClassifier, TcAttachType, TracePoint,
        raw_trace_point::RawTracePointLinkId, tc::SchedClassifierLinkId,
        trace_point::TracePointLinkId,
    },
    util::nr_cpus,
};
use netpath_common::{
    DEV_SLOTS, DevSlot, DropRecord, FLIGHT_SLOTS, FlightSlot, HopHist, HopStat, KernelOffsets,
    NSLOTS, SOCK_SLOTS, SkbState, SockSlot, TASK_WORDS, counter, hist::NBUCKETS,
};

use crate::probe::backend::{
    Backend,
    probes::{self, Kind, Probe, Role},
};

/// The eBPF object built by build.rs (empty when it was built without bpf-linker).
static OBJECT: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/netpath"));

pub fn object() -> Result<&'static [u8]> {
    if OBJECT.is_empty() {
        bail!(
            "this netpath was built without its eBPF programs (no bpf-linker): run `cargo xtask setup`, then rebuild"
        );
    }
    Ok(OBJECT)
}

#[derive(Clone, Debug)]
pub struct TracerOptions {
    pub sample_every: u32,
    pub max_gap_ns: u64,
    /// Ask the kernel to account run time per program (BPF_ENABLE_STATS) for cost reports.
    pub prog_stats: bool,
    /// Attach the detail points too (`net_dev_start_xmit`), for per-packet timelines.
    pub detail: bool,
    /// Kernel-side filter on the packets followed (`netpath trace`).
    pub filter: Filter,
    /// Follow any packet first seen on a watched device, not only the harness's sends
    /// (tracing traffic netpath does not generate; such journeys end at the socket wakeup).
    pub trace_any: bool,
    /// Entries of the flight table in use (a power of two, at most `FLIGHT_SLOTS`): tests
    /// force a tiny table to see collisions counted.
    pub flight_slots: u32,
    /// What the harness sends. Datagrams (`udp`, `icmp`): no socket tracepoint marks the start
    /// of a UDP or ping send, so `syscalls:sys_enter_sendto` does (its cost, every syscall on
    /// the slow path, shows in the probe effect), and receives find their journey by the
    /// address they arrived on; `icmp`: the kernel's echo reply continues the round trip.
    pub proto: crate::harness::Proto,
    /// Measure netpath's own time inside the hops along one journey in N (a run count per
    /// program, a second clock read per point of those journeys), so the hop tables can take
    /// it out. 0: not at all.
    pub own_every: u32,
    /// Some thread of netpath's own is followed (the harness's, a relay). `serve` follows none:
    /// the programs only traced threads use (scheduler, socket-bound and syscall tracepoints,
    /// `probes::passive_needs`) then stay detached, so the rest of the machine does not pay
    /// for them.
    pub threads: bool,
    /// `--parts`: time each transmit's qdisc too (`start_xmit` attached, as for `detail`).
    pub parts: bool,
    /// `serve`'s light profile: the hooks that name no hop stay detached
    /// (`probes::light_needs`), so every packet of the machine runs two programs fewer; the
    /// packets' NET_RX softirq runs are then not counted.
    pub light: bool,
}

/// Which packets to follow; checked in the kernel when a packet is first seen.
#[derive(Clone, Debug, Default)]
pub struct Filter {
    pub port: Option<u16>,
    /// With `port`: a second port that also passes (a published port's container side), for
    /// packets whose other end is `also_addr` (the container network's gateway, where
    /// docker-proxy or the NAT reaches the container from).
    pub also_port: Option<u16>,
    pub also_addr: Option<std::net::Ipv4Addr>,
    pub addr: Option<std::net::Ipv4Addr>,
    pub proto: Option<u8>,
    /// Netns inode and ifindex of the device where the packet is first seen.
    pub netns: Option<u32>,
    pub ifindex: Option<u32>,
}

impl Default for TracerOptions {
    fn default() -> Self {
        TracerOptions {
            sample_every: 64,
            max_gap_ns: 100_000_000,
            prog_stats: false,
            detail: false,
            filter: Filter::default(),
            trace_any: false,
            flight_slots: FLIGHT_SLOTS,
            proto: crate::harness::Proto::Tcp,
            // Diagnostic for probe-cost work: NETPATH_OWN_EVERY=0 measures without it.
            own_every: std::env::var("NETPATH_OWN_EVERY")
                .ok()
                .and_then(|v| v.parse().ok())
                .unwrap_or(8),
            threads: true,
            parts: false,
            light: false,
        }
    }
}

enum Link {
    Raw(&'static str, RawTracePointLinkId),
    Tp(&'static str, TracePointLinkId),
    KProbe(&'static str, aya::programs::kprobe::KProbeLinkId),
    FEntry(&'static str, aya::programs::fentry::FEntryLinkId),
}

/// How one kernel function is probed in this run.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
pub struct FnProbe {
    pub function: &'static str,
    /// "fentry", "kprobe", or why neither works.
    pub mechanism: String,
    #[serde(skip)]
    pub(super) prog: Option<&'static str>,
    #[serde(skip)]
    pub(super) fentry: bool,
}

pub struct Tracer {
    ebpf: Ebpf,
    pub backend: Backend,
    pub offsets: KernelOffsets,
    links: Vec<Link>,
    tc_links: Vec<(&'static str, SchedClassifierLinkId)>,
    /// `validate`'s injected delay (`delay.rs`).
    delay_link: Option<SchedClassifierLinkId>,
    pub tids: std::sync::Arc<TidControl>,
    samples: samples::SampleDrain,
    drops: RingBuf<MapData>,
    /// Tracepoints this kernel lacks (e.g. `sk_data_ready` before 6.7): the hop they bound merges
    /// into its neighbour.
    pub missing: Vec<String>,
    /// Raw tracepoints this kernel has, to attach (floor and detail ones included).
    raw_plan: Vec<&'static Probe>,
    /// Whether TCP journeys are bounded by syscall tracepoints (kernels without
    /// `tcp:tcp_sendmsg_locked`, before 6.13) instead of socket ones.
    pub syscall_bounds: bool,
    /// Whether `sock:sock_send_length` and `sock:sock_recv_length` attach (6.3+): what a
    /// datagram's journey needs to end at the receive that returns it, whatever TCP uses.
    pub dgram_bounds: bool,
    /// Datagram sends start at `sys_enter_sendto` (see `TracerOptions::proto`); set per run by
    /// `set_proto`.
    dgram: bool,
    /// `enum skb_drop_reason` of this kernel, value → name.
    pub drop_reasons: std::collections::BTreeMap<u32, String>,
    /// Function probes of the kprobe/fentry backends and how each is attached.
    pub fn_probes: Vec<FnProbe>,
    /// Losses this kernel does not count, so `probe_misses` can read low (said with results).
    pub uncounted: Vec<&'static str>,
    _stats: Option<std::os::fd::OwnedFd>,
    /// The programs' summed `recursion_misses` at the last reset.
    misses_base: u64,
    /// The calibrated cost of one program run (`own.rs`), charged per run counted in a hop.
    pub run_cost: RunCost,
    /// `TracerOptions::threads`, and whether `sock:sk_data_ready` ends passive journeys.
    threads: bool,
    ready: bool,
    /// `TracerOptions::light`.
    light: bool,
    /// Netfilter boundary programs and the run's links (`netfilter.rs`).
    nf: netfilter::NfState,
}

/// Everything the programs aggregated, summed over CPUs.
#[derive(Clone, Debug, Default)]
pub struct Snapshot {
    pub stats: Vec<HopStat>,
    /// Per slot: bucket counts (empty when the slot has no events).
    pub hist: Vec<Vec<u64>>,
    pub counters: Vec<u64>,
    pub passes: Vec<u64>,
    /// (ifindex, egress) → (packets, bytes)
    pub tc: Vec<((u32, bool), (u64, u64))>,
}

impl Snapshot {
    /// Hop records of every slot but the client's gap (`CLIENT_GAP`), which only carries
    /// netpath's own time for the check.
    pub fn hop_events(&self) -> u64 {
        let (dir, hop) = netpath_common::CLIENT_GAP;
        let gap = netpath_common::hop::slot(dir as u32, hop as u32) as usize;
        (self.stats.iter().enumerate())
            .filter(|(i, _)| *i != gap)
            .map(|(_, s)| s.count)
            .sum()
    }
}

impl Tracer {
    pub fn load(backend: Backend, opts: &TracerOptions) -> Result<Tracer> {
        crate::sys::ensure_tracefs();
        let btf = crate::sys::btf::load_vmlinux()?;
        let offsets = crate::sys::btf::kernel_offsets(&btf)?;
        let links = netfilter::check_ctx_layout().is_ok();
        let nft = nftchain::nft_offsets(&btf, backend, opts, links);
        let config = load_config(opts, offsets, *nft.as_ref().unwrap_or(&Default::default()))?;
        let ready = config.ready_fallback == 0;
        let mut loader = EbpfLoader::new();
        loader.override_global(netpath_common::config::GLOBAL, &config, true);
        let drop_reasons = crate::sys::btf::enum_names(&btf, "skb_drop_reason", "SKB_DROP_REASON_");
        let mut ebpf = loader
            .load(object()?)
            .context("loading netpath's eBPF object")?;
        // Before the tracer takes maps out of `ebpf`.
        let nf = netfilter::NfState::new(&ebpf, opts.parts, nft.map(|_| ()))?;
        let tps = load_tracepoints(&mut ebpf, backend, opts)?;
        let (raw_plan, missing) = (tps.plan, tps.missing);
        let (syscall_bounds, dgram_bounds) = (tps.syscall_bounds, tps.dgram_bounds);
        let fn_probes = match backend {
            Backend::Tracepoint => Vec::new(),
            Backend::Kprobe | Backend::Fentry => load_fn_probes(&mut ebpf, &btf, backend)?,
        };
        let tids = Array::try_from(ebpf.take_map("TIDS").context("TIDS map")?)?;
        let relay_pids = HashMap::try_from(ebpf.take_map("RELAY_PIDS").context("RELAY_PIDS map")?)?;
        let samples = RingBuf::try_from(ebpf.take_map("SAMPLES").context("SAMPLES map")?)?;
        let bits = tids::Bitmaps {
            tids: Array::try_from(ebpf.take_map("TID_BITS").context("TID_BITS map")?)?,
            relays: Array::try_from(ebpf.take_map("RELAY_BITS").context("RELAY_BITS map")?)?,
        };
        let drops = RingBuf::try_from(ebpf.take_map("DROPS").context("DROPS map")?)?;
        let run = Array::try_from(ebpf.take_map("RUN").context("RUN map")?)?;
        let mut t = Tracer {
            ebpf,
            backend,
            offsets,
            links: Vec::new(),
            tc_links: Vec::new(),
            delay_link: None,
            tids: std::sync::Arc::new(TidControl(
                Mutex::new(tids),
                Mutex::new(Vec::new()),
                Mutex::new(relay_pids),
                Mutex::new(bits),
                Mutex::new(run),
            )),
            samples: samples::SampleDrain::start(samples),
            drops,
            missing,
            raw_plan,
            syscall_bounds,
            dgram_bounds,
            dgram: opts.proto != crate::harness::Proto::Tcp,
            drop_reasons,
            fn_probes,
            uncounted: if backend == Backend::Kprobe && !kernel_at_least(6, 7) {
                vec![
                    "kprobe runs skipped while another BPF program ran on the CPU (counted from 6.7)",
                ]
            } else {
                Vec::new()
            },
            misses_base: 0,
            run_cost: RunCost::default(),
            threads: opts.threads,
            ready,
            light: opts.light,
            nf,
            _stats: if opts.prog_stats {
                Some(aya::sys::enable_stats(aya::sys::Stats::RunTime)?)
            } else {
                None
            },
        };
        t.set_proto(opts.proto)?;
        // Before any device is watched, so no calibration datagram is followed.
        if opts.own_every != 0 {
            t.calibrate_run_cost()
                .context("calibrating the cost of a program run")?;
        }
        Ok(t)
    }

    pub fn attached(&self) -> bool {
        !self.links.is_empty()
    }

    pub fn attach(&mut self) -> Result<()> {
        if self.attached() {
            return Ok(());
        }
        if std::env::var_os(crate::probe::EMPTY_PROGRAMS_ENV).is_some() {
            return self.attach_empty();
        }
        // Diagnostic for probe-effect work: NETPATH_SKIP=prog1,prog2 leaves programs detached.
        let skip = std::env::var("NETPATH_SKIP").unwrap_or_default();
        let skipped = |p: &str| skip.split(',').any(|s| s == p);
        let tcp_syscalls = self.tcp_syscalls();
        for p in self.raw_attach_plan() {
            if !skipped(p.prog) {
                self.attach_raw(p)?;
            }
        }
        for p in probes::of_kind(Kind::Tracepoint) {
            let bound = matches!(p.role, Role::SyscallBound | Role::SyscallSend);
            let send_start = p.role == Role::SyscallSend && self.dgram;
            if !(bound && tcp_syscalls || send_start)
                || !p.backends.contains(&self.backend)
                || skipped(p.prog)
                || !self.threads
            {
                continue;
            }
            let (cat, name) = p.tracepoint();
            let tp: &mut TracePoint = program(&mut self.ebpf, p.prog)?;
            let id = tp
                .attach(cat, name)
                .with_context(|| format!("attaching tracepoint {cat}:{name}"))?;
            self.links.push(Link::Tp(p.prog, id));
        }
        for f in self.fn_probes.clone() {
            let Some(prog) = f.prog else { continue };
            if skipped(prog) {
                continue;
            }
            if f.fentry {
                let p: &mut FEntry = program(&mut self.ebpf, prog)?;
                let id = p
                    .attach()
                    .with_context(|| format!("attaching fentry {}", f.function))?;
                self.links.push(Link::FEntry(prog, id));
            } else {
                let p: &mut KProbe = program(&mut self.ebpf, prog)?;
                let id = p
                    .attach(f.function, 0)
                    .with_context(|| format!("attaching kprobe {}", f.function))?;
                self.links.push(Link::KProbe(prog, id));
            }
        }
        Ok(())
    }

    pub fn detach(&mut self) -> Result<()> {
        let ebpf = &mut self.ebpf;
        for link in self.links.drain(..) {
            match link {
                Link::Raw(prog, id) => program::<RawTracePoint>(ebpf, prog)?.detach(id)?,
                Link::Tp(prog, id) => program::<TracePoint>(ebpf, prog)?.detach(id)?,
                Link::KProbe(prog, id) => program::<KProbe>(ebpf, prog)?.detach(id)?,
                Link::FEntry(prog, id) => program::<FEntry>(ebpf, prog)?.detach(id)?,
            }
        }
        Ok(())
    }

    /// Attaches the TC counters to one device. Must run on a thread inside the device's netns
    /// (the interface name and TCX link resolve there).
    pub fn attach_tc_here(&mut self, ifname: &str) -> Result<()> {
        add_clsact(ifname)?;
        for probe in probes::of(self.backend, Role::Counter) {
            let (prog, ty) = match probe.target {
                "egress" => (probe.prog, TcAttachType::Egress),
                _ => (probe.prog, TcAttachType::Ingress),
            };
            let p: &mut SchedClassifier = program(&mut self.ebpf, prog)?;
            let id = if tcx() {
                p.attach(ifname, ty)
            } else {
                // Netlink TC: links are told apart by (ifindex, priority, handle), and lab
                // devices in different namespaces share ifindexes: give each its own priority.
                let priority = 100 + self.tc_links.len() as u16;
                p.attach_with_options(
                    ifname,
                    ty,
                    aya::programs::tc::TcAttachOptions::Netlink(aya::programs::tc::NlOptions {
                        priority,
                        ..Default::default()
                    }),
                )
            }
            .with_context(|| format!("attaching TC {prog} to {ifname}"))?;
            self.tc_links.push((prog, id));
        }
        Ok(())
    }

    /// Forgets TC links whose devices are about to disappear with their netns.
    pub fn detach_tc(&mut self) {
        for (prog, id) in self.tc_links.drain(..) {
            if let Some(p) = self.ebpf.program_mut(prog) {
                let p: Result<&mut SchedClassifier, _> = p.try_into();
                if let Ok(p) = p {
                    let _ = p.detach(id);
                }
            }
        }
    }

    /// Zeroes every aggregate and forgets in-flight state, so a run starts clean.
    pub fn reset(&mut self) -> Result<()> {
        let n = nr_cpus().map_err(|(_, e)| e)?;
        {
            let mut hops: PerCpuArray<&mut MapData, HopHist> =
                PerCpuArray::try_from(self.ebpf.map_mut("HOPS").unwrap())?;
            let zero = HopHist {
                sum_ns: 0,
                own_ns: 0,
                own_runs: 0,
                own_count: 0,
                buckets: [0; netpath_common::hist::HIST_SLOTS],
            };
            for i in 0..NSLOTS as u32 {
                hops.set(i, PerCpuValues::try_from(vec![zero; n])?, 0)?;
            }
        }
        for (name, len) in [("COUNTERS", counter::COUNT), ("PASSES", 3 * 64)] {
            let mut m: PerCpuArray<&mut MapData, u64> =
                PerCpuArray::try_from(self.ebpf.map_mut(name).unwrap())?;
            for i in 0..len {
                m.set(i, PerCpuValues::try_from(vec![0u64; n])?, 0)?;
            }
        }
        {
            clear_array::<FlightSlot>(self.ebpf.map_mut("FLIGHTS").unwrap(), FLIGHT_SLOTS)?;
            clear_u64_keys::<SkbState>(self.ebpf.map_mut("TIMELINES").unwrap())?;
            clear_array::<DevSlot>(self.ebpf.map_mut("DEVSLOTS").unwrap(), DEV_SLOTS)?;
            clear_array::<SockSlot>(self.ebpf.map_mut("SOCKQ").unwrap(), SOCK_SLOTS)?;
            clear_array::<u64>(self.ebpf.map_mut("TASK_BITS").unwrap(), TASK_WORDS)?;
        }
        {
            let mut tc: PerCpuHashMap<&mut MapData, u64, [u64; 2]> =
                PerCpuHashMap::try_from(self.ebpf.map_mut("TC_STATS").unwrap())?;
            let keys: Vec<u64> = tc.keys().filter_map(|k| k.ok()).collect();
            for k in keys {
                let _ = tc.remove(&k);
            }
        }
        self.samples.reset();
        while self.drops.next().is_some() {}
        self.misses_base = self.recursion_misses();
        Ok(())
    }

    /// Runs of netpath's programs the kernel skipped since load (another BPF program was
    /// running on that CPU), from each program fd's `/proc/self/fdinfo` entry.
    fn recursion_misses(&self) -> u64 {
        use std::os::fd::{AsFd, AsRawFd};
        self.ebpf
            .programs()
            .filter_map(|(_, p)| {
                let fd = p.fd().ok()?.as_fd().as_raw_fd();
                let info = std::fs::read_to_string(format!("/proc/self/fdinfo/{fd}")).ok()?;
                info.lines()
                    .find_map(|l| l.strip_prefix("recursion_misses:"))
                    .and_then(|v| v.trim().parse::<u64>().ok())
            })
            .sum()
    }

    pub fn snapshot(&self) -> Result<Snapshot> {
        let hops: PerCpuArray<&MapData, HopHist> =
            PerCpuArray::try_from(self.ebpf.map("HOPS").unwrap())?;
        let mut stats = Vec::with_capacity(NSLOTS);
        let mut hist = vec![Vec::new(); NSLOTS];
        for (i, slot_hist) in hist.iter_mut().enumerate() {
            let per_cpu = hops.get(&(i as u32), 0)?;
            let mut st = HopStat::default();
            let mut h = vec![0u64; NBUCKETS];
            for v in per_cpu.iter() {
                st.sum_ns += v.sum_ns;
                st.own_ns += v.own_ns;
                st.own_runs += v.own_runs;
                st.own_count += v.own_count;
                for (a, b) in h.iter_mut().zip(v.buckets.iter()) {
                    *a += b;
                }
            }
            // Every record adds to one bucket: their sum is the count.
            st.count = h.iter().sum();
            if st.count > 0 {
                *slot_hist = h;
            }
            stats.push(st);
        }
        let counters = self.counters()?;
        let passes = self.sum_array("PASSES", 3 * 64)?;
        let tc_map: PerCpuHashMap<&MapData, u64, [u64; 2]> =
            PerCpuHashMap::try_from(self.ebpf.map("TC_STATS").unwrap())?;
        let mut tc = Vec::new();
        for item in tc_map.iter() {
            let (k, v) = item?;
            let (p, b) = v.iter().fold((0, 0), |a, x| (a.0 + x[0], a.1 + x[1]));
            tc.push((((k >> 1) as u32, k & 1 == 1), (p, b)));
        }
        tc.sort();
        Ok(Snapshot {
            stats,
            hist,
            counters,
            passes,
            tc,
        })
    }

    /// The kernel's counters (`netpath_common::counter`), lost events included, without the
    /// histograms: what `serve` reads between scrapes.
    pub fn counters(&self) -> Result<Vec<u64>> {
        let mut counters = self.sum_array("COUNTERS", counter::COUNT)?;
        counters[counter::PROBE_MISSES as usize] =
            self.recursion_misses().saturating_sub(self.misses_base);
        // Timelines the ring delivered but memory did not keep are lost like those the ring
        // could not take.
        counters[counter::RINGBUF_LOST as usize] += self.samples.discarded();
        Ok(counters)
    }

    /// Each slot of a per-CPU array summed over the CPUs.
    fn sum_array(&self, name: &str, len: u32) -> Result<Vec<u64>> {
        let m: PerCpuArray<&MapData, u64> =
            PerCpuArray::try_from((self.ebpf.map(name)).with_context(|| format!("{name} map"))?)?;
        (0..len).map(|i| Ok(m.get(&i, 0)?.iter().sum())).collect()
    }

    /// Cumulative (runs, run time ns) per program since load; zeros unless `prog_stats`.
    pub fn prog_costs(&self) -> Vec<(String, u64, u64)> {
        self.ebpf
            .programs()
            .filter_map(|(name, p)| {
                let info = p.info().ok()?;
                Some((
                    name.to_string(),
                    info.run_count(),
                    info.run_time().as_nanos() as u64,
                ))
            })
            .chain(self.nf.costs())
            .collect()
    }

    /// Sampled timelines delivered since the last call (drained from the kernel while the run
    /// goes, see `samples.rs`).
    pub fn drain_samples(&mut self) -> Vec<SkbState> {
        self.samples.take()
    }

    fn attach_raw(&mut self, p: &'static Probe) -> Result<()> {
        let raw: &mut RawTracePoint = program(&mut self.ebpf, p.prog)?;
        let id = raw
            .attach(p.target)
            .with_context(|| format!("attaching raw tracepoint {}", p.target))?;
        self.links.push(Link::Raw(p.prog, id));
        Ok(())
    }

    pub fn drain_drops(&mut self) -> Vec<DropRecord> {
        let mut out = Vec::new();
        while let Some(item) = self.drops.next() {
            if item.len() >= std::mem::size_of::<DropRecord>() {
                out.push(unsafe { std::ptr::read_unaligned(item.as_ptr() as *const DropRecord) });
            }
        }
        out
    }
}
