//! `cargo xtask circles`: source files that import each other in a loop, in netpath's userspace
//! crate and in xtask. A file imports another when any path in it (a `use`, a call, a type, a
//! path inside a macro's arguments) names an item of the other through `crate::`, `super::`,
//! `self::` or a child module's name. A re-export (`pub use`) is followed to the file that
//! defines the item, so a folder's `mod.rs` that only re-exports is no stop on a loop; a `mod`
//! declaration is no import. A file using its own folder's `mod.rs` (or the crate root) is no
//! edge either: the folder's face holds what its files share and dispatches to them; loops
//! among sibling files and across folders are what this finds. The kernel crate's hook
//! modules sit above its state machine's primitives (`netpath-ebpf/src/state.rs`), so it is
//! checked too.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use anyhow::{Context as _, bail};
use syn::visit::Visit;

/// The crates checked: their source folder and root file, from the workspace root.
pub const CRATES: [(&str, &str); 4] = [
    ("netpath/src", "lib.rs"),
    ("xtask/src", "main.rs"),
    ("netpath-ebpf/src", "main.rs"),
    ("netpath-common/src", "lib.rs"),
];

/// `cargo xtask circles`: prints every loop; fails if there is one.
pub fn run() -> anyhow::Result<()> {
    if std::env::var_os("CIRCLES_EDGES").is_some() {
        for (dir, file) in CRATES {
            let tree = Tree::read(&crate::paths::workspace_root().join(dir), file)?;
            for (from, to) in tree.edges() {
                println!(
                    "{dir}: {from} → {}",
                    to.into_iter().collect::<Vec<_>>().join(" ")
                );
            }
        }
    }
    let root = crate::paths::workspace_root();
    let mut found = 0;
    for (dir, file) in CRATES {
        let loops = circles(&root.join(dir), file)?;
        for l in &loops {
            println!("{dir}: {}", l.join(" → "));
        }
        println!("{dir}: {} import loops", loops.len());
        found += loops.len();
    }
    if found > 0 {
        bail!("{found} import loops (each line above is one, its first file repeated at its end)");
    }
    Ok(())
}

/// Every file's imports (relative to `src`), as the loops are found from.
pub fn edges(src: &Path, root_file: &str) -> anyhow::Result<BTreeMap<String, BTreeSet<String>>> {
    Ok(Tree::read(src, root_file)?.edges())
}

/// One loop per group of files that import each other: its files in import order, the first
/// repeated at the end (relative to `src`).
pub fn circles(src: &Path, root_file: &str) -> anyhow::Result<Vec<Vec<String>>> {
    let tree = Tree::read(src, root_file)?;
    let edges = tree.edges();
    let mut out = Vec::new();
    for group in strongly_connected(&edges) {
        if group.len() > 1 {
            let mut l = a_loop(&edges, &group);
            // Files of the group that this loop does not pass through, named after it.
            let rest: Vec<&String> = group.iter().filter(|f| !l.contains(f)).collect();
            if !rest.is_empty() {
                let others = rest
                    .iter()
                    .map(|f| f.as_str())
                    .collect::<Vec<_>>()
                    .join(", ");
                l.push(format!("(and {others})"));
            }
            out.push(l);
        }
    }
    Ok(out)
}

type ModPath = Vec<String>;

/// What one module holds: the file it is in, the names it defines, what it re-exports.
#[derive(Default)]
struct Module {
    file: String,
    defines: BTreeSet<String>,
    /// `pub use a::b as c`: `c` → the absolute path of `b`.
    reexports: BTreeMap<String, ModPath>,
    /// `pub use a::*`: the absolute paths of `a`.
    globs: Vec<ModPath>,
}

/// A crate's modules and, per file, the absolute paths it names.
struct Tree {
    modules: BTreeMap<ModPath, Module>,
    /// (file, absolute path named) for every path that starts inside the crate.
    refs: Vec<(String, ModPath)>,
}

impl Tree {
    fn read(src: &Path, root_file: &str) -> anyhow::Result<Tree> {
        let mut tree = Tree {
            modules: BTreeMap::new(),
            refs: Vec::new(),
        };
        let mut raw = Vec::new();
        tree.read_file(src, Path::new(root_file), Vec::new(), &mut raw)?;
        // Relative first segments (a child module's name) are known once every module is.
        for (file, module, segs) in raw {
            if let Some(abs) = tree.absolute(&module, &segs) {
                tree.refs.push((file, abs));
            }
        }
        Ok(tree)
    }

    fn read_file(
        &mut self,
        src: &Path,
        rel: &Path,
        module: ModPath,
        raw: &mut Vec<(String, ModPath, ModPath)>,
    ) -> anyhow::Result<()> {
        let path = src.join(rel);
        let text = std::fs::read_to_string(&path)
            .with_context(|| format!("reading {}", path.display()))?;
        let ast = syn::parse_file(&text).with_context(|| format!("parsing {}", path.display()))?;
        let file = rel.display().to_string();
        // Children of `a/b.rs` live in `a/b/`; of `mod.rs`, `lib.rs` and `main.rs` beside it.
        let stem = rel.file_stem().and_then(|s| s.to_str()).unwrap_or("");
        let dir = match stem {
            "mod" | "lib" | "main" => rel.parent().map(Path::to_path_buf).unwrap_or_default(),
            _ => rel.with_extension(""),
        };
        let mut v = Collect {
            file: file.clone(),
            stack: vec![module.clone()],
            modules: BTreeMap::new(),
            children: Vec::new(),
            raw: Vec::new(),
        };
        v.modules.entry(module.clone()).or_default().file = file.clone();
        v.visit_file(&ast);
        raw.append(&mut v.raw);
        for (m, info) in v.modules {
            let e = self.modules.entry(m).or_default();
            e.file = info.file;
            e.defines.extend(info.defines);
            e.reexports.extend(info.reexports);
            e.globs.extend(info.globs);
        }
        for (name, parent) in v.children {
            let sub = parent[module.len()..]
                .iter()
                .fold(dir.clone(), |d, s| d.join(s));
            let flat = sub.join(format!("{name}.rs"));
            let nested = sub.join(&name).join("mod.rs");
            let child = if src.join(&flat).exists() {
                flat
            } else {
                nested
            };
            let mut m = parent.clone();
            m.push(name);
            self.read_file(src, &child, m, raw)?;
        }
        Ok(())
    }

    /// `segs` named in `module`, as an absolute module path; `None` outside the crate.
    fn absolute(&self, module: &ModPath, segs: &ModPath) -> Option<ModPath> {
        let first = segs.first()?;
        let (mut base, rest) = match first.as_str() {
            "crate" => (Vec::new(), &segs[1..]),
            "self" => (module.clone(), &segs[1..]),
            "super" => {
                let mut b = module.clone();
                let mut i = 0;
                while segs.get(i).map(String::as_str) == Some("super") {
                    b.pop();
                    i += 1;
                }
                (b, &segs[i..])
            }
            _ => {
                let mut child = module.clone();
                child.push(first.clone());
                if !self.modules.contains_key(&child) {
                    return None;
                }
                (module.clone(), &segs[..])
            }
        };
        base.extend(rest.iter().cloned());
        Some(base)
    }

    /// The file defining what absolute path `abs` names, re-exports followed.
    fn file_of(&self, abs: &ModPath, depth: usize) -> Option<String> {
        let k = (0..=abs.len())
            .rev()
            .find(|k| self.modules.contains_key(&abs[..*k]))?;
        let m = &self.modules[&abs[..k]];
        let Some(name) = abs.get(k) else {
            return Some(m.file.clone());
        };
        if depth < 16 && !m.defines.contains(name) {
            if let Some(target) = m.reexports.get(name) {
                let mut next = target.clone();
                next.extend(abs[k + 1..].iter().cloned());
                return self.file_of(&next, depth + 1);
            }
            for g in &m.globs {
                let mut next = g.clone();
                next.extend(abs[k..].iter().cloned());
                if let Some(f) = self.file_of(&next, depth + 1)
                    && f != self
                        .modules
                        .get(g)
                        .map(|m| m.file.clone())
                        .unwrap_or_default()
                {
                    return Some(f);
                }
                if self
                    .modules
                    .get(g)
                    .is_some_and(|gm| gm.defines.contains(name))
                {
                    return self.modules.get(g).map(|gm| gm.file.clone());
                }
            }
        }
        Some(m.file.clone())
    }

    /// File → the files it imports, its own ancestors left out.
    fn edges(&self) -> BTreeMap<String, BTreeSet<String>> {
        let mut out: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        // Each file's own module: the shortest path of the modules it holds.
        let mut module_of: BTreeMap<&str, &ModPath> = BTreeMap::new();
        for (path, m) in &self.modules {
            out.entry(m.file.clone()).or_default();
            let e = module_of.entry(m.file.as_str()).or_insert(path);
            if path.len() < e.len() {
                *e = path;
            }
        }
        let ancestor = |from: &str, to: &str| {
            let (f, t) = (module_of[from], module_of[to]);
            t.len() < f.len() && f.starts_with(t)
        };
        for (file, abs) in &self.refs {
            if let Some(to) = self.file_of(abs, 0)
                && &to != file
                && !ancestor(file, &to)
            {
                out.entry(file.clone()).or_default().insert(to);
            }
        }
        out
    }
}

/// Walks one file: its inline modules, the names they define, their re-exports, child module
/// files, and every path.
struct Collect {
    file: String,
    stack: Vec<ModPath>,
    modules: BTreeMap<ModPath, Module>,
    children: Vec<(String, ModPath)>,
    /// (file, module, path as written).
    raw: Vec<(String, ModPath, ModPath)>,
}

impl Collect {
    fn here(&self) -> ModPath {
        self.stack.last().cloned().unwrap_or_default()
    }

    fn define(&mut self, name: String) {
        let here = self.here();
        self.modules.entry(here).or_default().defines.insert(name);
    }

    fn path(&mut self, segs: ModPath) {
        self.raw.push((self.file.clone(), self.here(), segs));
    }

    /// Every path a `use` tree names; re-exported names recorded when `public`.
    fn use_tree(&mut self, prefix: &ModPath, t: &syn::UseTree, public: bool) {
        let with = |s: &syn::Ident| {
            let mut p = prefix.clone();
            p.push(s.to_string());
            p
        };
        match t {
            syn::UseTree::Path(p) => self.use_tree(&with(&p.ident), &p.tree, public),
            syn::UseTree::Name(n) => self.used(with(&n.ident), n.ident.to_string(), public),
            syn::UseTree::Rename(r) => self.used(with(&r.ident), r.rename.to_string(), public),
            syn::UseTree::Glob(_) => {
                self.path(prefix.clone());
                if public {
                    self.glob(prefix.clone());
                }
            }
            syn::UseTree::Group(g) => g
                .items
                .iter()
                .for_each(|i| self.use_tree(prefix, i, public)),
        }
    }

    fn used(&mut self, full: ModPath, as_name: String, public: bool) {
        let here = self.here();
        if !public {
            return self.path(full);
        }
        // Resolved to an absolute path later, with the other references.
        let abs = resolve_now(&here, &full);
        self.modules
            .entry(here)
            .or_default()
            .reexports
            .insert(as_name, abs);
    }

    fn glob(&mut self, prefix: ModPath) {
        let here = self.here();
        let abs = resolve_now(&here, &prefix);
        self.modules.entry(here).or_default().globs.push(abs);
    }
}

/// A re-export's path made absolute without the module list: `crate`/`self`/`super` as
/// written, anything else a child of `here`.
fn resolve_now(here: &ModPath, segs: &ModPath) -> ModPath {
    let mut base = here.clone();
    let mut rest = &segs[..];
    match segs.first().map(String::as_str) {
        Some("crate") => {
            base.clear();
            rest = &segs[1..];
        }
        Some("self") => rest = &segs[1..],
        _ => {
            while rest.first().map(String::as_str) == Some("super") {
                base.pop();
                rest = &rest[1..];
            }
        }
    }
    base.extend(rest.iter().cloned());
    base
}

impl<'ast> Visit<'ast> for Collect {
    fn visit_item_mod(&mut self, m: &'ast syn::ItemMod) {
        let name = m.ident.to_string();
        self.define(name.clone());
        let mut inner = self.here();
        if m.content.is_none() {
            self.children.push((name, inner));
            return;
        }
        inner.push(name);
        self.modules.entry(inner.clone()).or_default().file = self.file.clone();
        self.stack.push(inner);
        syn::visit::visit_item_mod(self, m);
        self.stack.pop();
    }

    fn visit_item_use(&mut self, u: &'ast syn::ItemUse) {
        let public = !matches!(u.vis, syn::Visibility::Inherited);
        self.use_tree(&Vec::new(), &u.tree, public);
    }

    fn visit_item(&mut self, i: &'ast syn::Item) {
        let name = match i {
            syn::Item::Const(x) => Some(&x.ident),
            syn::Item::Enum(x) => Some(&x.ident),
            syn::Item::Fn(x) => Some(&x.sig.ident),
            syn::Item::Static(x) => Some(&x.ident),
            syn::Item::Struct(x) => Some(&x.ident),
            syn::Item::Trait(x) => Some(&x.ident),
            syn::Item::Type(x) => Some(&x.ident),
            syn::Item::Union(x) => Some(&x.ident),
            syn::Item::Macro(x) => x.ident.as_ref(),
            _ => None,
        };
        if let Some(n) = name {
            self.define(n.to_string());
        }
        syn::visit::visit_item(self, i);
    }

    fn visit_path(&mut self, p: &'ast syn::Path) {
        let segs = p.segments.iter().map(|s| s.ident.to_string()).collect();
        self.path(segs);
        syn::visit::visit_path(self, p);
    }

    fn visit_macro(&mut self, m: &'ast syn::Macro) {
        // Arguments of `format!`, `anyhow!`, `assert!`… are expressions more often than not.
        use syn::punctuated::Punctuated;
        let args = m.parse_body_with(Punctuated::<syn::Expr, syn::Token![,]>::parse_terminated);
        if let Ok(args) = args {
            args.iter().for_each(|e| self.visit_expr(e));
        }
        syn::visit::visit_macro(self, m);
    }
}

/// Tarjan's strongly connected components.
fn strongly_connected(edges: &BTreeMap<String, BTreeSet<String>>) -> Vec<Vec<String>> {
    struct S<'a> {
        edges: &'a BTreeMap<String, BTreeSet<String>>,
        index: BTreeMap<&'a str, (usize, usize)>,
        stack: Vec<&'a str>,
        on: BTreeSet<&'a str>,
        out: Vec<Vec<String>>,
    }
    fn visit<'a>(s: &mut S<'a>, v: &'a str) {
        let i = s.index.len();
        s.index.insert(v, (i, i));
        s.stack.push(v);
        s.on.insert(v);
        for w in s.edges.get(v).into_iter().flatten() {
            if !s.index.contains_key(w.as_str()) {
                visit(s, w);
                let low = s.index[w.as_str()].1.min(s.index[v].1);
                s.index.get_mut(v).unwrap().1 = low;
            } else if s.on.contains(w.as_str()) {
                let low = s.index[w.as_str()].0.min(s.index[v].1);
                s.index.get_mut(v).unwrap().1 = low;
            }
        }
        if s.index[v].0 == s.index[v].1 {
            let mut group = Vec::new();
            while let Some(w) = s.stack.pop() {
                s.on.remove(w);
                group.push(w.to_string());
                if w == v {
                    break;
                }
            }
            s.out.push(group);
        }
    }
    let mut s = S {
        edges,
        index: BTreeMap::new(),
        stack: Vec::new(),
        on: BTreeSet::new(),
        out: Vec::new(),
    };
    for v in edges.keys() {
        if !s.index.contains_key(v.as_str()) {
            visit(&mut s, v);
        }
    }
    s.out
}

/// A shortest loop through the group's first file, staying inside the group.
fn a_loop(edges: &BTreeMap<String, BTreeSet<String>>, group: &[String]) -> Vec<String> {
    let inside: BTreeSet<&String> = group.iter().collect();
    let start = group.iter().min().cloned().unwrap_or_default();
    let mut prev: BTreeMap<String, String> = BTreeMap::new();
    let mut queue = std::collections::VecDeque::from([start.clone()]);
    while let Some(v) = queue.pop_front() {
        for w in edges.get(&v).into_iter().flatten() {
            if !inside.contains(w) {
                continue;
            }
            if *w == start {
                let mut path = vec![v.clone()];
                while let Some(p) = prev.get(path.last().unwrap()) {
                    path.push(p.clone());
                }
                path.reverse();
                path.push(start.clone());
                return path;
            }
            if !prev.contains_key(w) {
                prev.insert(w.clone(), v.clone());
                queue.push_back(w.clone());
            }
        }
    }
    group.to_vec()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    fn crate_of(files: &[(&str, &str)]) -> PathBuf {
        let dir = std::env::temp_dir().join(format!(
            "np-circles-{}-{}",
            std::process::id(),
            files.len() * 31 + files[0].1.len()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        for (name, text) in files {
            let p = dir.join(name);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, text).unwrap();
        }
        dir
    }

    #[test]
    fn a_loop_through_a_call_and_a_use_is_found() {
        let dir = crate_of(&[
            ("lib.rs", "pub mod a; pub mod b; pub mod c;"),
            ("a.rs", "use crate::b::B; pub struct A;"),
            ("b/mod.rs", "mod inner; pub use inner::B;"),
            (
                "b/inner.rs",
                "pub struct B; fn f() { let _ = crate::c::C; }",
            ),
            (
                "c.rs",
                "pub struct C; fn g() { println!(\"{:?}\", super::a::A); }",
            ),
        ]);
        let loops = circles(&dir, "lib.rs").unwrap();
        // b/mod.rs only re-exports: the loop goes through the file defining B.
        assert_eq!(loops, [["a.rs", "b/inner.rs", "c.rs", "a.rs"]]);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_tree_without_loops_has_none() {
        let dir = crate_of(&[
            // The root dispatches to y and y uses what the root shares: y's own ancestor.
            (
                "main.rs",
                "mod x; mod y; fn main() { x::run(); y::z(); } fn shared() {}",
            ),
            (
                "x.rs",
                "pub fn run() { crate::y::z(); } #[cfg(test)] mod tests { use super::*; }",
            ),
            ("y.rs", "pub fn z() { crate::shared(); }"),
        ]);
        assert!(circles(&dir, "main.rs").unwrap().is_empty());
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// The check itself: netpath, its kernel crate, the shared types and xtask import in one
    /// direction only.
    #[test]
    fn no_file_of_netpath_or_xtask_is_in_a_loop() {
        let root = crate::paths::workspace_root();
        for (dir, file) in CRATES {
            let loops = circles(&root.join(dir), file).unwrap();
            let lines: Vec<String> = loops.iter().map(|l| l.join(" → ")).collect();
            assert!(
                lines.is_empty(),
                "{dir}: import loops:\n{}",
                lines.join("\n")
            );
        }
    }
}
