//! What `setup --vm` fetches from the backports of this machine's Debian suite
//! (`bookworm-backports` on Debian 12), with apt run on private sources, lists, cache and an
//! empty dpkg status under `target/vm/apt`: the machine's own apt sources, lists, cache and
//! installed packages are neither read for it nor written.
//!
//! - The newest 6.12 LTS cloud kernel ([`BACKPORTS_SERIES`]), unpacked with `dpkg-deb -x`
//!   into `target/vm/kernels/<version>`, its modules indexed with `depmod -b` (the package
//!   ships no `modules.dep`; its postinst would make one).
//! - qemu from backports (10.0 seen), unpacked into `target/vm/qemu/<version>` and run from
//!   there with the libraries of Debian 12's qemu package: Debian 12's own qemu 7.2 corrupts
//!   the guest's EFLAGS under TCG with the 6.12 kernel (double faults and NULL dereferences
//!   at random points of the boot: 5 of 6 boots with the default CPU model, 4 of 12 with
//!   `-cpu max`, also with one vCPU and with `mitigations=off`), while qemu 10 booted it 13 of
//!   13 times.

use std::{
    fs,
    path::{Path, PathBuf},
    process::{Command, Stdio},
    time::{Duration, SystemTime},
};

use anyhow::{Context as _, bail, ensure};

use super::debian::{FLAVOUR, version_key};
use crate::cmd;

/// The kernel series fetched from backports.
pub const BACKPORTS_SERIES: &str = "6.12";
/// The Debian sources this machine's apt uses (deb822); `/etc/apt/sources.list` if absent.
const DEBIAN_SOURCES: &str = "/etc/apt/sources.list.d/debian.sources";
const SOURCES_LIST: &str = "/etc/apt/sources.list";
/// Private lists older than this are refreshed (a new point release every week or two);
/// younger ones are used as they are, so a second setup needs no network.
const LISTS_MAX_AGE: Duration = Duration::from_secs(24 * 3600);
/// Marks a fully unpacked tree (written last).
const UNPACKED_MARK: &str = ".netpath-unpacked";
/// The qemu packages unpacked together: the emulator, its option ROMs (`linuxboot_dma.bin`
/// for `-kernel`) and the BIOS it wants.
const QEMU_PACKAGES: &[&str] = &["qemu-system-x86", "qemu-system-data", "seabios"];

/// qemu as fetched: the binary and the directories its firmware is in (`-L`).
#[derive(Clone, Debug)]
pub struct Qemu {
    pub bin: PathBuf,
    pub data_dirs: Vec<PathBuf>,
}

/// The newest unpacked qemu under `vm_dir/qemu`.
pub fn qemu(vm_dir: &Path) -> anyhow::Result<Qemu> {
    let dir = vm_dir.join("qemu");
    let root = dir.join(newest_unpacked(&dir, "qemu")?);
    Ok(Qemu {
        bin: root.join("usr/bin/qemu-system-x86_64"),
        data_dirs: vec![root.join("usr/share/qemu"), root.join("usr/share/seabios")],
    })
}

/// The newest version of `what` unpacked under `dir`; its absence says what fetches it.
pub fn newest_unpacked(dir: &Path, what: &str) -> anyhow::Result<String> {
    unpacked(dir).pop().with_context(|| {
        format!(
            "no {what} in {}: `cargo xtask setup --vm` fetches it",
            dir.display()
        )
    })
}

/// Versions completely unpacked under `dir`, oldest first.
pub fn unpacked(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = fs::read_dir(dir)
        .into_iter()
        .flatten()
        .filter_map(|e| e.ok())
        .filter(|e| e.path().join(UNPACKED_MARK).is_file())
        .filter_map(|e| e.file_name().into_string().ok())
        .collect();
    v.sort_by_key(|s| version_key(s));
    v
}

/// `setup --vm`: makes sure qemu and (with `kernel`) the newest kernel of
/// [`BACKPORTS_SERIES`] are unpacked under `vm_dir`. Quick and offline when they are there
/// and the private lists are younger than [`LISTS_MAX_AGE`]; a mirror that cannot be reached
/// is an error only when something wanted was never fetched.
pub fn ensure(vm_dir: &Path, kernel: bool) -> anyhow::Result<()> {
    let apt = PrivateApt::new(&vm_dir.join("apt"))?;
    let (kernels, qemus) = (vm_dir.join("kernels"), vm_dir.join("qemu"));
    if apt.lists_age().is_none_or(|age| age > LISTS_MAX_AGE)
        && let Err(e) = apt.update()
    {
        let have_kernel = unpacked(&kernels).pop();
        let have_qemu = unpacked(&qemus).pop();
        if have_qemu.is_none() || (kernel && have_kernel.is_none()) {
            bail!(
                "cannot fetch the VM's {BACKPORTS_SERIES} kernel and qemu: the Debian mirror {} does \
                 not answer for {} ({e:#})",
                apt.source.uri,
                apt.source.suite
            );
        }
        println!(
            "setup: cannot refresh the {} lists ({e:#}); using what was fetched before",
            apt.source.suite
        );
        return Ok(());
    }
    if kernel {
        let (package, version) = apt.newest_kernel()?;
        apt.fetch(&kernels, &version, &[&package], |root| {
            cmd::run(Command::new("depmod").arg("-b").arg(root).arg(&version))?;
            let vmlinuz = root.join(format!("boot/vmlinuz-{version}"));
            ensure!(
                vmlinuz.is_file(),
                "the package has no {}",
                vmlinuz.display()
            );
            Ok(())
        })?;
    }
    // A version with an epoch (`1:10.0.2+ds-…`) names a directory without the colon.
    let version = apt.candidate(QEMU_PACKAGES[0])?.replace(':', "_");
    apt.fetch(&qemus, &version, QEMU_PACKAGES, |root| {
        let bin = root.join("usr/bin/qemu-system-x86_64");
        let ldd = cmd::probe(Command::new("ldd").arg(&bin)).unwrap_or_default();
        let missing: Vec<&str> = ldd.lines().filter(|l| l.contains("not found")).collect();
        ensure!(
            missing.is_empty(),
            "{} needs libraries this machine lacks: {}",
            bin.display(),
            missing.join("; ").trim()
        );
        ensure!(
            cmd::probe(Command::new(&bin).arg("--version")).is_some(),
            "{} --version does not run",
            bin.display()
        );
        Ok(())
    })
}

/// Where the machine's apt gets Debian from: the first source that is neither security nor
/// updates.
#[derive(Debug, PartialEq)]
struct DebianSource {
    uri: String,
    /// `<codename>-backports`.
    suite: String,
    signed_by: Option<String>,
}

impl DebianSource {
    fn of_this_machine() -> anyhow::Result<DebianSource> {
        let parsed = match fs::read_to_string(DEBIAN_SOURCES) {
            Ok(text) => parse_deb822(&text),
            Err(_) => fs::read_to_string(SOURCES_LIST)
                .ok()
                .and_then(|t| parse_one_line(&t)),
        };
        parsed.with_context(|| {
            format!("no Debian mirror found in {DEBIAN_SOURCES} or {SOURCES_LIST}")
        })
    }

    fn list_line(&self) -> String {
        let opts = self
            .signed_by
            .as_ref()
            .map(|k| format!("[signed-by={k}] "))
            .unwrap_or_default();
        format!("deb {opts}{} {} main\n", self.uri, self.suite)
    }
}

/// The main Debian stanza of a deb822 `.sources` file.
fn parse_deb822(text: &str) -> Option<DebianSource> {
    text.split("\n\n").find_map(|stanza| {
        let field = |name: &str| {
            stanza.lines().find_map(|l| {
                let (k, v) = l.split_once(':')?;
                (k.trim() == name).then(|| v.trim().to_owned())
            })
        };
        let uri = field("URIs")?.split_whitespace().next()?.to_owned();
        let codename = field("Suites")?
            .split_whitespace()
            .find(|s| !s.contains('-'))?
            .to_owned();
        Some(DebianSource {
            uri,
            suite: format!("{codename}-backports"),
            signed_by: field("Signed-By"),
        })
    })
}

/// The first plain `deb URI codename …` line of a one-line-style `sources.list`.
fn parse_one_line(text: &str) -> Option<DebianSource> {
    text.lines().find_map(|l| {
        let mut w = l.split_whitespace();
        (w.next()? == "deb").then_some(())?;
        let mut rest: Vec<&str> = w.collect();
        let mut signed_by = None;
        if rest.first()?.starts_with('[') {
            let end = rest.iter().position(|s| s.ends_with(']'))?;
            for o in &rest[..=end] {
                if let Some(k) = o.trim_matches(['[', ']']).strip_prefix("signed-by=") {
                    signed_by = Some(k.to_owned());
                }
            }
            rest.drain(..=end);
        }
        let (uri, codename) = (rest.first()?, rest.get(1)?);
        (!codename.contains('-')).then(|| DebianSource {
            uri: (*uri).to_owned(),
            suite: format!("{codename}-backports"),
            signed_by,
        })
    })
}

/// apt with its own sources, lists, cache and (empty) dpkg status under one directory.
struct PrivateApt {
    dir: PathBuf,
    source: DebianSource,
}

impl PrivateApt {
    fn new(dir: &Path) -> anyhow::Result<PrivateApt> {
        for d in ["lists/partial", "cache/archives/partial", "debs"] {
            fs::create_dir_all(dir.join(d))?;
        }
        let source = DebianSource::of_this_machine()?;
        let list = dir.join("sources.list");
        let line = source.list_line();
        if fs::read_to_string(&list).ok().as_deref() != Some(line.as_str()) {
            fs::write(&list, &line)?;
            // Another source: the lists in hand are not its lists.
            let _ = fs::remove_file(dir.join("updated"));
        }
        Ok(PrivateApt {
            dir: dir.to_path_buf(),
            source,
        })
    }

    /// `apt-get`/`apt-cache` with every path apt reads or writes redirected here.
    fn apt(&self, program: &str) -> Command {
        let d = &self.dir;
        let mut c = Command::new(program);
        for (k, v) in [
            ("Dir::Etc::SourceList", d.join("sources.list")),
            ("Dir::Etc::SourceParts", PathBuf::from("/dev/null")),
            ("Dir::State::Lists", d.join("lists")),
            ("Dir::Cache", d.join("cache")),
            // The host's installed packages are none of this apt's business.
            ("Dir::State::status", PathBuf::from("/dev/null")),
        ] {
            c.arg("-o").arg(format!("{k}={}", v.display()));
        }
        // Downloads go to a root-owned directory: no `_apt` sandbox user.
        c.args(["-o", "APT::Sandbox::User=root", "-q"])
            .env("DEBIAN_FRONTEND", "noninteractive")
            .stdin(Stdio::null());
        c
    }

    fn lists_age(&self) -> Option<Duration> {
        let t = fs::metadata(self.dir.join("updated"))
            .ok()?
            .modified()
            .ok()?;
        SystemTime::now().duration_since(t).ok()
    }

    /// `apt-get update` of the private lists; a transient failure is an error too.
    fn update(&self) -> anyhow::Result<()> {
        let ok = cmd::status(self.apt("apt-get").args(["update", "--error-on=any"]))?;
        ensure!(ok, "apt-get update on the private lists failed, see above");
        fs::write(self.dir.join("updated"), "")?;
        Ok(())
    }

    /// The newest `linux-image-<series>.*-cloud-amd64` in the lists: (package, version).
    fn newest_kernel(&self) -> anyhow::Result<(String, String)> {
        let prefix = format!("linux-image-{BACKPORTS_SERIES}.");
        let out = cmd::probe(self.apt("apt-cache").args(["pkgnames", &prefix]))
            .context("apt-cache pkgnames on the private lists failed")?;
        newest_kernel_package(&out).with_context(|| {
            format!(
                "no linux-image-{BACKPORTS_SERIES}.*-{FLAVOUR} in the {} lists of {} \
                 (remove {} to fetch them again)",
                self.source.suite,
                self.source.uri,
                self.dir.display()
            )
        })
    }

    /// The version apt would fetch of `package` (the backports one: the lists know no other).
    fn candidate(&self, package: &str) -> anyhow::Result<String> {
        let out = cmd::probe(
            self.apt("apt-cache")
                .args(["show", "--no-all-versions", package]),
        )
        .with_context(|| format!("no {package} in the {} lists", self.source.suite))?;
        out.lines()
            .find_map(|l| l.strip_prefix("Version: "))
            .map(str::to_owned)
            .with_context(|| format!("apt-cache show {package} names no version"))
    }

    /// Unpacks `packages` into `<dir>/<version>` unless that is there already: downloaded,
    /// `dpkg-deb -x` into `<version>.partial`, `check`ed, renamed into place with its mark
    /// (so an interrupted setup never leaves a tree that looks complete); older versions and
    /// the `.deb` files are removed.
    fn fetch(
        &self,
        dir: &Path,
        version: &str,
        packages: &[&str],
        check: impl FnOnce(&Path) -> anyhow::Result<()>,
    ) -> anyhow::Result<()> {
        let done = dir.join(version);
        let older = unpacked(dir);
        if older.iter().any(|v| v == version) {
            println!("setup: {version} present ({})", done.display());
            return Ok(());
        }
        let partial = dir.join(format!("{version}.partial"));
        if partial.exists() {
            fs::remove_dir_all(&partial)?;
        }
        fs::create_dir_all(&partial)?;
        for p in packages {
            let deb = self.download(p)?;
            cmd::run(Command::new("dpkg-deb").arg("-x").arg(&deb).arg(&partial))?;
            let _ = fs::remove_file(&deb);
        }
        check(&partial)?;
        if done.exists() {
            fs::remove_dir_all(&done)?;
        }
        fs::rename(&partial, &done)?;
        fs::write(done.join(UNPACKED_MARK), "")?;
        println!(
            "setup: {} {version} unpacked in {}",
            packages.join(" "),
            done.display()
        );
        for v in older {
            let _ = fs::remove_dir_all(dir.join(v));
        }
        Ok(())
    }

    /// `apt-get download` into the private `debs` directory; the `.deb` path.
    fn download(&self, package: &str) -> anyhow::Result<PathBuf> {
        let debs = self.dir.join("debs");
        cmd::run(
            self.apt("apt-get")
                .arg("download")
                .arg(package)
                .current_dir(&debs),
        )?;
        fs::read_dir(&debs)?
            .filter_map(|e| e.ok())
            .map(|e| e.path())
            .find(|p| {
                p.file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| n.starts_with(&format!("{package}_")) && n.ends_with(".deb"))
            })
            .with_context(|| format!("apt-get download {package} left no .deb"))
    }
}

/// From `apt-cache pkgnames` output, the image package of the highest version of the
/// series: `linux-image-6.12.95+deb12-cloud-amd64` → version `6.12.95+deb12-cloud-amd64`.
/// Debug symbols (`-dbg`) and unsigned builds (`-unsigned`) are other packages.
fn newest_kernel_package(pkgnames: &str) -> Option<(String, String)> {
    pkgnames
        .split_whitespace()
        .filter_map(|p| {
            let version = p.strip_prefix("linux-image-")?;
            let release = version.strip_suffix(&format!("-{FLAVOUR}"))?;
            let ok = release.starts_with(&format!("{BACKPORTS_SERIES}.")) && !release.contains('-');
            ok.then(|| (p.to_owned(), version.to_owned()))
        })
        .max_by_key(|(_, v)| version_key(v))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn newest_backports_image() {
        let names = "linux-image-6.12.90+deb12-cloud-amd64\n\
                     linux-image-6.12.95+deb12-cloud-amd64-dbg\n\
                     linux-image-6.12.95+deb12-cloud-amd64-unsigned\n\
                     linux-image-6.12.9+deb12-cloud-amd64\n\
                     linux-image-6.12.90+deb12.1-cloud-amd64\n\
                     linux-image-6.12.95+deb12-amd64\n\
                     linux-image-6.12.95+deb12-cloud-amd64\n";
        assert_eq!(
            newest_kernel_package(names),
            Some((
                "linux-image-6.12.95+deb12-cloud-amd64".into(),
                "6.12.95+deb12-cloud-amd64".into()
            ))
        );
        assert_eq!(
            newest_kernel_package("linux-image-6.1.0-57-cloud-amd64"),
            None
        );
    }

    #[test]
    fn mirror_from_this_machines_sources() {
        let deb822 = "Types: deb\n# a comment\nURIs: http://deb.debian.org/debian\n\
                      Suites: bookworm bookworm-updates\nComponents: main\n\
                      Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg\n\n\
                      Types: deb\nURIs: http://deb.debian.org/debian-security\n\
                      Suites: bookworm-security\nComponents: main\n";
        let s = parse_deb822(deb822).unwrap();
        assert_eq!(
            s.list_line(),
            "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] \
             http://deb.debian.org/debian bookworm-backports main\n"
        );
        let one = "# x\ndeb http://security.debian.org/ bookworm-security main\n\
                   deb [arch=amd64 signed-by=/k.gpg] http://m.example/debian bookworm main\n";
        assert_eq!(
            parse_one_line(one),
            Some(DebianSource {
                uri: "http://m.example/debian".into(),
                suite: "bookworm-backports".into(),
                signed_by: Some("/k.gpg".into()),
            })
        );
    }
}
