//! The kernels `vm-test` boots, and how the second one gets here.
//!
//! - Debian's cloud kernel as installed by `linux-image-cloud-amd64` (6.1 on Debian 12):
//!   the newest `/boot/vmlinuz-*-cloud-amd64`, modules under `/lib/modules/<version>`.
//! - The newest 6.12 LTS cloud kernel of the suite's backports (`bookworm-backports`):
//!   kprobes and fentry like 6.1, and also `sock:sk_data_ready`, `tcp:tcp_sendmsg_locked`,
//!   `sock:sock_recv_length`, netkit (built in), ipvlan and netem. `setup --vm` fetches it
//!   into `target/vm/kernels/<version>` (see [`super::backports`]).

use std::{
    fs,
    path::{Path, PathBuf},
};

use anyhow::{Context as _, ensure};

use super::backports::{BACKPORTS_SERIES, newest_unpacked};
use super::debian::{FLAVOUR, version_key};

/// One bootable kernel: its image, its `uname -r` and where its modules are.
#[derive(Clone, Debug, PartialEq)]
pub struct Kernel {
    pub vmlinuz: PathBuf,
    /// `uname -r`, from the image's file name (`vmlinuz-<version>`).
    pub version: String,
    /// The root `lib/modules/<version>` sits under: `/` for an installed kernel, the
    /// unpacked package for a fetched one (`modinfo -b`, `depmod -b`).
    pub base: PathBuf,
}

impl Kernel {
    /// A kernel image; its modules are looked for beside it first (`<root>/boot/vmlinuz-V`
    /// → `<root>/lib/modules/V`, an unpacked package), then under `/lib/modules`.
    pub fn from_vmlinuz(vmlinuz: &Path) -> anyhow::Result<Kernel> {
        let name = vmlinuz
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or_default();
        let version = name
            .strip_prefix("vmlinuz-")
            .with_context(|| format!("{} is not named vmlinuz-<version>", vmlinuz.display()))?
            .to_owned();
        let beside = vmlinuz
            .parent()
            .and_then(Path::parent)
            .map(Path::to_path_buf);
        let base = beside
            .filter(|b| modules_dir(b, &version).join("modules.dep").is_file())
            .unwrap_or_else(|| PathBuf::from("/"));
        let k = Kernel {
            vmlinuz: vmlinuz.to_path_buf(),
            version,
            base,
        };
        ensure!(
            k.modules().join("modules.dep").is_file(),
            "no modules for {} in {} (nor beside {})",
            k.version,
            k.modules().display(),
            vmlinuz.display()
        );
        Ok(k)
    }

    /// `lib/modules/<version>` under [`Kernel::base`].
    pub fn modules(&self) -> PathBuf {
        modules_dir(&self.base, &self.version)
    }

    /// `6.1`, `6.12`: what `--kernel` matches.
    pub fn series(&self) -> String {
        series_of(&self.version)
    }
}

fn modules_dir(base: &Path, version: &str) -> PathBuf {
    base.join("lib/modules").join(version)
}

fn series_of(version: &str) -> String {
    version.split('.').take(2).collect::<Vec<_>>().join(".")
}

/// The kernels to boot: each `--kernel` value (a series: `6.1` for the installed cloud
/// kernel, `6.12` for the fetched one; or the path of a vmlinuz), by default both.
pub fn select(wanted: &[String], vm_dir: &Path) -> anyhow::Result<Vec<Kernel>> {
    if wanted.is_empty() {
        return Ok(vec![installed()?, fetched(vm_dir)?]);
    }
    wanted
        .iter()
        .map(|w| {
            if w.contains('/') {
                return Kernel::from_vmlinuz(Path::new(w));
            }
            if w == BACKPORTS_SERIES {
                return fetched(vm_dir);
            }
            let k = installed()?;
            ensure!(
                k.series() == *w,
                "no VM kernel {w}: --kernel takes {} (installed), {BACKPORTS_SERIES} (fetched by \
                 `cargo xtask setup --vm`) or the path of a vmlinuz",
                k.series()
            );
            Ok(k)
        })
        .collect()
}

/// Whether [`select`] needs the fetched backports kernel for these `--kernel` values.
pub fn wants_backports(wanted: &[String]) -> bool {
    wanted.is_empty() || wanted.iter().any(|w| w == BACKPORTS_SERIES)
}

/// The newest `/boot/vmlinuz-*-cloud-amd64` (package linux-image-cloud-amd64).
fn installed() -> anyhow::Result<Kernel> {
    let newest = newest_vmlinuz(Path::new("/boot")).with_context(|| {
        format!(
            "no /boot/vmlinuz-*-{FLAVOUR}: `cargo xtask setup --vm` installs \
             linux-image-{FLAVOUR}"
        )
    })?;
    Kernel::from_vmlinuz(&newest)
}

/// The newest fetched backports kernel under `target/vm/kernels`.
fn fetched(vm_dir: &Path) -> anyhow::Result<Kernel> {
    let dir = vm_dir.join("kernels");
    let version = newest_unpacked(&dir, &format!("{BACKPORTS_SERIES} kernel"))?;
    Kernel::from_vmlinuz(&dir.join(&version).join(format!("boot/vmlinuz-{version}")))
}

fn newest_vmlinuz(dir: &Path) -> Option<PathBuf> {
    let mut found: Vec<(Vec<u64>, PathBuf)> = fs::read_dir(dir)
        .ok()?
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            let name = e.file_name().into_string().ok()?;
            let ver = name.strip_prefix("vmlinuz-")?;
            ver.ends_with(&format!("-{FLAVOUR}"))
                .then(|| (version_key(ver), e.path()))
        })
        .collect();
    found.sort();
    found.pop().map(|(_, p)| p)
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
        assert_eq!(series_of("6.12.95+deb12-cloud-amd64"), "6.12");
        assert_eq!(series_of("6.1.0-57-cloud-amd64"), "6.1");
    }
}
