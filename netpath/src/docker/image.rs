//! The agent image, built without a registry.
//!
//! `FROM scratch`, the running netpath binary, the shared libraries it needs (and the
//! dynamic loader) at their own paths,
//! `ENTRYPOINT ["/netpath", "agent"]`. The build context is a tar made in memory and
//! sent through the engine's build API (the classic builder, available on API 1.41).

use std::collections::{BTreeSet, HashMap};
use std::hash::Hasher;
use std::io::Read;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};
use bollard::query_parameters::{BuildImageOptions, RemoveImageOptions};
use futures::StreamExt;

use super::engine::is_not_found;
use super::{Engine, LABEL, LABEL_KEEP};

/// Repository name of the agent image.
pub const AGENT_REPO: &str = "netpath-agent";
/// Label holding a hash of the binary inside, so a rebuilt netpath gets a fresh image.
pub const LABEL_EXE: &str = "netpath.exe";

/// `netpath-agent:<version>`.
pub fn agent_tag() -> String {
    format!("{AGENT_REPO}:{}", env!("CARGO_PKG_VERSION"))
}

/// Make sure the engine has `netpath-agent:<version>` built from the running binary
/// (`/proc/self/exe`); build it if missing or built from another binary. With `keep`
/// the image is labelled so that [`cleanup_docker`](super::cleanup_docker) leaves it.
/// Returns the tag.
pub fn ensure_agent_image(engine: &Engine, keep: bool) -> Result<String> {
    ensure_agent_image_from(engine, Path::new("/proc/self/exe"), keep)
}

/// [`ensure_agent_image`] with the netpath binary at `exe` (tests run from a test binary,
/// so they pass the real `netpath`). The binary must route `netpath agent …` to
/// [`agent_main`](super::agent_main).
pub fn ensure_agent_image_from(engine: &Engine, exe: &Path, keep: bool) -> Result<String> {
    let tag = agent_tag();
    let hash = file_hash(exe)?;
    match engine.block_on(engine.docker().inspect_image(&tag)) {
        Ok(img) => {
            let labels = img.config.and_then(|c| c.labels).unwrap_or_default();
            let same = labels.get(LABEL_EXE) == Some(&hash);
            if same && (!keep || labels.contains_key(LABEL_KEEP)) {
                return Ok(tag);
            }
            let old = img.id;
            build(engine, exe, &tag, &hash, keep)?;
            // The image the tag used to name, if nothing uses it any more.
            if let Some(old) = old {
                let _ = engine.block_on(engine.docker().remove_image(
                    &old,
                    None::<RemoveImageOptions>,
                    None,
                ));
            }
            Ok(tag)
        }
        Err(e) if is_not_found(&e) => {
            build(engine, exe, &tag, &hash, keep)?;
            Ok(tag)
        }
        Err(e) => Err(engine.err(e, &format!("inspecting image {tag}"))),
    }
}

fn build(engine: &Engine, exe: &Path, tag: &str, hash: &str, keep: bool) -> Result<()> {
    let context = build_context(exe)?;
    let mut labels = HashMap::from([
        (LABEL.to_string(), "1".to_string()),
        (LABEL_EXE.to_string(), hash.to_string()),
        (
            "netpath.version".to_string(),
            env!("CARGO_PKG_VERSION").to_string(),
        ),
    ]);
    if keep {
        labels.insert(LABEL_KEEP.to_string(), "1".to_string());
    }
    let opts = BuildImageOptions {
        dockerfile: "Dockerfile".into(),
        t: Some(tag.to_string()),
        rm: true,
        forcerm: true,
        labels: Some(labels),
        ..Default::default()
    };
    let what = format!("building image {tag}");
    engine.block_on(async {
        let mut s =
            engine
                .docker()
                .build_image(opts, None, Some(bollard::body_full(context.into())));
        let mut log = String::new();
        while let Some(item) = s.next().await {
            let info = item.map_err(|e| engine.err(e, &what))?;
            if let Some(line) = info.stream {
                log.push_str(&line);
            }
            if let Some(d) = info.error_detail {
                bail!(
                    "{what}: {}\n{log}",
                    d.message.unwrap_or_else(|| "build failed".into())
                );
            }
        }
        Ok(())
    })
}

/// The build context: `Dockerfile` and `rootfs/` holding the binary as `/netpath` plus
/// every shared library and the loader at their absolute paths.
pub fn build_context(exe: &Path) -> Result<Vec<u8>> {
    let mut b = tar::Builder::new(Vec::new());
    let dockerfile =
        "FROM scratch\nCOPY rootfs/ /\nENTRYPOINT [\"/netpath\", \"agent\"]\nCMD [\"hold\"]\n";
    append(&mut b, "Dockerfile", dockerfile.as_bytes(), 0o644)?;
    let bin = std::fs::read(exe).with_context(|| format!("cannot read {}", exe.display()))?;
    append(&mut b, "rootfs/netpath", &bin, 0o755)?;
    for lib in shared_libraries(exe)? {
        let data = std::fs::read(&lib).with_context(|| format!("cannot read {}", lib.display()))?;
        let mode = std::fs::metadata(&lib)
            .map(|m| m.permissions().mode() & 0o7777)
            .unwrap_or(0o755);
        let rel = lib.strip_prefix("/").unwrap_or(&lib);
        append(&mut b, &format!("rootfs/{}", rel.display()), &data, mode)?;
    }
    b.into_inner().context("finishing the build context")
}

/// Adds a regular file to a tar archive, owned by root and dated 0 (so the same content
/// makes the same archive).
pub fn append(b: &mut tar::Builder<Vec<u8>>, path: &str, data: &[u8], mode: u32) -> Result<()> {
    let mut h = tar::Header::new_gnu();
    h.set_entry_type(tar::EntryType::Regular);
    h.set_size(data.len() as u64);
    h.set_mode(mode);
    h.set_uid(0);
    h.set_gid(0);
    h.set_mtime(0);
    b.append_data(&mut h, path, data)
        .with_context(|| format!("adding {path} to the build context"))
}

/// The shared libraries and dynamic loader `exe` needs, as absolute paths (from `ldd`).
/// Empty for a static binary.
pub fn shared_libraries(exe: &Path) -> Result<Vec<PathBuf>> {
    // `/proc/self/exe` would name ldd's own process: resolve it here first. A binary
    // replaced since it started (`… (deleted)`) is copied aside for ldd to read.
    // The copy is created exclusively under a random name (never through a link someone
    // planted in the world-writable temp directory: netpath runs as root), and removed when
    // `_tmp` drops.
    let mut _tmp = None;
    let real = match std::fs::canonicalize(exe) {
        Ok(p) if p.exists() => p,
        _ => {
            let mut t = tempfile::Builder::new()
                .prefix("netpath-ldd-")
                .permissions(std::fs::Permissions::from_mode(0o700))
                .tempfile()
                .context("cannot create a temporary file for ldd")?;
            let mut src = std::fs::File::open(exe)
                .with_context(|| format!("cannot open {}", exe.display()))?;
            std::io::copy(&mut src, t.as_file_mut())
                .with_context(|| format!("cannot copy {}", exe.display()))?;
            let path = t.path().to_path_buf();
            _tmp = Some(t.into_temp_path());
            path
        }
    };
    let out = Command::new("ldd").arg(&real).output();
    let out = out.context("cannot run ldd (needed to find netpath's shared libraries)")?;
    let text = String::from_utf8_lossy(&out.stdout);
    let err = String::from_utf8_lossy(&out.stderr);
    if !out.status.success() {
        if text.contains("not a dynamic executable")
            || err.contains("not a dynamic executable")
            || text.contains("statically linked")
        {
            return Ok(Vec::new());
        }
        bail!("ldd {} failed: {}", real.display(), err.trim());
    }
    parse_ldd(&text)
}

/// The files `ldd` output names (`netpath_common::ldd::files`), each once and sorted: the
/// image copies each file once. A library `not found` is an error: the agent would not start.
pub fn parse_ldd(text: &str) -> Result<Vec<PathBuf>> {
    let mut v = BTreeSet::new();
    for file in netpath_common::ldd::files(text) {
        match file {
            Ok(path) => v.insert(PathBuf::from(path)),
            Err(name) => bail!("shared library {name} not found"),
        };
    }
    Ok(v.into_iter().collect())
}

/// A content hash of a file (SipHash, hex): tells one netpath build from another.
fn file_hash(p: &Path) -> Result<String> {
    let mut f = std::fs::File::open(p).with_context(|| format!("cannot open {}", p.display()))?;
    #[allow(deprecated)]
    let mut h = std::hash::SipHasher::new();
    let mut buf = vec![0u8; 1 << 20];
    let mut len = 0u64;
    loop {
        let n = f
            .read(&mut buf)
            .with_context(|| format!("reading {}", p.display()))?;
        if n == 0 {
            break;
        }
        h.write(&buf[..n]);
        len += n as u64;
    }
    Ok(format!("{:016x}-{len}", h.finish()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ldd_files_once_sorted_and_a_missing_one_an_error() {
        // How a line reads is `ldd::files`'s (tested there); this keeps each file once, sorted.
        let out = "\tlibz.so.1 => /lib/libz.so.1 (0x1)\n\
                   \t/lib64/ld-linux-x86-64.so.2 (0x2)\n\
                   \tlibz.so.1 => /lib/libz.so.1 (0x1)\n";
        let v = parse_ldd(out).unwrap();
        assert_eq!(
            v,
            vec![
                PathBuf::from("/lib/libz.so.1"),
                PathBuf::from("/lib64/ld-linux-x86-64.so.2"),
            ]
        );
        let e = parse_ldd("\tlibfoo.so => not found\n").unwrap_err();
        assert_eq!(e.to_string(), "shared library libfoo.so not found");
        assert!(parse_ldd("\tstatically linked\n").unwrap().is_empty());
    }

    #[test]
    fn context_has_dockerfile_binary_and_loader() {
        let ctx = build_context(Path::new("/proc/self/exe")).unwrap();
        let mut a = tar::Archive::new(ctx.as_slice());
        let names: Vec<String> = a
            .entries()
            .unwrap()
            .map(|e| e.unwrap().path().unwrap().display().to_string())
            .collect();
        assert!(names.contains(&"Dockerfile".to_string()), "{names:?}");
        assert!(names.contains(&"rootfs/netpath".to_string()), "{names:?}");
        assert!(
            names.iter().any(|n| n.contains("ld-linux")),
            "no loader in {names:?}"
        );
    }
}
