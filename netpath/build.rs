//! Builds the eBPF object with aya-build and leaves it in OUT_DIR for `include_bytes!`.
//! Without bpf-linker (or with AYA_BUILD_SKIP=1) it writes an empty object instead, so
//! `cargo check` and clippy work anywhere; the loader then says how to get the real one.
use anyhow::{Context as _, anyhow};

fn main() -> anyhow::Result<()> {
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
