//! `cargo xtask vm-test`: netpath's privileged integration tests on other kernels.
//!
//! The host kernel has no kprobes and refuses fentry, so the tests also run under qemu
//! (single-threaded TCG, see [`ACCEL`]) on two Debian cloud kernels (see [`kernels`]): 6.1
//! (kprobes, fentry, module BTF; no `sk_data_ready` or socket-level send/receive
//! tracepoints) and the newest 6.12 of the backports (all of those, plus netkit, ipvlan and
//! netem). Per kernel: the test binaries and the `netpath` bin linked statically once
//! ([`build_static`]), an initramfs with that kernel's modules (see [`initramfs`]), and one
//! boot per backend in [`BACKENDS`] (see [`console`]). docs/kernels.md ("How `vm-test`
//! runs") walks through the steps. A VM's result is the `rc` of its `NETPATH-VM-RESULT`
//! line and the libtest `test result:` counts; a missing line (crash, panic, timeout) fails.

pub mod backports;
mod console;
mod debian;
mod initramfs;
pub mod kernels;

use std::{
    collections::BTreeMap,
    fmt::Write as _,
    fs,
    io::BufReader,
    path::{Path, PathBuf},
    process::{Command, Stdio},
    sync::Mutex,
    time::Instant,
};

use anyhow::{Context as _, ensure};
use cargo_metadata::{Message, TargetKind};
use clap::Args;

use self::{backports::Qemu, kernels::Kernel};
use crate::{
    cmd,
    counts::Counts,
    paths::{target_dir, workspace_root},
    setup,
};

/// Backends every backend-dependent test binary runs under, one full pass each, with
/// `NETPATH_BACKEND=<b>` in its environment (read by `BackendChoice::from_env` in the
/// tests; `auto` would let netpath pick).
pub const BACKENDS: &[&str] = &["tracepoint", "kprobe", "fentry"];
/// Test binaries that run in the first backend pass only: those that never load eBPF
/// programs, and `protocols` (UDP and ICMP journeys start at a syscall tracepoint and end by
/// address on every backend; the function-probe passes would repeat it at ~40 s a pass).
/// `runmode` too: the wait modes and placements differ in the scheduler's tracepoints, which
/// every backend shares; the function probes' device points are checked by `trace`.
const BACKEND_INDEPENDENT: &[&str] = &["lab", "lab_drivers", "harness", "protocols", "runmode"];
/// (kernel series, backend) boots `cargo xtask test` leaves out to stay well inside CI's 90
/// minutes: 6.12's kprobe pass attaches the same programs as 6.1's kprobe pass, and 6.12's
/// fentry pass runs the same handlers on that kernel. `cargo xtask vm-test` still runs it.
const CI_SKIPPED: &[(&str, &str)] = &[("6.12.", "kprobe")];
/// One VM boot runs one backend's pass. The longest, 6.1's tracepoint pass, took ~700 s
/// under TCG; with every backend in one boot the 6.1 VM outran 1800 s and two such boots one
/// after the other took most of CI's 90 minutes, hence one boot per backend, side by side.
const VM_TIMEOUT_SECS: u64 = 1500;
/// Test binaries left out of the VM: they need a Docker engine (dockerd, containerd, runc,
/// iptables), sockperf, iperf3, redis, promtool and prometheus (`outputs`: the output formats do
/// not depend on the kernel), which the initramfs does not carry; bad_input and interrupt
/// also need setpriv, unshare, bpftool and Docker (exporter: Docker and bpftool); overload
/// sends more traffic than TCG emulates in time; diff reads its fixtures and schemas from the
/// repository, which the VM does not carry (its live run is a compare, which the VM runs
/// itself); tune builds each lab twice and runs both sides traced and untraced per knob,
/// which under TCG would take more than the VM's time (its programs are compare's, which every
/// VM pass loads); validate's microsecond delays say nothing under emulation (`tracking` loads
/// its delay program there); containerd needs containerd and the CNI plugins; cli only parses
/// arguments.
const HOST_ONLY: &[&str] = &[
    "validate",
    "containerd",
    "cli",
    "docker",
    "outputs",
    "diff",
    "tune",
    "tune_apply",
    "serve",
    "serve_left_on",
    "exporter",
    "fleet",
    "bad_input",
    "interrupt",
    "overload",
];
/// The package whose integration tests run in the VM.
const PACKAGE: &str = "netpath";
/// The bin the tests run through `env!("CARGO_BIN_EXE_netpath")`.
const BIN: &str = "netpath";
/// The host target, named so that `RUSTFLAGS` reaches only the target (not build scripts,
/// which must stay dynamic) and the output lands in `target/vm/<triple>/release`.
const TRIPLE: &str = "x86_64-unknown-linux-gnu";
/// qemu's accelerator: TCG (KVM hangs on these machines), single-threaded. Multi-threaded
/// TCG emulates cross-modifying code unreliably enough that the kernel's live patching of
/// function entries (kprobes and fentry trampolines, `text_poke_bp`) while the other vCPU
/// runs those functions ended in `BUG: kernel NULL pointer dereference` (RIP 0) in 3 of 3
/// stress runs, single-threaded in none of 12 passes.
const ACCEL: &str = "tcg,thread=single";
/// A test binary that runs longer than this inside the VM is killed (the next one runs).
/// `trace` on 6.1 took 700 s in CI and 910+ s beside busy builds.
const PER_BINARY_TIMEOUT_SECS: u64 = 1200;

#[derive(Args, Clone, Debug)]
pub struct VmArgs {
    /// Kill each VM after this many seconds.
    #[arg(long, default_value_t = VM_TIMEOUT_SECS)]
    pub timeout: u64,
    /// Kernel to boot: `6.1` (the installed cloud kernel), `6.12` (fetched from backports by
    /// `setup --vm`) or the path of a vmlinuz (repeatable; default: 6.1 and 6.12).
    #[arg(long, value_name = "SERIES|PATH")]
    pub kernel: Vec<String>,
    /// Guest memory in MiB.
    #[arg(long, default_value_t = 2048)]
    pub memory: u32,
    /// qemu `-accel` value (single-threaded TCG by default: see `ACCEL` in xtask/src/vm/mod.rs).
    #[arg(long, default_value = ACCEL)]
    pub accel: String,
    /// Run only these test binaries (`trace`, `lab`, ...; repeatable; default: all).
    #[arg(long = "test", value_name = "NAME")]
    pub tests: Vec<String>,
    /// Run under only these backends (repeatable; default: tracepoint, kprobe, fentry).
    #[arg(long = "backend", value_name = "NAME")]
    pub backends: Vec<String>,
    /// Boots run side by side (default: this machine's CPUs, at most 4).
    #[arg(long, default_value_t = default_jobs())]
    pub jobs: usize,
    /// Passed to every test binary after `--test-threads=1`, e.g. a test name filter.
    #[arg(last = true)]
    pub libtest_args: Vec<String>,
    /// Leave out the boots in [`CI_SKIPPED`] (`cargo xtask test` sets it).
    #[arg(skip)]
    pub ci: bool,
}

impl Default for VmArgs {
    fn default() -> Self {
        Self {
            timeout: VM_TIMEOUT_SECS,
            kernel: Vec::new(),
            memory: 2048,
            accel: ACCEL.into(),
            tests: Vec::new(),
            backends: Vec::new(),
            jobs: default_jobs(),
            libtest_args: Vec::new(),
            ci: false,
        }
    }
}

impl VmArgs {
    /// The backends asked for, in order (default: [`BACKENDS`]).
    pub(crate) fn backend_list(&self) -> Vec<String> {
        if self.backends.is_empty() {
            BACKENDS.iter().map(|b| (*b).to_owned()).collect()
        } else {
            self.backends.clone()
        }
    }
}

fn default_jobs() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get().min(4))
}

/// `cargo xtask vm-test`: setup, then [`run_tests`], then a summary; exits 1 on failure.
pub fn run(args: &VmArgs) -> anyhow::Result<()> {
    setup::run(&setup::SetupArgs {
        vm: true,
        installed_vm_kernel_only: !kernels::wants_backports(&args.kernel),
        ..Default::default()
    })?;
    let report = run_tests(args)?;
    println!();
    for line in report.summary_lines() {
        println!("  {line}");
    }
    let counts = report.counts();
    println!("{} passed, {} failed", counts.passed, counts.failed);
    if !report.ok() {
        std::process::exit(1);
    }
    Ok(())
}

/// What the VM runs found, one [`VmOutcome`] per kernel.
#[derive(Debug, Default)]
pub struct VmReport {
    /// Time of the static build, shared by every kernel.
    pub build_secs: f64,
    pub outcomes: Vec<VmOutcome>,
}

impl VmReport {
    pub fn ok(&self) -> bool {
        !self.outcomes.is_empty() && self.outcomes.iter().all(VmOutcome::ok)
    }

    /// Summed over every VM; a VM that failed without a libtest failure counts once.
    pub fn counts(&self) -> Counts {
        let mut c = Counts::default();
        for o in &self.outcomes {
            c.passed += o.counts.passed;
            c.failed += o.counts.failed + u64::from(!o.ok() && o.counts.failed == 0);
        }
        c
    }

    pub fn summary_lines(&self) -> Vec<String> {
        let mut lines: Vec<String> = self
            .outcomes
            .iter()
            .flat_map(VmOutcome::summary_lines)
            .collect();
        lines.push(format!(
            "{:<7} vm static build {:.0} s",
            "", self.build_secs
        ));
        lines
    }
}

/// What one VM run found.
#[derive(Debug, Default)]
pub struct VmOutcome {
    /// `uname -r` inside the VM (from the kernel file name until the VM says).
    pub kernel: String,
    /// The backend this boot's `/init` ran.
    pub backend: String,
    /// The `rc` of the `NETPATH-VM-RESULT` line; `None` when the line never came.
    pub rc: Option<i32>,
    /// Sum over every test binary run.
    pub counts: Counts,
    /// One entry per test binary run, in order.
    pub runs: Vec<BinaryRun>,
    pub timed_out: bool,
    /// The kernel's first `BUG:`/`Oops:`/`Kernel panic` line, and what was running then.
    pub kernel_oops: Option<String>,
    /// Time to build the initramfs, and from starting qemu until it exited.
    pub initramfs_secs: f64,
    pub vm_secs: f64,
    /// Where the serial console was written.
    pub console: PathBuf,
}

#[derive(Debug, Default, PartialEq)]
pub struct BinaryRun {
    pub backend: String,
    pub binary: String,
    pub counts: Counts,
    /// Exit status inside the VM; `None` when the VM never reported it.
    pub rc: Option<i32>,
    pub secs: Option<u64>,
    /// Names of the tests libtest reported as FAILED.
    pub failed_tests: Vec<String>,
}

impl VmOutcome {
    pub fn ok(&self) -> bool {
        // A boot whose `/init` ran no binary (a backend its command line did not select)
        // proved nothing.
        self.rc == Some(0)
            && !self.runs.is_empty()
            && self.counts.failed == 0
            && !self.timed_out
            && self.kernel_oops.is_none()
    }

    /// One line per test binary run, then one for the VM itself.
    pub fn summary_lines(&self) -> Vec<String> {
        let mut lines: Vec<String> = self
            .runs
            .iter()
            .map(|r| {
                let ok = r.rc == Some(0) && r.counts.failed == 0;
                let mut s = format!(
                    "{:<7} vm {} backend {} {}: {} passed, {} failed",
                    if ok { "ok" } else { "FAILED" },
                    self.kernel,
                    r.backend,
                    r.binary,
                    r.counts.passed,
                    r.counts.failed,
                );
                match r.rc {
                    Some(0) => {}
                    Some(rc) if r.counts.failed == 0 => {
                        let _ = write!(s, " (exit {rc})");
                    }
                    Some(_) => {}
                    None => s.push_str(" (did not finish)"),
                }
                if let Some(secs) = r.secs {
                    let _ = write!(s, " in {secs} s");
                }
                if !r.failed_tests.is_empty() {
                    let _ = write!(s, " [{}]", r.failed_tests.join(", "));
                }
                s
            })
            .collect();
        let mut how = match (self.rc, self.timed_out) {
            (_, true) => "timed out".to_owned(),
            (None, false) => "no NETPATH-VM-RESULT line".to_owned(),
            (Some(rc), false) => format!("rc={rc}"),
        };
        if let Some(oops) = &self.kernel_oops {
            let _ = write!(how, "; kernel {oops}");
        }
        lines.push(format!(
            "{:<7} vm {} backend {}: {how}; initramfs {:.0} s, VM {:.0} s (console: {})",
            if self.ok() { "ok" } else { "FAILED" },
            self.kernel,
            self.backend,
            self.initramfs_secs,
            self.vm_secs,
            self.console.display(),
        ));
        lines
    }
}

/// Everything after setup: kernels, static build, per kernel its initramfs, then one boot
/// per kernel and backend, [`VmArgs::jobs`] of them at a time.
pub fn run_tests(args: &VmArgs) -> anyhow::Result<VmReport> {
    let t0 = Instant::now();
    let root = workspace_root();
    let vm_dir = target_dir(&root)?.join("vm");
    fs::create_dir_all(&vm_dir)?;
    let kernels = kernels::select(&args.kernel, &vm_dir)?;
    let qemu = backports::qemu(&vm_dir)?;
    for k in &kernels {
        println!("vm: kernel {} ({})", k.version, k.vmlinuz.display());
    }
    let built = build_static(&root, &vm_dir)?;
    let build_secs = t0.elapsed().as_secs_f64();
    let mut images = Vec::new();
    for kernel in &kernels {
        let t1 = Instant::now();
        let initramfs = initramfs::build(&vm_dir, kernel, &built, args)?;
        images.push((kernel, initramfs, t1.elapsed().as_secs_f64()));
    }
    // Backend-major, so each kernel's first pass (the longest: it also runs the
    // backend-independent binaries) starts first.
    let tests = initramfs::selected_tests(&built, args)?;
    let mut boots = Vec::new();
    for (i, backend) in args.backend_list().into_iter().enumerate() {
        if i > 0 && tests.iter().all(|t| BACKEND_INDEPENDENT.contains(t)) {
            continue; // its `/init` would run nothing
        }
        for (kernel, initramfs, initramfs_secs) in &images {
            if args.ci
                && CI_SKIPPED
                    .iter()
                    .any(|(k, b)| kernel.version.starts_with(k) && backend == *b)
            {
                continue;
            }
            boots.push(Boot {
                kernel,
                initramfs,
                initramfs_secs: *initramfs_secs,
                backend: backend.clone(),
                console: vm_dir.join(format!("console-{}-{backend}.log", kernel.version)),
            });
        }
    }
    let outcomes = boot_all(&qemu, &boots, args)?;
    Ok(VmReport {
        build_secs,
        outcomes,
    })
}

/// One qemu run: a kernel, its initramfs, the backend its `/init` runs.
struct Boot<'a> {
    kernel: &'a Kernel,
    initramfs: &'a Path,
    initramfs_secs: f64,
    backend: String,
    console: PathBuf,
}

/// Runs the boots on [`VmArgs::jobs`] threads (single-threaded TCG keeps each qemu on one
/// host CPU, so boots side by side take about as long as one alone), results in `boots`'
/// order; the first error, if any, after every boot has ended.
fn boot_all(qemu: &Qemu, boots: &[Boot], args: &VmArgs) -> anyhow::Result<Vec<VmOutcome>> {
    let next = Mutex::new(0..boots.len());
    let results: Mutex<Vec<Option<anyhow::Result<VmOutcome>>>> =
        Mutex::new(boots.iter().map(|_| None).collect());
    let lanes = args.jobs.clamp(1, boots.len().max(1));
    std::thread::scope(|s| {
        for _ in 0..lanes {
            s.spawn(|| {
                loop {
                    let Some(i) = next.lock().expect("boot queue").next() else {
                        return;
                    };
                    let r = boot_one(qemu, &boots[i], args);
                    results.lock().expect("boot results")[i] = Some(r);
                }
            });
        }
    });
    results
        .into_inner()
        .expect("boot results")
        .into_iter()
        .map(|r| r.expect("every boot ran"))
        .collect()
}

fn boot_one(qemu: &Qemu, b: &Boot, args: &VmArgs) -> anyhow::Result<VmOutcome> {
    let mut outcome = console::boot(qemu, b.kernel, b.initramfs, &b.backend, &b.console, args)?;
    outcome.initramfs_secs = b.initramfs_secs;
    outcome.console = b.console.clone();
    outcome.backend = b.backend.clone();
    if outcome.kernel.is_empty() {
        outcome.kernel = b.kernel.version.clone();
    }
    Ok(outcome)
}

/// What the static build produced.
pub(crate) struct Built {
    /// The `netpath` bin, at the path baked into the tests (`CARGO_BIN_EXE_netpath`).
    pub bin: PathBuf,
    /// Integration test binaries by test name (`lab`, `trace`, ...).
    pub tests: BTreeMap<String, PathBuf>,
}

/// `cargo test -p netpath --no-run --release` for the host triple with `+crt-static`,
/// in `vm_dir`, collecting the integration test executables and the netpath bin.
fn build_static(root: &Path, vm_dir: &Path) -> anyhow::Result<Built> {
    let mut c = Command::new("cargo");
    c.args(["test", "--package", PACKAGE, "--no-run", "--release"])
        .args(["--target", TRIPLE, "--target-dir"])
        .arg(vm_dir)
        .arg("--message-format=json-render-diagnostics")
        .env("RUSTFLAGS", "-C target-feature=+crt-static")
        .current_dir(root)
        .stdout(Stdio::piped());
    println!("$ {}", cmd::display(&c));
    let mut child = c.spawn().context("cannot run cargo test --no-run")?;
    let stdout = child.stdout.take().context("no stdout pipe")?;
    let mut bin = None;
    let mut tests = BTreeMap::new();
    for msg in Message::parse_stream(BufReader::new(stdout)) {
        let Message::CompilerArtifact(art) = msg.context("reading cargo's JSON output")? else {
            continue;
        };
        let Some(exe) = art.executable else { continue };
        let kind = art.target.kind.first();
        if kind == Some(&TargetKind::Test) && art.profile.test {
            tests.insert(art.target.name.clone(), exe.into_std_path_buf());
        } else if kind == Some(&TargetKind::Bin) && !art.profile.test && art.target.name == BIN {
            bin = Some(exe.into_std_path_buf());
        }
    }
    let status = child.wait()?;
    ensure!(
        status.success(),
        "static build of the tests failed ({status})"
    );
    let bin = bin.with_context(|| format!("cargo built no `{BIN}` bin"))?;
    ensure!(!tests.is_empty(), "cargo built no integration tests");
    for exe in tests.values().chain([&bin]) {
        ensure!(is_static(exe), "{} is not statically linked", exe.display());
    }
    println!(
        "vm: static test binaries: {}",
        tests.keys().cloned().collect::<Vec<_>>().join(" ")
    );
    Ok(Built { bin, tests })
}

/// Whether an ELF file has no program interpreter (static or static-pie).
pub(crate) fn is_static(exe: &Path) -> bool {
    // `ldd` says "not a dynamic executable" / "statically linked" and fails for both.
    cmd::probe(Command::new("ldd").arg(exe)).is_none_or(|out| out.contains("statically linked"))
}
