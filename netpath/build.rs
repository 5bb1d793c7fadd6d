//! Builds the eBPF object with aya-build and leaves it in OUT_DIR for `include_bytes!`.
//! Without bpf-linker (or with AYA_BUILD_SKIP=1) it writes an empty object instead, so
//! `cargo check` and clippy work anywhere; the loader then says how to get the real one.
//! It also gives the binary the commit it is built from (`NETPATH_COMMIT`, for `-V`).
use anyhow::{Context as _, anyhow};

fn main() -> anyhow::Result<()> {
    commit();
    let out_dir = std::path::PathBuf::from(std::env::var_os("OUT_DIR").context("OUT_DIR")?);
    let obj = out_dir.join("netpath");
    println!("cargo:rerun-if-env-changed=AYA_BUILD_SKIP");
    let skip = std::env::var("AYA_BUILD_SKIP").is_ok_and(|v| v == "1" || v == "true");
    if skip || which::which("bpf-linker").is_err() {
        println!(
            "cargo:warning=eBPF build skipped (no bpf-linker or AYA_BUILD_SKIP); run `cargo xtask setup`"
        );
        std::fs::write(&obj, b"")?;
        return Ok(());
    }
    let metadata = cargo_metadata::MetadataCommand::new()
        .no_deps()
        .exec()
        .context("cargo metadata")?;
    let pkg = metadata
        .packages
        .into_iter()
        .find(|p| p.name.as_str() == "netpath-ebpf")
        .ok_or_else(|| anyhow!("netpath-ebpf package not found"))?;
    let root = pkg
        .manifest_path
        .parent()
        .ok_or_else(|| anyhow!("no parent for {}", pkg.manifest_path))?;
    aya_build::build_ebpf(
        [aya_build::Package {
            name: "netpath-ebpf",
            root_dir: root.as_str(),
            ..Default::default()
        }],
        aya_build::Toolchain::default(),
    )
}

/// `NETPATH_COMMIT`: the checkout's commit, rebuilt when HEAD moves; unset outside a git
/// checkout (a crate tarball).
fn commit() {
    let git = |args: &[&str]| {
        std::process::Command::new("git")
            .args(args)
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
    };
    let Some(hash) = git(&["rev-parse", "--short=12", "HEAD"]) else {
        return;
    };
    // HEAD names a branch whose ref file (or packed-refs) moves with each commit; in a
    // worktree, HEAD is the worktree's own and the refs are the common directory's.
    let dir = git(&["rev-parse", "--absolute-git-dir"]);
    let common = git(&["rev-parse", "--path-format=absolute", "--git-common-dir"]);
    if let Some(d) = &dir {
        println!("cargo:rerun-if-changed={d}/HEAD");
    }
    if let Some(c) = &common {
        println!("cargo:rerun-if-changed={c}/packed-refs");
        if let Some(r) = git(&["symbolic-ref", "-q", "HEAD"]) {
            println!("cargo:rerun-if-changed={c}/{r}");
        }
    }
    println!("cargo:rustc-env=NETPATH_COMMIT={hash}");
}
