//! netpath's layers, bottom first, and the check that no file imports one above its own
//! (`cargo xtask circles` runs it; so does the test below). A layer is a set of top-level
//! modules (a folder or a file of `netpath/src`); a file may import files of its own layer and
//! of the layers below. Loops inside a layer are `circles`' to find.
use std::path::Path;

/// Bottom first. The picture `netpath/src/lib.rs` tells in words.
pub const LAYERS: &[(&str, &[&str])] = &[
    (
        "options every layer names: --wait, --cpus, --proto, progress hooks",
        &["choice", "options", "progress"],
    ),
    (
        "the OS: namespaces, netlink, BTF, /proc, PM QoS, affinity",
        &["sys"],
    ),
    ("the drivers, one row each", &["driver"]),
    ("a path's devices and ends", &["path"]),
    ("traffic and the netns lab", &["harness", "lab"]),
    ("the Docker engine and its lab", &["docker"]),
    (
        "containers netpath did not start: runtimes, inspection",
        &["runtime"],
    ),
    ("the eBPF side: backends, programs, maps", &["probe"]),
    ("what a run produced", &["record"]),
    (
        "the engines",
        &["measure", "trace", "tune", "validate", "bench"],
    ),
    ("how results are shown", &["render"]),
    ("the commands and the exporter", &["serve", "cli"]),
    ("the crate's root", &["lib", "main"]),
];

/// `cargo xtask circles`, after the loops: prints every import up a layer; fails if one.
pub fn run() -> anyhow::Result<()> {
    let (dir, file) = crate::circles::CRATES[0];
    let up = upward(&crate::paths::workspace_root().join(dir), file)?;
    for u in &up {
        println!("{dir}: {u}");
    }
    println!("{dir}: {} imports run up a layer", up.len());
    if !up.is_empty() {
        anyhow::bail!(
            "{} imports run up netpath's layers (xtask/src/layers.rs)",
            up.len()
        );
    }
    Ok(())
}

/// The layer of a file (`measure/answer.rs` → the engines'), by its top-level module.
pub fn layer_of(file: &str) -> Option<usize> {
    let top = file.split('/').next()?.trim_end_matches(".rs");
    LAYERS.iter().position(|(_, mods)| mods.contains(&top))
}

/// Every import from a file to a file in a higher layer, as `from → to (layer → layer)`; a
/// file in no layer is one line too (a new top-level module goes into the table).
pub fn upward(src: &Path, root_file: &str) -> anyhow::Result<Vec<String>> {
    let edges = crate::circles::edges(src, root_file)?;
    let mut out = Vec::new();
    for (from, tos) in &edges {
        let Some(lf) = layer_of(from) else {
            out.push(format!("{from}: in no layer of xtask/src/layers.rs"));
            continue;
        };
        for to in tos {
            match layer_of(to) {
                Some(lt) if lt > lf => out.push(format!(
                    "{from} → {to} ({} → {})",
                    LAYERS[lf].0, LAYERS[lt].0
                )),
                _ => {}
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_import_of_netpath_runs_up_a_layer() {
        let root = crate::paths::workspace_root();
        let (dir, file) = crate::circles::CRATES[0];
        let up = upward(&root.join(dir), file).unwrap();
        assert!(up.is_empty(), "imports up a layer:\n{}", up.join("\n"));
    }

    #[test]
    fn the_check_sees_an_import_up() {
        let dir = std::env::temp_dir().join(format!("np-layers-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("lib.rs"), "mod sys; mod render;").unwrap();
        std::fs::write(dir.join("sys.rs"), "pub fn f() { crate::render::g(); }").unwrap();
        std::fs::write(dir.join("render.rs"), "pub fn g() {}").unwrap();
        let up = upward(&dir, "lib.rs").unwrap();
        assert_eq!(up.len(), 1, "{up:?}");
        assert!(up[0].starts_with("sys.rs → render.rs"), "{up:?}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
