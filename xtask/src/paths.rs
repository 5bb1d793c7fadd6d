//! Where things are: the workspace, cargo's target directory, the release binary.
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::Context as _;

use crate::cmd;

/// The workspace root: the parent of this crate's directory.
pub fn workspace_root() -> PathBuf {
    let manifest_dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    manifest_dir
        .parent()
        .map(PathBuf::from)
        .unwrap_or(manifest_dir)
}

/// Cargo's target directory for the workspace at `root` (`target/`, or `CARGO_TARGET_DIR`).
pub fn target_dir(root: &Path) -> anyhow::Result<PathBuf> {
    Ok(cargo_metadata::MetadataCommand::new()
        .no_deps()
        .current_dir(root)
        .exec()
        .context("cargo metadata")?
        .target_directory
        .into_std_path_buf())
}

/// Builds netpath in release mode and returns the binary's path.
pub fn release_netpath() -> anyhow::Result<PathBuf> {
    let root = workspace_root();
    cmd::run(
        Command::new("cargo")
            .args(["build", "--release", "--package", "netpath"])
            .current_dir(&root),
    )?;
    Ok(target_dir(&root)?.join("release/netpath"))
}
