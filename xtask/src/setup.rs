//! `cargo xtask setup`: installs what building and running netpath needs on Debian 12, and
//! with flags what the tests, the bench, the screenshot and the VM tests need besides.
//!
//! Each xtask command asks for what it uses: `run` (the main job, netpath on its embedded
//! lab) only the lab's packages and the eBPF toolchain; `test` adds the test-only tools.
//! Every check is cheap and every install happens only when its check fails, so a second
//! run installs nothing and takes about a second.

use std::{
    fs,
    path::{Path, PathBuf},
    process::{Command, Stdio},
};

use anyhow::{Context as _, bail};
use clap::Args;

use crate::cmd;

/// Debian packages the lab needs: nftables (the `nft` netpath's NAT tables go through),
/// iproute2, and docker.io for one file, Docker's userland proxy `/usr/sbin/docker-proxy`,
/// which the published-proxy driver runs as dockerd would (no daemon is started). The Docker
/// tests and `xtask churn` start the daemon of the same package. protobuf-compiler: building
/// netpath runs `protoc` (the containerd client's build generates its gRPC code).
const APT_LAB: &[&str] = &["nftables", "iproute2", "docker.io", "protobuf-compiler"];
/// `netpath bench` measures its harness against sockperf and iperf3 on the same path, and
/// serve left on with redis-tools' server and benchmark in two containers.
const APT_BENCH: &[&str] = &["sockperf", "iperf3", "redis-tools"];
/// Test-only tools: the bench's (the output tests run `netpath bench`), bpftool (the tests
/// list BPF programs and links before and after a run), prometheus (its `promtool` checks the
/// exporter's output and the example scrape configs; the tests start a server of their own),
/// python3-venv for kubernetes-validate's venv, containernetworking-plugins (the CNI bridge
/// and host-local plugins the containerd tests make pods with; containerd and `ctr` come with
/// docker.io), and tshark (the output tests read `trace --pcapng`'s file with it).
const APT_TEST: &[&str] = &[
    "containernetworking-plugins",
    "tshark",
    "sockperf",
    "iperf3",
    "redis-tools",
    "bpftool",
    "prometheus",
    "python3-venv",
];
/// `xtask soak` counts BPF programs, maps and links with bpftool between runs.
const APT_SOAK: &[&str] = &["bpftool"];
/// `xtask profile` samples the machine with perf.
const APT_PROFILE: &[&str] = &["linux-perf"];
/// Headless chromium, for `xtask screenshot` of the HTML report.
const APT_SCREENSHOT: &[&str] = &["chromium"];
/// A second kernel (with kprobes and fentry) under qemu, and what the initramfs needs
/// (`kmod` for `modinfo` and `depmod`). qemu-system-x86 brings the libraries of the qemu
/// that runs the VMs; that qemu and the third kernel (6.12) come from backports and are no
/// packages installed here: see `vm::backports`.
const APT_VM: &[&str] = &[
    "qemu-system-x86",
    "linux-image-cloud-amd64",
    "busybox-static",
    "cpio",
    "kmod",
];

/// The bpf-linker release the eBPF build is known to work with.
const BPF_LINKER_VERSION: &str = "0.13.0";
/// The toolchain the eBPF crate builds with (aya-build runs `rustup run nightly`).
const NIGHTLY: &str = "nightly";

/// What to install besides the lab's packages and the eBPF toolchain (`cargo xtask run`'s
/// needs, always installed).
#[derive(Args, Clone, Copy, Debug, Default)]
pub struct SetupArgs {
    /// Also install what `cargo xtask test` needs: sockperf, iperf3, bpftool, prometheus, tshark,
    /// kubernetes-validate (in a venv under target/tools), clippy and rustfmt.
    #[arg(long)]
    pub tests: bool,
    /// Also install what `cargo xtask bench` needs: sockperf, iperf3 and redis-tools.
    #[arg(long)]
    pub bench: bool,
    /// Also install what `cargo xtask soak` needs: bpftool.
    #[arg(long)]
    pub soak: bool,
    /// Also install what `cargo xtask screenshot` needs: chromium.
    #[arg(long)]
    pub screenshot: bool,
    /// Also install what `cargo xtask profile` needs: perf.
    #[arg(long)]
    pub profile: bool,
    /// Also install qemu and Debian's cloud kernel, and fetch the 6.12 cloud kernel from
    /// backports into target/vm/kernels (the host's apt sources untouched), for the VM tests.
    #[arg(long)]
    pub vm: bool,
    /// With `vm`: leave out the backports kernel (`vm-test --kernel 6.1`; qemu is fetched).
    #[arg(skip)]
    pub installed_vm_kernel_only: bool,
}

impl SetupArgs {
    /// Every Debian package this setup wants, each once, the lab's first.
    fn apt_packages(&self) -> Vec<&'static str> {
        let wanted = [
            (true, APT_LAB),
            (self.tests, APT_TEST),
            (self.bench, APT_BENCH),
            (self.soak, APT_SOAK),
            (self.screenshot, APT_SCREENSHOT),
            (self.profile, APT_PROFILE),
            (self.vm, APT_VM),
        ];
        let mut pkgs: Vec<&'static str> = Vec::new();
        for (_, list) in wanted.into_iter().filter(|(on, _)| *on) {
            for p in list {
                if !pkgs.contains(p) {
                    pkgs.push(p);
                }
            }
        }
        pkgs
    }
}

pub fn run(args: &SetupArgs) -> anyhow::Result<()> {
    // SAFETY: geteuid has no preconditions and cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("setup: must run as root (it installs packages and mounts securityfs)");
        std::process::exit(1);
    }
    apt(&args.apt_packages())?;
    nightly_rust_src()?;
    bpf_linker()?;
    if args.tests {
        lint_components()?;
        kubernetes_validate()?;
    }
    securityfs();
    if args.vm {
        let vm_dir = crate::paths::target_dir(&crate::paths::workspace_root())?.join("vm");
        crate::vm::backports::ensure(&vm_dir, !args.installed_vm_kernel_only)?;
    }
    Ok(())
}

/// Installs the Debian packages that are missing, with one `apt-get update` first.
fn apt(pkgs: &[&str]) -> anyhow::Result<()> {
    let missing: Vec<&str> = pkgs
        .iter()
        .copied()
        .filter(|p| !dpkg_installed(p))
        .collect();
    if missing.is_empty() {
        println!("setup: apt packages present: {}", pkgs.join(" "));
        return Ok(());
    }
    println!("setup: installing apt packages: {}", missing.join(" "));
    cmd::run(
        Command::new("apt-get")
            .args(["update", "-q"])
            .env("DEBIAN_FRONTEND", "noninteractive")
            .stdin(Stdio::null()),
    )?;
    cmd::run(
        Command::new("apt-get")
            .args(["install", "-q", "-y", "--no-install-recommends"])
            .args(&missing)
            .env("DEBIAN_FRONTEND", "noninteractive")
            .stdin(Stdio::null()),
    )
}

fn dpkg_installed(pkg: &str) -> bool {
    cmd::probe(Command::new("dpkg-query").args(["-W", "-f=${Status}", pkg]))
        .is_some_and(|s| s.trim() == "install ok installed")
}

/// rust-src for the nightly: the eBPF crate builds `core` itself (`-Z build-std=core`).
/// Uses the installed nightly; never fetches a new toolchain.
fn nightly_rust_src() -> anyhow::Result<()> {
    let sysroot = nightly_sysroot()?;
    if sysroot.join("lib/rustlib/src/rust/library").is_dir() {
        println!("setup: rust-src present for {NIGHTLY}");
        return Ok(());
    }
    println!("setup: adding rust-src to {NIGHTLY}");
    cmd::run(Command::new("rustup").args(["component", "add", "rust-src", "--toolchain", NIGHTLY]))
}

/// clippy and rustfmt for the default toolchain, which the tests' lint steps run.
fn lint_components() -> anyhow::Result<()> {
    let have = |sub: &str| cmd::probe(Command::new("cargo").args([sub, "--version"])).is_some();
    if have("clippy") && have("fmt") {
        println!("setup: clippy and rustfmt present");
        return Ok(());
    }
    println!("setup: adding clippy and rustfmt to the default toolchain");
    cmd::run(Command::new("rustup").args(["component", "add", "clippy", "rustfmt"]))
}

fn nightly_sysroot() -> anyhow::Result<PathBuf> {
    let out =
        cmd::probe(Command::new("rustc").args([&format!("+{NIGHTLY}"), "--print", "sysroot"]))
            .with_context(|| {
                format!(
                    "`rustc +{NIGHTLY}` does not run: install a {NIGHTLY} toolchain with rustup \
                 (setup does not fetch toolchains)"
                )
            })?;
    Ok(PathBuf::from(out.trim()))
}

/// bpf-linker, built against the nightly's own libLLVM so that it reads the bitcode that
/// nightly writes (see PLATFORM.md). Skipped when the pinned version already runs.
fn bpf_linker() -> anyhow::Result<()> {
    if let Some(out) = cmd::probe(Command::new("bpf-linker").arg("--version"))
        && out.split_whitespace().any(|w| w == BPF_LINKER_VERSION)
    {
        println!("setup: bpf-linker {BPF_LINKER_VERSION} present");
        return Ok(());
    }

    let llvm_major = nightly_llvm_major()?;
    let lib_dir = nightly_sysroot()?.join("lib");
    let libllvm = find_libllvm(&lib_dir)?;
    println!(
        "setup: building bpf-linker {BPF_LINKER_VERSION} against {}/{libllvm} (llvm-{llvm_major}); takes a minute or two",
        lib_dir.display()
    );
    let lib_dir = lib_dir.display();
    let rustflags = format!(
        "-C link-arg=-L{lib_dir} -C link-arg=-l:{libllvm} -C link-arg=-Wl,-rpath,{lib_dir}"
    );
    cmd::run(
        Command::new("cargo")
            .arg(format!("+{NIGHTLY}"))
            .args(["install", &format!("bpf-linker@{BPF_LINKER_VERSION}")])
            .args(["--locked", "--force", "--no-default-features", "--features"])
            .arg(format!("llvm-{llvm_major},no-llvm-linking"))
            .env("RUSTFLAGS", rustflags)
            // Away from the workspace, so its .cargo/config.toml does not apply.
            .current_dir(std::env::temp_dir())
            .stdin(Stdio::null()),
    )?;
    match cmd::probe(Command::new("bpf-linker").arg("--version")) {
        Some(out) if out.split_whitespace().any(|w| w == BPF_LINKER_VERSION) => {
            println!("setup: {}", out.trim());
            Ok(())
        }
        Some(out) => bail!("installed bpf-linker reports {:?}", out.trim()),
        None => bail!("bpf-linker was installed but does not run (is ~/.cargo/bin on PATH?)"),
    }
}

/// The major LLVM version of the nightly, from `rustc +nightly -vV` ("LLVM version: 22.1.4").
fn nightly_llvm_major() -> anyhow::Result<String> {
    let out = cmd::probe(Command::new("rustc").args([&format!("+{NIGHTLY}"), "-vV"]))
        .with_context(|| format!("`rustc +{NIGHTLY} -vV` failed"))?;
    parse_llvm_major(&out)
        .with_context(|| format!("no LLVM version in `rustc +{NIGHTLY} -vV`:\n{out}"))
}

fn parse_llvm_major(rustc_vv: &str) -> Option<String> {
    let version = rustc_vv
        .lines()
        .find_map(|l| l.strip_prefix("LLVM version:"))?
        .trim();
    let major = version.split('.').next()?;
    (!major.is_empty() && major.bytes().all(|b| b.is_ascii_digit())).then(|| major.to_owned())
}

/// The file name of the toolchain's `libLLVM.so.*` in `lib_dir`.
fn find_libllvm(lib_dir: &Path) -> anyhow::Result<String> {
    let mut names: Vec<String> = fs::read_dir(lib_dir)
        .with_context(|| format!("reading {}", lib_dir.display()))?
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.starts_with("libLLVM.so."))
        .collect();
    names.sort();
    names
        .into_iter()
        .next()
        .with_context(|| format!("no libLLVM.so.* in {}", lib_dir.display()))
}

/// The kubernetes-validate release the fleet test checks the DaemonSet with (offline: it
/// ships Kubernetes' schemas).
const KUBERNETES_VALIDATE: &str = "kubernetes-validate==1.37.0";

/// kubernetes-validate (PyPI) in a venv of its own under `target/tools/venv`: Debian's Python
/// is externally managed, and nothing outside the target directory changes.
fn kubernetes_validate() -> anyhow::Result<()> {
    let venv = crate::paths::target_dir(&crate::paths::workspace_root())?.join("tools/venv");
    if venv.join("bin/kubernetes-validate").is_file() {
        return Ok(());
    }
    if !venv.join("bin/pip").is_file() {
        cmd::run(Command::new("python3").args(["-m", "venv"]).arg(&venv))?;
    }
    cmd::run(Command::new(venv.join("bin/pip")).args(["install", "-q", KUBERNETES_VALIDATE]))
}

/// Mounts securityfs so `/sys/kernel/security/lockdown` can be read. Failure is harmless.
fn securityfs() {
    const DIR: &str = "/sys/kernel/security";
    let mounted = fs::read_to_string("/proc/mounts").is_ok_and(|m| {
        m.lines()
            .any(|l| l.split_whitespace().nth(2) == Some("securityfs"))
    });
    if !mounted {
        println!("setup: mounting securityfs on {DIR}");
        let ok = Command::new("mount")
            .args(["-t", "securityfs", "none", DIR])
            .status()
            .is_ok_and(|s| s.success());
        if !ok {
            println!("setup: could not mount securityfs (harmless: lockdown state unknown)");
            return;
        }
    }
    match fs::read_to_string(format!("{DIR}/lockdown")) {
        Ok(l) => println!("setup: securityfs mounted; lockdown: {}", l.trim()),
        Err(_) => println!("setup: securityfs mounted; no lockdown file"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn llvm_major_from_rustc_vv() {
        let vv = "rustc 1.97.0-nightly (e50aa6fba 2026-05-19)\nbinary: rustc\n\
                  host: x86_64-unknown-linux-gnu\nLLVM version: 22.1.4\n";
        assert_eq!(parse_llvm_major(vv).as_deref(), Some("22"));
        assert_eq!(parse_llvm_major("rustc 1.0\n"), None);
    }

    #[test]
    fn run_installs_the_lab_only() {
        let run = SetupArgs::default().apt_packages();
        assert_eq!(run, APT_LAB);
        for test_only in [
            "chromium",
            "prometheus",
            "python3-venv",
            "bpftool",
            "sockperf",
        ] {
            assert!(!run.contains(&test_only), "{test_only} in {run:?}");
        }
    }

    #[test]
    fn each_command_adds_its_own_tools_once() {
        let tests = SetupArgs {
            tests: true,
            ..Default::default()
        }
        .apt_packages();
        assert!(tests.starts_with(APT_LAB));
        assert!(APT_TEST.iter().all(|p| tests.contains(p)));
        assert!(!tests.contains(&"chromium") && !tests.contains(&"qemu-system-x86"));
        let bench = SetupArgs {
            bench: true,
            ..Default::default()
        }
        .apt_packages();
        assert_eq!(bench, [APT_LAB, APT_BENCH].concat());
        let all = SetupArgs {
            tests: true,
            bench: true,
            soak: true,
            screenshot: true,
            profile: true,
            vm: true,
            ..Default::default()
        }
        .apt_packages();
        let mut unique = all.clone();
        unique.sort_unstable();
        unique.dedup();
        assert_eq!(unique.len(), all.len(), "{all:?}");
        assert!(all.contains(&"chromium") && all.contains(&"qemu-system-x86"));
    }
}
