//! `cargo xtask vm-test`: netpath's privileged integration tests on a second kernel.
//!
//! The host kernel has no kprobes and refuses fentry, so the tests also run on Debian's
//! cloud kernel (6.1, kprobes, fentry, module BTF) under qemu with software emulation
//! (single-threaded TCG, see [`ACCEL`]; KVM hangs on these machines). The steps:
//!
//! 1. `setup --vm` (qemu, the cloud kernel, busybox-static, cpio, kmod);
//! 2. the newest `/boot/vmlinuz-*-cloud-amd64` and its `/lib/modules/<version>`;
//! 3. netpath's integration test binaries and the `netpath` bin, linked statically
//!    (`+crt-static`) in their own target dir (`target/vm`), the eBPF object embedded by
//!    build.rs as usual;
//! 4. an initramfs (`target/vm/initramfs.cpio.gz`): busybox, the kernel modules the labs
//!    need (loaded with `insmod` in dependency order, the rest of the networking modules
//!    there for the kernel to autoload through busybox `modprobe`), `nft` and
//!    `docker-proxy` with their shared libraries, the test binaries, and an `/init` that
//!    mounts what the tests expect, runs every test binary with `--test-threads=1` once per
//!    backend in [`BACKENDS`], prints `NETPATH-VM-RESULT rc=<n>` and powers off;
//! 5. qemu with no network device (the tests only use namespaces inside the VM), the
//!    serial console streamed to stdout and to `target/vm/console.log`, under an overall
//!    timeout.
//!
//! The result is the `rc` of that line and the libtest `test result:` counts; a missing
//! result line (crash, panic, timeout) is a failure.

use std::{
    collections::{BTreeMap, BTreeSet},
    fmt::Write as _,
    fs,
    io::{BufRead as _, BufReader, Write as _},
    os::unix::fs::{PermissionsExt as _, symlink},
    path::{Path, PathBuf},
    process::{Command, Stdio},
    sync::mpsc,
    time::{Duration, Instant},
};

use anyhow::{Context as _, ensure};
use cargo_metadata::{Message, TargetKind};
use clap::Args;

use crate::{cmd, setup, test::Counts, workspace_root};

/// Backends every backend-dependent test binary runs under, one full pass each, with
/// `NETPATH_BACKEND=<b>` in its environment (read by `BackendChoice::from_env` in the
/// tests; `auto` would let netpath pick).
pub const BACKENDS: &[&str] = &["tracepoint", "kprobe", "fentry"];
/// Test binaries that never load eBPF programs: they run in the first backend pass only.
const BACKEND_INDEPENDENT: &[&str] = &["lab", "lab_drivers", "harness"];
/// Test binaries left out of the VM: they need a Docker engine (dockerd, containerd, runc,
/// iptables), which the initramfs does not carry.
const HOST_ONLY: &[&str] = &["docker"];
/// The package whose integration tests run in the VM.
const PACKAGE: &str = "netpath";
/// The bin the tests run through `env!("CARGO_BIN_EXE_netpath")`.
const BIN: &str = "netpath";
/// The host target, named so that `RUSTFLAGS` reaches only the target (not build scripts,
/// which must stay dynamic) and the output lands in `target/vm/<triple>/release`.
const TRIPLE: &str = "x86_64-unknown-linux-gnu";
/// Kernel modules `/init` loads with `insmod` (their dependencies first): the lab's
/// devices (veth, bridge, vxlan, macvlan, dummy), its nftables NAT (`fib daddr type
/// local`, masquerade, dnat), TC (clsact and cls_bpf: 6.1 has no TCX, aya attaches
/// through netlink) and netem for emulated cross-node delay.
const MODULES: &[&str] = &[
    "veth",
    "bridge",
    "vxlan",
    "macvlan",
    "dummy",
    "nf_tables",
    "nft_chain_nat",
    "nft_nat",
    "nft_masq",
    "nft_fib_ipv4",
    "nft_ct",
    "sch_ingress",
    "cls_bpf",
    "sch_netem",
];
/// Module directories (under `/lib/modules/<version>/kernel`) copied whole, for the kernel
/// to autoload from (`/sbin/modprobe` is busybox) when a test needs something not in
/// [`MODULES`]; `*.ko` in `drivers/net` itself too (not its hardware drivers).
const MODULE_DIRS: &[&str] = &[
    "net/802",
    "net/8021q",
    "net/bridge",
    "net/core",
    "net/ipv4",
    "net/ipv6",
    "net/llc",
    "net/netfilter",
    "net/sched",
    "lib",
    "drivers/net/ipvlan",
    "drivers/net/vxlan",
];
/// User-space programs the lab runs, copied with their shared libraries when present.
const PROGRAMS: &[&str] = &["/usr/sbin/nft", "/usr/sbin/docker-proxy"];
/// Small files some programs read (protocol and service names).
const ETC_FILES: &[&str] = &["/etc/protocols", "/etc/services"];
/// qemu's accelerator: TCG (KVM hangs on these machines), single-threaded. Multi-threaded
/// TCG emulates cross-modifying code unreliably enough that the kernel's live patching of
/// function entries (kprobes and fentry trampolines, `text_poke_bp`) while the other vCPU
/// runs those functions ended in `BUG: kernel NULL pointer dereference` (RIP 0) in 3 of 3
/// stress runs, single-threaded in none of 12 passes.
const ACCEL: &str = "tcg,thread=single";
/// A test binary that runs longer than this inside the VM is killed (the next one runs).
const PER_BINARY_TIMEOUT_SECS: u64 = 900;

#[derive(Args, Clone, Debug)]
pub struct VmArgs {
    /// Kill the VM after this many seconds.
    #[arg(long, default_value_t = 1200)]
    pub timeout: u64,
    /// Kernel to boot (default: the newest /boot/vmlinuz-*-cloud-amd64).
    #[arg(long)]
    pub kernel: Option<PathBuf>,
    /// Guest memory in MiB.
    #[arg(long, default_value_t = 2048)]
    pub memory: u32,
    /// qemu `-accel` value (single-threaded TCG by default: see `ACCEL` in xtask/src/vm.rs).
    #[arg(long, default_value = ACCEL)]
    pub accel: String,
    /// Run only these test binaries (`trace`, `lab`, ...; repeatable; default: all).
    #[arg(long = "test", value_name = "NAME")]
    pub tests: Vec<String>,
    /// Run under only these backends (repeatable; default: tracepoint, kprobe, fentry).
    #[arg(long = "backend", value_name = "NAME")]
    pub backends: Vec<String>,
    /// Passed to every test binary after `--test-threads=1`, e.g. a test name filter.
    #[arg(last = true)]
    pub libtest_args: Vec<String>,
}

impl Default for VmArgs {
    fn default() -> Self {
        Self {
            timeout: 1200,
            kernel: None,
            memory: 2048,
            accel: ACCEL.into(),
            tests: Vec::new(),
            backends: Vec::new(),
            libtest_args: Vec::new(),
        }
    }
}

/// `cargo xtask vm-test`: setup, then [`run_tests`], then a summary; exits 1 on failure.
pub fn run(args: &VmArgs) -> anyhow::Result<()> {
    setup::run(&setup::SetupArgs {
        vm: true,
        ..Default::default()
    })?;
    let outcome = run_tests(args)?;
    println!();
    for line in outcome.summary_lines() {
        println!("  {line}");
    }
    println!(
        "{} passed, {} failed",
        outcome.counts.passed, outcome.counts.failed
    );
    if !outcome.ok() {
        std::process::exit(1);
    }
    Ok(())
}

/// What one VM run found.
#[derive(Debug, Default)]
pub struct VmOutcome {
    /// `uname -r` inside the VM (from the kernel file name until the VM says).
    pub kernel: String,
    /// The `rc` of the `NETPATH-VM-RESULT` line; `None` when the line never came.
    pub rc: Option<i32>,
    /// Sum over every test binary run.
    pub counts: Counts,
    /// One entry per test binary run, in order.
    pub runs: Vec<BinaryRun>,
    pub timed_out: bool,
    /// The kernel's first `BUG:`/`Oops:`/`Kernel panic` line, and what was running then.
    pub kernel_oops: Option<String>,
    /// Build and initramfs time, and the time from starting qemu until it exited.
    pub build_secs: f64,
    pub vm_secs: f64,
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
        self.rc == Some(0)
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
            "{:<7} vm {}: {how}; build {:.0} s, VM {:.0} s (console: target/vm/console.log)",
            if self.ok() { "ok" } else { "FAILED" },
            self.kernel,
            self.build_secs,
            self.vm_secs,
        ));
        lines
    }
}

/// Everything after setup: kernel, static build, initramfs, boot.
pub fn run_tests(args: &VmArgs) -> anyhow::Result<VmOutcome> {
    let t0 = Instant::now();
    let root = workspace_root();
    let kernel = find_kernel(args.kernel.as_deref())?;
    println!(
        "vm: kernel {} ({})",
        kernel.version,
        kernel.vmlinuz.display()
    );
    let target_dir = cargo_metadata::MetadataCommand::new()
        .no_deps()
        .current_dir(&root)
        .exec()
        .context("cargo metadata")?
        .target_directory
        .into_std_path_buf();
    let vm_dir = target_dir.join("vm");
    fs::create_dir_all(&vm_dir)?;
    let built = build_static(&root, &vm_dir)?;
    let initramfs = build_initramfs(&vm_dir, &kernel, &built, args)?;
    let build_secs = t0.elapsed().as_secs_f64();

    let mut outcome = boot(&kernel, &initramfs, &vm_dir.join("console.log"), args)?;
    outcome.build_secs = build_secs;
    if outcome.kernel.is_empty() {
        outcome.kernel = kernel.version.clone();
    }
    Ok(outcome)
}

struct Kernel {
    vmlinuz: PathBuf,
    version: String,
    modules: PathBuf,
}

/// The given vmlinuz, or the newest `/boot/vmlinuz-*-cloud-amd64` (by version order).
fn find_kernel(given: Option<&Path>) -> anyhow::Result<Kernel> {
    let vmlinuz = match given {
        Some(p) => p.to_path_buf(),
        None => {
            let mut found: Vec<(Vec<u64>, PathBuf)> = fs::read_dir("/boot")
                .context("reading /boot")?
                .filter_map(|e| e.ok())
                .filter_map(|e| {
                    let name = e.file_name().into_string().ok()?;
                    let ver = name.strip_prefix("vmlinuz-")?;
                    ver.ends_with("-cloud-amd64")
                        .then(|| (version_key(ver), e.path()))
                })
                .collect();
            found.sort();
            found.pop().map(|(_, p)| p).context(
                "no /boot/vmlinuz-*-cloud-amd64: `cargo xtask setup --vm` installs \
                 linux-image-cloud-amd64",
            )?
        }
    };
    let name = vmlinuz
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or_default();
    let version = name
        .strip_prefix("vmlinuz-")
        .with_context(|| format!("{} is not named vmlinuz-<version>", vmlinuz.display()))?
        .to_owned();
    let modules = Path::new("/lib/modules").join(&version);
    ensure!(
        modules.join("modules.dep").is_file(),
        "no modules for {version} in {}",
        modules.display()
    );
    Ok(Kernel {
        vmlinuz,
        version,
        modules,
    })
}

/// `6.1.0-57-cloud-amd64` → [6, 1, 0, 57]: numbers compare as numbers.
fn version_key(v: &str) -> Vec<u64> {
    v.split(|c: char| !c.is_ascii_digit())
        .filter_map(|p| p.parse().ok())
        .collect()
}

/// What the static build produced.
struct Built {
    /// The `netpath` bin, at the path baked into the tests (`CARGO_BIN_EXE_netpath`).
    bin: PathBuf,
    /// Integration test binaries by test name (`lab`, `trace`, ...).
    tests: BTreeMap<String, PathBuf>,
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
fn is_static(exe: &Path) -> bool {
    // `ldd` says "not a dynamic executable" / "statically linked" and fails for both.
    cmd::probe(Command::new("ldd").arg(exe)).is_none_or(|out| out.contains("statically linked"))
}

/// Builds `vm_dir/initramfs.cpio.gz` from a fresh staging tree `vm_dir/initramfs`.
fn build_initramfs(
    vm_dir: &Path,
    kernel: &Kernel,
    built: &Built,
    args: &VmArgs,
) -> anyhow::Result<PathBuf> {
    let stage = vm_dir.join("initramfs");
    if stage.exists() {
        fs::remove_dir_all(&stage).with_context(|| format!("removing {}", stage.display()))?;
    }
    for d in [
        "bin", "sbin", "dev", "proc", "sys", "run", "tmp", "root", "etc", "var", "tests",
    ] {
        fs::create_dir_all(stage.join(d))?;
    }
    symlink("../run", stage.join("var/run"))?;

    // busybox and its applets.
    let busybox = which("busybox").context("busybox (package busybox-static)")?;
    ensure!(
        is_static(&busybox),
        "{} is not static: install busybox-static",
        busybox.display()
    );
    copy_file(&busybox, &stage.join("bin/busybox"))?;
    let applets = cmd::probe(Command::new(&busybox).arg("--list")).context("busybox --list")?;
    for a in applets.split_whitespace() {
        if a != "busybox" && !a.contains('/') {
            symlink("busybox", stage.join("bin").join(a))?;
        }
    }
    // The kernel's usermode helper for module autoload.
    symlink("../bin/busybox", stage.join("sbin/modprobe"))?;

    // Programs the lab runs, their libraries and the loader.
    for prog in PROGRAMS {
        let p = Path::new(prog);
        if !p.exists() {
            println!("vm: {prog} not on this machine; the VM has none either");
            continue;
        }
        copy_with_libs(p, &stage)?;
    }
    for f in ETC_FILES {
        if Path::new(f).exists() {
            copy_file(Path::new(f), &in_stage(&stage, Path::new(f)))?;
        }
    }
    fs::write(stage.join("etc/passwd"), "root:x:0:0:root:/root:/bin/sh\n")?;
    fs::write(stage.join("etc/group"), "root:x:0:\n")?;

    // Kernel modules.
    let load_order = copy_modules(kernel, &stage)?;

    // netpath and its tests. The bin goes where the tests' CARGO_BIN_EXE_netpath points.
    copy_file(&built.bin, &in_stage(&stage, &built.bin))?;
    for (name, exe) in &built.tests {
        copy_file(exe, &stage.join("tests").join(name))?;
    }

    for t in &args.tests {
        ensure!(
            built.tests.contains_key(t),
            "no test binary {t} (there are: {})",
            built.tests.keys().cloned().collect::<Vec<_>>().join(", ")
        );
    }
    let tests: Vec<&str> = built
        .tests
        .keys()
        .map(String::as_str)
        .filter(|t| {
            if args.tests.is_empty() {
                !HOST_ONLY.contains(t)
            } else {
                args.tests.iter().any(|a| a == t)
            }
        })
        .collect();
    let left_out: Vec<&str> = built
        .tests
        .keys()
        .map(String::as_str)
        .filter(|t| !tests.contains(t))
        .collect();
    if !left_out.is_empty() {
        println!(
            "vm: not run in the VM: {} ({})",
            left_out.join(" "),
            if args.tests.is_empty() {
                "they need a Docker engine"
            } else {
                "not asked for with --test"
            }
        );
    }
    let plan = Plan {
        backends: if args.backends.is_empty() {
            BACKENDS.iter().map(|b| (*b).to_owned()).collect()
        } else {
            args.backends.clone()
        },
        libtest_args: args.libtest_args.clone(),
    };
    let init = init_script(&kernel.version, &load_order, &built.bin, &tests, &plan);
    let init_path = stage.join("init");
    fs::write(&init_path, init)?;
    fs::set_permissions(&init_path, fs::Permissions::from_mode(0o755))?;

    let out = vm_dir.join("initramfs.cpio.gz");
    write_cpio_gz(&stage, &out)?;
    let size = fs::metadata(&out)?.len();
    println!(
        "vm: initramfs {} ({:.1} MiB)",
        out.display(),
        size as f64 / (1 << 20) as f64
    );
    Ok(out)
}

/// `path` inside the staging tree (same absolute path in the VM).
fn in_stage(stage: &Path, path: &Path) -> PathBuf {
    stage.join(path.strip_prefix("/").unwrap_or(path))
}

fn which(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .chain(["/usr/sbin".into(), "/sbin".into()])
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}

/// Copies a file's content (following symlinks), creating parent directories, keeping mode.
fn copy_file(from: &Path, to: &Path) -> anyhow::Result<()> {
    if let Some(dir) = to.parent() {
        fs::create_dir_all(dir)?;
    }
    fs::copy(from, to)
        .map(|_| ())
        .with_context(|| format!("copying {} to {}", from.display(), to.display()))
}

/// Copies a program and what `ldd` says it loads (libraries and the dynamic loader) to the
/// same paths in the staging tree.
fn copy_with_libs(prog: &Path, stage: &Path) -> anyhow::Result<()> {
    copy_file(prog, &in_stage(stage, prog))?;
    let Some(out) = cmd::probe(Command::new("ldd").arg(prog)) else {
        return Ok(()); // static
    };
    for lib in ldd_paths(&out) {
        copy_file(&lib, &in_stage(stage, &lib))?;
    }
    Ok(())
}

/// The absolute paths in `ldd` output (`libx.so => /lib/.../libx.so (0x...)`, and the
/// loader as `/lib64/ld-linux-x86-64.so.2 (0x...)`).
fn ldd_paths(ldd: &str) -> Vec<PathBuf> {
    ldd.lines()
        .filter_map(|l| {
            let l = l.split_once("=>").map_or(l, |(_, r)| r).trim();
            let p = l.split_whitespace().next()?;
            p.starts_with('/').then(|| PathBuf::from(p))
        })
        .collect()
}

/// Copies the modules of [`MODULES`] (with their dependencies) and of [`MODULE_DIRS`]
/// into the staging tree, decompressed, with a `modules.dep` that names them so; returns
/// the `insmod` order: paths relative to `/lib/modules/<version>`, dependencies first.
fn copy_modules(kernel: &Kernel, stage: &Path) -> anyhow::Result<Vec<String>> {
    let mut order = Vec::new();
    let mut seen = BTreeSet::new();
    for m in MODULES {
        resolve_module(&kernel.version, m, &mut seen, &mut order)?;
    }
    let dst_root = in_stage(stage, &kernel.modules);
    let mut files: BTreeSet<PathBuf> = order.iter().map(|(_, f)| f.clone()).collect();
    for dir in MODULE_DIRS {
        let d = kernel.modules.join("kernel").join(dir);
        if d.is_dir() {
            collect_modules(&d, &mut files)?;
        }
    }
    let net = kernel.modules.join("kernel/drivers/net");
    for e in fs::read_dir(&net).with_context(|| format!("reading {}", net.display()))? {
        let p = e?.path();
        if p.is_file() && module_name(&p).is_some() {
            files.insert(p);
        }
    }
    for f in &files {
        let rel = f.strip_prefix(&kernel.modules).unwrap_or(f);
        copy_module(f, &dst_root.join(strip_compression(rel)))?;
    }
    println!(
        "vm: {} kernel modules, {} loaded at boot",
        files.len(),
        order.len()
    );
    // modules.dep with the decompressed names; the other index files name no paths.
    let dep = fs::read_to_string(kernel.modules.join("modules.dep"))?;
    let dep: String = dep
        .lines()
        .map(|l| {
            let mut l = l.replace(".ko.xz", ".ko").replace(".ko.zst", ".ko");
            l = l.replace(".ko.gz", ".ko");
            l + "\n"
        })
        .collect();
    fs::write(dst_root.join("modules.dep"), dep)?;
    for f in [
        "modules.alias",
        "modules.symbols",
        "modules.builtin",
        "modules.softdep",
        "modules.order",
    ] {
        let p = kernel.modules.join(f);
        if p.is_file() {
            copy_file(&p, &dst_root.join(f))?;
        }
    }
    Ok(order
        .into_iter()
        .map(|(_, f)| {
            let rel = f.strip_prefix(&kernel.modules).unwrap_or(&f);
            strip_compression(rel).display().to_string()
        })
        .collect())
}

/// Depth-first over `modinfo -F depends`: pushes `(name, file)` after its dependencies.
/// Built-in modules (no file) are skipped.
fn resolve_module(
    version: &str,
    name: &str,
    seen: &mut BTreeSet<String>,
    order: &mut Vec<(String, PathBuf)>,
) -> anyhow::Result<()> {
    if !seen.insert(name.to_owned()) {
        return Ok(());
    }
    let modinfo = |field: &str| {
        cmd::probe(Command::new("modinfo").args(["-k", version, "-F", field, name]))
            .with_context(|| format!("`modinfo -k {version} -F {field} {name}` failed"))
    };
    let file = modinfo("filename")?;
    let file = file.trim();
    if file.is_empty() || file.starts_with('(') {
        return Ok(()); // "(builtin)"
    }
    for dep in modinfo("depends")?
        .trim()
        .split(',')
        .filter(|d| !d.is_empty())
    {
        resolve_module(version, dep, seen, order)?;
    }
    order.push((name.to_owned(), PathBuf::from(file)));
    Ok(())
}

fn collect_modules(dir: &Path, out: &mut BTreeSet<PathBuf>) -> anyhow::Result<()> {
    for e in fs::read_dir(dir).with_context(|| format!("reading {}", dir.display()))? {
        let p = e?.path();
        if p.is_dir() {
            collect_modules(&p, out)?;
        } else if module_name(&p).is_some() {
            out.insert(p);
        }
    }
    Ok(())
}

/// `foo` for `foo.ko`, `foo.ko.xz`, `foo.ko.zst`, `foo.ko.gz`.
fn module_name(p: &Path) -> Option<&str> {
    let n = p.file_name()?.to_str()?;
    ["", ".xz", ".zst", ".gz"]
        .iter()
        .find_map(|c| n.strip_suffix(c)?.strip_suffix(".ko"))
}

fn strip_compression(rel: &Path) -> PathBuf {
    let s = rel.to_string_lossy();
    for c in [".xz", ".zst", ".gz"] {
        if let Some(s) = s.strip_suffix(c) {
            return PathBuf::from(s);
        }
    }
    rel.to_path_buf()
}

/// Copies a module, decompressing `.ko.xz`/`.ko.zst`/`.ko.gz` (busybox insmod and modprobe
/// take plain `.ko` only).
fn copy_module(from: &Path, to: &Path) -> anyhow::Result<()> {
    let ext = from.extension().and_then(|e| e.to_str()).unwrap_or("");
    let tool = match ext {
        "xz" => "xz",
        "zst" => "zstd",
        "gz" => "gzip",
        _ => return copy_file(from, to),
    };
    if let Some(dir) = to.parent() {
        fs::create_dir_all(dir)?;
    }
    let out = Command::new(tool)
        .args(["-d", "-c"])
        .arg(from)
        .output()
        .with_context(|| format!("cannot run {tool} to decompress {}", from.display()))?;
    ensure!(
        out.status.success(),
        "{tool} -d -c {} failed",
        from.display()
    );
    fs::write(to, out.stdout)?;
    Ok(())
}

/// `find . | cpio -o -H newc | gzip` in the staging tree, files owned by root.
fn write_cpio_gz(stage: &Path, out: &Path) -> anyhow::Result<()> {
    let mut find = Command::new("find")
        .args([".", "-print0"])
        .current_dir(stage)
        .stdout(Stdio::piped())
        .spawn()
        .context("cannot run find")?;
    let mut cpio = Command::new("cpio")
        .args([
            "--null",
            "--create",
            "--format=newc",
            "--owner=0:0",
            "--quiet",
        ])
        .current_dir(stage)
        .stdin(find.stdout.take().context("find stdout")?)
        .stdout(Stdio::piped())
        .spawn()
        .context("cannot run cpio (package cpio)")?;
    let file = fs::File::create(out).with_context(|| format!("creating {}", out.display()))?;
    let gzip = Command::new("gzip")
        .args(["-6", "-n", "-c"])
        .stdin(cpio.stdout.take().context("cpio stdout")?)
        .stdout(file)
        .status()
        .context("cannot run gzip")?;
    let (f, c) = (find.wait()?, cpio.wait()?);
    ensure!(
        f.success() && c.success() && gzip.success(),
        "building {} failed (find {f}, cpio {c}, gzip {gzip})",
        out.display()
    );
    Ok(())
}

/// The VM's `/init`: mounts, modules, then every test binary per backend, then the result
/// line and power off. Output markers (parsed by [`Parser`]):
/// `== vm kernel <release> backend <b>`, `== vm test <name> backend <b>` before a binary,
/// `== vm done <name> backend <b> rc=<n> secs=<s>` after it,
/// `NETPATH-VM-RESULT rc=<n>` at the end.
/// Which backends the test binaries run under, and extra libtest arguments.
struct Plan {
    backends: Vec<String>,
    libtest_args: Vec<String>,
}

/// Single-quotes a word for the VM's shell.
fn sh_quote(w: &str) -> String {
    format!("'{}'", w.replace('\'', r"'\''"))
}

fn init_script(
    version: &str,
    modules: &[String],
    bin: &Path,
    tests: &[&str],
    plan: &Plan,
) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        r#"#!/bin/sh
# Generated by `cargo xtask vm-test` (xtask/src/vm.rs).
export PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root TERM=dumb
mount -t devtmpfs devtmpfs /dev
exec </dev/console >/dev/console 2>&1
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mkdir -p /dev/pts /dev/shm
mount -t devpts devpts /dev/pts
mount -t tmpfs -o mode=1777 tmpfs /dev/shm
ln -s /proc/self/fd /dev/fd
ln -s /proc/self/fd/0 /dev/stdin
ln -s /proc/self/fd/1 /dev/stdout
ln -s /proc/self/fd/2 /dev/stderr
mount -t tmpfs -o mode=0755 tmpfs /run
# /tmp stays on the initramfs: a workspace under /tmp holds the netpath bin there.
chmod 1777 /tmp
mount -t bpf bpf /sys/fs/bpf
mount -t tracefs tracefs /sys/kernel/tracing
mount -t debugfs debugfs /sys/kernel/debug
mount -t securityfs securityfs /sys/kernel/security
ip link set lo up
echo "vm: $(uname -r), $(nproc) cpus, $(free -m | awk '/Mem:/ {{print $2}}') MiB"
M=/lib/modules/{version}"#
    );
    for m in modules {
        let _ = writeln!(s, "insmod $M/{m} || echo \"vm: insmod {m} failed\"");
    }
    let _ = writeln!(s, "echo \"== vm netpath doctor\"\n{} doctor", bin.display());
    let _ = writeln!(
        s,
        r#"cd /tmp
rc=0
run() {{
  b=$1; t=$2
  echo "== vm test $t backend $b"
  start=$(date +%s)
  NETPATH_BACKEND=$b timeout -s KILL {PER_BINARY_TIMEOUT_SECS} /tests/$t --test-threads=1 {extra}
  r=$?
  echo "== vm done $t backend $b rc=$r secs=$(($(date +%s) - start))"
  [ $r -eq 0 ] || rc=1
}}"#,
        extra = plan
            .libtest_args
            .iter()
            .map(|a| sh_quote(a))
            .collect::<Vec<_>>()
            .join(" ")
    );
    for (i, b) in plan.backends.iter().map(|b| sh_quote(b)).enumerate() {
        let _ = writeln!(s, "echo \"== vm kernel $(uname -r) backend \"{b}");
        for t in tests {
            if i > 0 && BACKEND_INDEPENDENT.contains(t) {
                continue;
            }
            let _ = writeln!(s, "run {b} {t}");
        }
    }
    s.push_str(
        r#"echo "NETPATH-VM-RESULT rc=$rc"
sync
poweroff -f
echo o > /proc/sysrq-trigger
"#,
    );
    s
}

/// Reads the console: markers of [`init_script`] and libtest lines.
#[derive(Default)]
struct Parser {
    outcome: VmOutcome,
    current: Option<BinaryRun>,
    /// Inside libtest's closing `failures:` list (names, one per indented line).
    in_failures: bool,
    /// The test libtest last started (`test NAME ... `).
    last_test: String,
}

impl Parser {
    fn line(&mut self, line: &str) {
        if let Some(i) = line.find("NETPATH-VM-RESULT rc=") {
            let v = &line[i + "NETPATH-VM-RESULT rc=".len()..];
            self.outcome.rc = v.split_whitespace().next().and_then(|n| n.parse().ok());
            return;
        }
        let t = line.trim();
        if !t.starts_with("test result:")
            && let Some(name) = t.strip_prefix("test ").and_then(|r| r.split(" ...").next())
        {
            self.last_test = name.to_owned();
        }
        if self.outcome.kernel_oops.is_none()
            && let Some(i) = ["BUG: ", "Oops: ", "Kernel panic"]
                .iter()
                .find_map(|k| line.find(k))
        {
            let during = match &self.current {
                Some(r) => format!(
                    " (during {} backend {}, test {})",
                    r.binary, r.backend, self.last_test
                ),
                None => String::new(),
            };
            self.outcome.kernel_oops = Some(format!("{}{during}", &line[i..]));
        }
        if let Some(rest) = t.strip_prefix("== vm kernel ") {
            if let Some((release, _)) = rest.split_once(" backend ") {
                self.outcome.kernel = release.to_owned();
            }
        } else if let Some(rest) = t.strip_prefix("== vm test ") {
            self.finish();
            if let Some((binary, backend)) = rest.split_once(" backend ") {
                self.current = Some(BinaryRun {
                    binary: binary.to_owned(),
                    backend: backend.to_owned(),
                    ..Default::default()
                });
            }
        } else if let Some(rest) = t.strip_prefix("== vm done ") {
            if let Some(run) = &mut self.current {
                for w in rest.split_whitespace() {
                    if let Some(n) = w.strip_prefix("rc=") {
                        run.rc = n.parse().ok();
                    } else if let Some(n) = w.strip_prefix("secs=") {
                        run.secs = n.parse().ok();
                    }
                }
            }
            self.finish();
        } else if let Some(run) = &mut self.current {
            // libtest ends a failing run with "failures:", the names indented, a blank
            // line (the per-test output blocks before it also start with "failures:",
            // followed by a blank line, so they add nothing).
            if t == "failures:" {
                self.in_failures = true;
                run.failed_tests.clear();
            } else if self.in_failures && line.starts_with("    ") && !t.contains(' ') {
                run.failed_tests.push(t.to_owned());
            } else {
                self.in_failures = false;
                if t.starts_with("test result:") {
                    run.counts.add_line(t);
                }
            }
        }
    }

    fn finish(&mut self) {
        self.in_failures = false;
        if let Some(run) = self.current.take() {
            self.outcome.counts.passed += run.counts.passed;
            self.outcome.counts.failed += run.counts.failed;
            // A binary that crashed or was killed without a libtest failure still fails once.
            if run.rc != Some(0) && run.counts.failed == 0 {
                self.outcome.counts.failed += 1;
            }
            self.outcome.runs.push(run);
        }
    }
}

/// Boots the kernel with the initramfs, streams the serial console to stdout and `log`,
/// and parses it; kills qemu after `args.timeout` seconds.
fn boot(kernel: &Kernel, initramfs: &Path, log: &Path, args: &VmArgs) -> anyhow::Result<VmOutcome> {
    let mut qemu = Command::new("qemu-system-x86_64");
    qemu.args([
        "-accel",
        &args.accel,
        "-m",
        &args.memory.to_string(),
        "-smp",
        "2",
    ])
    .arg("-kernel")
    .arg(&kernel.vmlinuz)
    .arg("-initrd")
    .arg(initramfs)
    .args([
        "-append",
        "console=ttyS0 rdinit=/init panic=-1 quiet",
        "-nographic",
        "-no-reboot",
        "-nic",
        "none",
    ])
    .stdin(Stdio::null())
    .stdout(Stdio::piped());
    println!("$ {}", cmd::display(&qemu));
    let t0 = Instant::now();
    let mut child = qemu
        .spawn()
        .context("cannot run qemu-system-x86_64 (package qemu-system-x86)")?;
    let stdout = child.stdout.take().context("no stdout pipe")?;
    let (tx, rx) = mpsc::channel::<String>();
    std::thread::spawn(move || {
        let mut r = BufReader::new(stdout);
        let mut buf = Vec::new();
        loop {
            buf.clear();
            match r.read_until(b'\n', &mut buf) {
                Ok(0) | Err(_) => break,
                Ok(_) => {
                    let line = String::from_utf8_lossy(&buf);
                    let line = line.trim_end_matches(['\n', '\r']).replace('\r', "");
                    if tx.send(line).is_err() {
                        break;
                    }
                }
            }
        }
    });
    let mut log_file =
        fs::File::create(log).with_context(|| format!("creating {}", log.display()))?;
    let deadline = t0 + Duration::from_secs(args.timeout);
    let mut parser = Parser::default();
    let mut timed_out = false;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(line) => {
                println!("{line}");
                let _ = writeln!(log_file, "{line}");
                parser.line(&line);
                if parser.outcome.rc.is_some() {
                    // poweroff follows; give it a moment, then stop qemu regardless.
                    let grace = Instant::now() + Duration::from_secs(60);
                    while let Ok(line) =
                        rx.recv_timeout(grace.saturating_duration_since(Instant::now()))
                    {
                        println!("{line}");
                        let _ = writeln!(log_file, "{line}");
                    }
                    break;
                }
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
            Err(mpsc::RecvTimeoutError::Timeout) => {
                timed_out = true;
                let msg = format!(
                    "vm: no result after {} s: killing qemu (pid {})",
                    args.timeout,
                    child.id()
                );
                eprintln!("{msg}");
                let _ = writeln!(log_file, "{msg}");
                break;
            }
        }
    }
    // Gone (or going) after poweroff or a panic (-no-reboot); killed otherwise.
    let stop_by = Instant::now() + Duration::from_secs(if timed_out { 0 } else { 10 });
    while child.try_wait()?.is_none() && Instant::now() < stop_by {
        std::thread::sleep(Duration::from_millis(100));
    }
    if child.try_wait()?.is_none() {
        let _ = child.kill();
    }
    let status = child.wait()?;
    let vm_secs = t0.elapsed().as_secs_f64();
    parser.finish();
    let mut outcome = parser.outcome;
    outcome.timed_out = timed_out;
    outcome.vm_secs = vm_secs;
    println!("vm: qemu exited ({status}) after {vm_secs:.0} s");
    if outcome.rc.is_none() && !timed_out {
        eprintln!(
            "vm: the VM stopped without a NETPATH-VM-RESULT line (see {})",
            log.display()
        );
    }
    Ok(outcome)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_sort_numerically() {
        let mut v = [
            "6.1.0-9-cloud-amd64",
            "6.1.0-57-cloud-amd64",
            "6.1.0-10-cloud-amd64",
        ];
        v.sort_by_key(|s| version_key(s));
        assert_eq!(v[2], "6.1.0-57-cloud-amd64");
    }

    #[test]
    fn ldd_output_paths() {
        let out = "\tlinux-vdso.so.1 (0x00007ffc)\n\
                   \tlibc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x00007f92)\n\
                   \t/lib64/ld-linux-x86-64.so.2 (0x00007f925cf44000)\n";
        assert_eq!(
            ldd_paths(out),
            [
                PathBuf::from("/lib/x86_64-linux-gnu/libc.so.6"),
                PathBuf::from("/lib64/ld-linux-x86-64.so.2")
            ]
        );
    }

    #[test]
    fn module_names_and_compression() {
        assert_eq!(module_name(Path::new("a/veth.ko")), Some("veth"));
        assert_eq!(module_name(Path::new("a/veth.ko.xz")), Some("veth"));
        assert_eq!(module_name(Path::new("a/veth.ko.zst")), Some("veth"));
        assert_eq!(module_name(Path::new("a/modules.dep")), None);
        assert_eq!(
            strip_compression(Path::new("kernel/veth.ko.zst")),
            Path::new("kernel/veth.ko")
        );
    }

    #[test]
    fn parses_the_console() {
        let mut p = Parser::default();
        for l in [
            "[    1.0] random kernel line",
            "== vm kernel 6.1.0-57-cloud-amd64 backend auto",
            "== vm test lab backend auto",
            "running 2 tests",
            "test a ... ok",
            "test b ... some output of the test FAILED",
            "",
            "failures:",
            "",
            "---- b stdout ----",
            "thread 'b' panicked at netpath/tests/lab.rs:1:2:",
            "",
            "failures:",
            "    b",
            "",
            "test result: FAILED. 1 passed; 1 failed; 1 ignored; 0 measured; 0 filtered out",
            "== vm done lab backend auto rc=101 secs=12",
            "== vm test trace backend auto",
            "test result: ok. 5 passed; 0 failed; 0 ignored",
            "== vm done trace backend auto rc=0 secs=30",
            "== vm test crash backend auto",
            "== vm done crash backend auto rc=137 secs=900",
            "== vm test oops backend fentry",
            "test one ... [  219.843472] BUG: kernel NULL pointer dereference, address: 0",
            "[  219.843472] Kernel panic - not syncing: Fatal exception in interrupt",
        ] {
            p.line(l);
        }
        p.finish();
        let o = p.outcome;
        assert_eq!(o.kernel, "6.1.0-57-cloud-amd64");
        assert_eq!(o.rc, None);
        assert_eq!(
            o.kernel_oops.as_deref(),
            Some(
                "BUG: kernel NULL pointer dereference, address: 0 \
                 (during oops backend fentry, test one)"
            )
        );
        assert_eq!(
            o.counts,
            Counts {
                passed: 6,
                failed: 3
            }
        );
        assert_eq!(o.runs.len(), 4);
        assert_eq!(o.runs[3].rc, None);
        assert_eq!(o.runs[0].failed_tests, ["b"]);
        assert_eq!((o.runs[0].rc, o.runs[0].secs), (Some(101), Some(12)));
        assert_eq!(o.runs[2].rc, Some(137));
        assert!(!o.ok());
    }

    #[test]
    fn init_runs_each_binary_per_backend() {
        let s = init_script(
            "6.1.0-57-cloud-amd64",
            &["kernel/net/llc/llc.ko".into()],
            Path::new("/w/netpath"),
            &["lab", "trace"],
            &Plan {
                backends: BACKENDS.iter().map(|b| (*b).to_owned()).collect(),
                libtest_args: vec!["it's".into()],
            },
        );
        assert!(s.starts_with("#!/bin/sh\n"));
        assert!(s.contains("insmod $M/kernel/net/llc/llc.ko"));
        assert_eq!(
            s.matches(&format!("run '{}' trace", BACKENDS[0])).count(),
            1
        );
        assert!(s.contains(r"--test-threads=1 'it'\''s'"));
        assert_eq!(
            s.matches("\nrun ").count(),
            1 + BACKENDS.len(),
            "lab once, trace per backend"
        );
        assert!(s.contains("NETPATH-VM-RESULT rc=$rc"));
    }
}
