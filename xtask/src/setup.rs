//! `cargo xtask setup`: installs what building and testing netpath needs on Debian 12.
//!
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

/// Debian packages every run needs: the lab (nftables, iproute2, and docker.io for the real
/// `/usr/sbin/docker-proxy` of the published-port driver; the daemon is not started), the
/// traffic generators (sockperf, iperf3), bpftool for inspecting loaded programs, chromium
/// (headless, `xtask screenshot` of the HTML report) and prometheus (its `promtool` checks the
/// exporter's output and the example scrape config; the tests start a server of their own),
/// python3-venv for kubernetes-validate's venv, protobuf-compiler (`protoc`: the containerd
/// client's build generates its gRPC code), containernetworking-plugins (the CNI bridge and
/// host-local plugins the containerd tests make pods with; containerd and `ctr` come with
/// docker.io).
const APT_BASE: &[&str] = &[
    "python3-venv",
    "nftables",
    "iproute2",
    "protobuf-compiler",
    "containernetworking-plugins",
    "docker.io",
    "sockperf",
    "iperf3",
    "bpftool",
    "chromium",
    "prometheus",
];
/// Docker engine, for the tests that run the real Docker network drivers.
const APT_DOCKER: &[&str] = &["docker.io"];
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

/// Optional parts of the setup, each wanted only by the tests that use it.
#[derive(Args, Clone, Copy, Debug, Default)]
pub struct SetupArgs {
    /// Also install Docker (docker.io), for tests against real Docker networks.
    #[arg(long)]
    pub docker: bool,
    /// Also install qemu and Debian's cloud kernel, and fetch the 6.12 cloud kernel from
    /// backports into target/vm/kernels (the host's apt sources untouched), for the VM tests.
    #[arg(long)]
    pub vm: bool,
    /// With `vm`: leave out the backports kernel (`vm-test --kernel 6.1`; qemu is fetched).
    #[arg(skip)]
    pub installed_vm_kernel_only: bool,
}

impl SetupArgs {
    /// Every Debian package this setup wants.
    fn apt_packages(&self) -> Vec<&'static str> {
        let mut pkgs = APT_BASE.to_vec();
        if self.docker {
            pkgs.extend_from_slice(APT_DOCKER);
        }
        if self.vm {
            pkgs.extend_from_slice(APT_VM);
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
    toolchain_components()?;
    bpf_linker()?;
    kubernetes_validate()?;
    securityfs();
    if args.vm {
        let vm_dir = crate::target_dir(&crate::workspace_root())?.join("vm");
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

/// rust-src for the nightly (needed by `-Z build-std=core`), clippy and rustfmt for the
/// default toolchain. Uses the installed nightly; never fetches a new toolchain.
fn toolchain_components() -> anyhow::Result<()> {
    let sysroot = nightly_sysroot()?;
    if sysroot.join("lib/rustlib/src/rust/library").is_dir() {
        println!("setup: rust-src present for {NIGHTLY}");
    } else {
        println!("setup: adding rust-src to {NIGHTLY}");
        cmd::run(Command::new("rustup").args([
            "component",
            "add",
            "rust-src",
            "--toolchain",
            NIGHTLY,
        ]))?;
    }

    let have = |sub: &str| cmd::probe(Command::new("cargo").args([sub, "--version"])).is_some();
    if have("clippy") && have("fmt") {
        println!("setup: clippy and rustfmt present");
    } else {
        println!("setup: adding clippy and rustfmt to the default toolchain");
        cmd::run(Command::new("rustup").args(["component", "add", "clippy", "rustfmt"]))?;
    }
    Ok(())
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

/// Mounts securityfs so `/sys/kernel/security/lockdown` can be read. Failure is harmless.
/// The kubernetes-validate release the fleet test checks the DaemonSet with (offline: it
/// ships Kubernetes' schemas).
const KUBERNETES_VALIDATE: &str = "kubernetes-validate==1.37.0";

/// kubernetes-validate (PyPI) in a venv of its own under `target/tools/venv`: Debian's Python
/// is externally managed, and nothing outside the target directory changes.
fn kubernetes_validate() -> anyhow::Result<()> {
    let venv = crate::target_dir(&crate::workspace_root())?.join("tools/venv");
    if venv.join("bin/kubernetes-validate").is_file() {
        return Ok(());
    }
    if !venv.join("bin/pip").is_file() {
        cmd::run(Command::new("python3").args(["-m", "venv"]).arg(&venv))?;
    }
    cmd::run(Command::new(venv.join("bin/pip")).args(["install", "-q", KUBERNETES_VALIDATE]))
}

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
    fn optional_packages_only_when_asked() {
        let base = SetupArgs::default().apt_packages();
        assert_eq!(base, APT_BASE);
        let all = SetupArgs {
            docker: true,
            vm: true,
            ..Default::default()
        }
        .apt_packages();
        assert!(all.contains(&"docker.io") && all.contains(&"qemu-system-x86"));
    }
}
