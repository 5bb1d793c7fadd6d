//! The VM's initramfs: busybox, one kernel's modules, `nft` and `docker-proxy` with their
//! shared libraries, the static test binaries, and an `/init` that runs them.
//!
//! The modules come from the kernel's own `lib/modules/<version>` (`/` for the installed
//! kernel, the unpacked package for a fetched one): [`MODULES`] are loaded at boot with
//! busybox `insmod` in dependency order (`modinfo -b <base> -k <version> -F depends`), and
//! the rest of the networking modules are there for the kernel to autoload through busybox
//! `modprobe`.

use std::{
    collections::BTreeSet,
    fmt::Write as _,
    fs,
    os::unix::fs::{PermissionsExt as _, symlink},
    path::{Path, PathBuf},
    process::{Command, Stdio},
};

use anyhow::{Context as _, ensure};

use super::{
    BACKEND_INDEPENDENT, Built, HOST_ONLY, PER_BINARY_TIMEOUT_SECS, VmArgs, is_static,
    kernels::Kernel,
};
use crate::cmd;

/// Kernel modules `/init` loads with `insmod` (their dependencies first): the lab's
/// devices (veth, bridge, vxlan, macvlan, dummy), its nftables NAT (`fib daddr type
/// local`, masquerade, dnat), TC (clsact and cls_bpf: 6.1 has no TCX, aya attaches
/// through netlink), netem for emulated cross-node delay and ipvlan. netkit is built into
/// the kernels that have it (6.7+), so it is no module here.
const MODULES: &[&str] = &[
    "veth",
    "bridge",
    "vxlan",
    "macvlan",
    "ipvlan",
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

/// Builds `vm_dir/initramfs-<version>.cpio.gz` from a fresh staging tree `vm_dir/initramfs`.
pub(super) fn build(
    vm_dir: &Path,
    kernel: &Kernel,
    built: &Built,
    args: &VmArgs,
) -> anyhow::Result<PathBuf> {
    let stage = vm_dir.join("initramfs");
    stage_base(&stage)?;

    // Kernel modules.
    let load_order = copy_modules(kernel, &stage)?;

    // netpath and its tests. The bin goes where the tests' CARGO_BIN_EXE_netpath points.
    copy_file(&built.bin, &in_stage(&stage, &built.bin))?;
    for (name, exe) in &built.tests {
        copy_file(exe, &stage.join("tests").join(name))?;
    }
    // The JSON schemas the tests validate against, where they look for them
    // (`CARGO_MANIFEST_DIR/../schemas`: the `netpath` directory must exist for the `..`).
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let root = root.canonicalize().unwrap_or(root);
    fs::create_dir_all(in_stage(&stage, &root.join("netpath")))?;
    for e in fs::read_dir(root.join("schemas")).context("reading schemas/")? {
        let p = e?.path();
        copy_file(&p, &in_stage(&stage, &p))?;
    }

    let tests = selected_tests(built, args)?;
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
        backends: args.backend_list(),
        libtest_args: args.libtest_args.clone(),
    };
    let init = init_script(&kernel.version, &load_order, &built.bin, &tests, &plan);
    let init_path = stage.join("init");
    fs::write(&init_path, init)?;
    fs::set_permissions(&init_path, fs::Permissions::from_mode(0o755))?;

    let out = vm_dir.join(format!("initramfs-{}.cpio.gz", kernel.version));
    write_cpio_gz(&stage, &out)?;
    let size = fs::metadata(&out)?.len();
    println!(
        "vm: initramfs {} ({:.1} MiB)",
        out.display(),
        size as f64 / (1 << 20) as f64
    );
    Ok(out)
}

/// A fresh staging tree at `stage` with what every kernel's image shares: directories,
/// busybox and its applets, the programs the lab runs with their libraries, /etc.
fn stage_base(stage: &Path) -> anyhow::Result<()> {
    if stage.exists() {
        fs::remove_dir_all(stage).with_context(|| format!("removing {}", stage.display()))?;
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
        copy_with_libs(p, stage)?;
    }
    for f in ETC_FILES {
        if Path::new(f).exists() {
            copy_file(Path::new(f), &in_stage(stage, Path::new(f)))?;
        }
    }
    fs::write(stage.join("etc/passwd"), "root:x:0:0:root:/root:/bin/sh\n")?;
    fs::write(stage.join("etc/group"), "root:x:0:\n")?;
    Ok(())
}

/// The test binaries the VM runs: those asked for with `--test`, or all but [`HOST_ONLY`].
pub(super) fn selected_tests<'b>(built: &'b Built, args: &VmArgs) -> anyhow::Result<Vec<&'b str>> {
    for t in &args.tests {
        ensure!(
            built.tests.contains_key(t),
            "no test binary {t} (there are: {})",
            built.tests.keys().cloned().collect::<Vec<_>>().join(", ")
        );
    }
    Ok(built
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
        .collect())
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
/// same paths in the staging tree. A library `ldd` does not find fails here: the program
/// would not start in the VM, where the failure says much less.
fn copy_with_libs(prog: &Path, stage: &Path) -> anyhow::Result<()> {
    copy_file(prog, &in_stage(stage, prog))?;
    let Some(out) = cmd::probe(Command::new("ldd").arg(prog)) else {
        return Ok(()); // static
    };
    for lib in netpath_common::ldd::files(&out) {
        let lib = lib.map_err(|name| {
            anyhow::anyhow!("{} needs {name}, which ldd does not find", prog.display())
        })?;
        copy_file(Path::new(lib), &in_stage(stage, Path::new(lib)))?;
    }
    Ok(())
}

/// Copies the modules of [`MODULES`] (with their dependencies) and of [`MODULE_DIRS`]
/// into the staging tree, decompressed, with a `modules.dep` that names them so; returns
/// the `insmod` order: paths relative to `/lib/modules/<version>`, dependencies first.
fn copy_modules(kernel: &Kernel, stage: &Path) -> anyhow::Result<Vec<String>> {
    let mut order = Vec::new();
    let mut seen = BTreeSet::new();
    for m in MODULES {
        resolve_module(kernel, m, &mut seen, &mut order)?;
    }
    let modules = kernel.modules();
    // Where /init looks for them: /lib/modules/<version>, whichever tree they came from.
    let dst_root = stage.join("lib/modules").join(&kernel.version);
    let mut files: BTreeSet<PathBuf> = order.iter().map(|(_, f)| f.clone()).collect();
    for dir in MODULE_DIRS {
        let d = modules.join("kernel").join(dir);
        if d.is_dir() {
            collect_modules(&d, &mut files)?;
        }
    }
    let net = modules.join("kernel/drivers/net");
    for e in fs::read_dir(&net).with_context(|| format!("reading {}", net.display()))? {
        let p = e?.path();
        if p.is_file() && module_name(&p).is_some() {
            files.insert(p);
        }
    }
    for f in &files {
        let rel = f.strip_prefix(&modules).unwrap_or(f);
        copy_module(f, &dst_root.join(strip_compression(rel)))?;
    }
    println!(
        "vm: {} kernel modules, {} loaded at boot",
        files.len(),
        order.len()
    );
    // modules.dep with the decompressed names; the other index files name no paths.
    let dep = fs::read_to_string(modules.join("modules.dep"))?;
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
        let p = modules.join(f);
        if p.is_file() {
            copy_file(&p, &dst_root.join(f))?;
        }
    }
    Ok(order
        .into_iter()
        .map(|(_, f)| {
            let rel = f.strip_prefix(&modules).unwrap_or(&f);
            strip_compression(rel).display().to_string()
        })
        .collect())
}

/// Depth-first over `modinfo -F depends`: pushes `(name, file)` after its dependencies.
/// Built-in modules (no file) are skipped.
fn resolve_module(
    kernel: &Kernel,
    name: &str,
    seen: &mut BTreeSet<String>,
    order: &mut Vec<(String, PathBuf)>,
) -> anyhow::Result<()> {
    if !seen.insert(name.to_owned()) {
        return Ok(());
    }
    let version = &kernel.version;
    let modinfo = |field: &str| {
        let mut c = Command::new("modinfo");
        c.arg("-b").arg(&kernel.base);
        c.args(["-k", version, "-F", field, name]);
        cmd::probe(&mut c).with_context(|| format!("`{}` failed", cmd::display(&c)))
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
        resolve_module(kernel, dep, seen, order)?;
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

/// Which backends the test binaries run under, and extra libtest arguments.
pub(super) struct Plan {
    /// Every backend the boots of this kernel run, the first of them with the binaries in
    /// `BACKEND_INDEPENDENT`.
    pub backends: Vec<String>,
    pub libtest_args: Vec<String>,
}

/// Single-quotes a word for the VM's shell.
fn sh_quote(w: &str) -> String {
    format!("'{}'", w.replace('\'', r"'\''"))
}

/// The VM's `/init`: mounts, modules, then every test binary per backend, then the result
/// line and power off. Output markers (parsed by `console::Parser`):
/// `== vm kernel <release> backend <b>`, `== vm test <name> backend <b>` before a binary,
/// `== vm done <name> backend <b> rc=<n> secs=<s>` after it,
/// `NETPATH-VM-RESULT rc=<n>` at the end.
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
  # The run-cost calibration attaches every probe 18 times: minutes under TCG, and its
  # timing means nothing here. `tracking` keeps it, so the calibration itself still runs.
  cost=0; [ "$t" = tracking ] && cost=
  NETPATH_RUN_COST=$cost NETPATH_BACKEND=$b timeout -s KILL {PER_BINARY_TIMEOUT_SECS} /tests/$t --test-threads=1 {extra}
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
    // Each boot runs the backends its command line names (`netpath_backends=a,b`, see
    // `console::boot`), so one image serves every boot of this kernel.
    s.push_str(
        r#"want=$(tr ' ' '\n' </proc/cmdline | sed -n 's/^netpath_backends=//p' | tr ',' ' ')
wants() { case " $want " in *" $1 "*) return 0;; esac; return 1; }
"#,
    );
    for (i, b) in plan.backends.iter().map(|b| sh_quote(b)).enumerate() {
        let _ = writeln!(s, "if wants {b}; then");
        let _ = writeln!(s, "echo \"== vm kernel $(uname -r) backend \"{b}");
        for t in tests {
            if i > 0 && BACKEND_INDEPENDENT.contains(t) {
                continue;
            }
            let _ = writeln!(s, "run {b} {t}");
        }
        s.push_str("fi\n");
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::vm::BACKENDS;

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
        for b in BACKENDS {
            assert_eq!(s.matches(&format!("if wants '{b}'; then")).count(), 1);
        }
    }
}
