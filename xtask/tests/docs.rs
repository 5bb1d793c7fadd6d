//! The README and the pages under docs/: the README stays short enough to read (at most 300
//! lines), no table cell grows into a paragraph (at most 300 characters), every page of docs/
//! is reachable from the README, every relative link points to a file that exists and, with a
//! `#fragment`, to a heading of that page, and every repository path a page or a module comment
//! names (backticked or in running text) exists. Reads files only; needs no privilege.

use std::{
    collections::{BTreeSet, HashMap},
    fs,
    path::{Path, PathBuf},
};

use pulldown_cmark::{Event, Options, Parser, Tag, TagEnd};

const README_MAX_LINES: usize = 300;
const CELL_MAX_CHARS: usize = 300;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask sits in the workspace")
        .to_path_buf()
}

/// README.md and every Markdown page of docs/, as paths relative to the workspace root.
fn pages() -> Vec<PathBuf> {
    let mut pages = vec![PathBuf::from("README.md")];
    let mut docs: Vec<PathBuf> = fs::read_dir(root().join("docs"))
        .expect("docs/ exists")
        .map(|e| e.expect("readable docs/ entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "md"))
        .map(|p| PathBuf::from("docs").join(p.file_name().expect("a file name")))
        .collect();
    docs.sort();
    assert!(!docs.is_empty(), "no pages in docs/");
    pages.extend(docs);
    pages
}

fn read(page: &Path) -> String {
    fs::read_to_string(root().join(page)).unwrap_or_else(|e| panic!("{}: {e}", page.display()))
}

fn parser(text: &str) -> pulldown_cmark::OffsetIter<'_> {
    Parser::new_ext(text, Options::ENABLE_TABLES).into_offset_iter()
}

/// GitHub's anchor for a heading: lower case, punctuation dropped (letters, digits, `-` and
/// `_` kept), each space a `-`.
fn slug(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || matches!(c, ' ' | '-' | '_'))
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

/// The anchors of a page's headings; a repeated heading gets `-1`, `-2`, … as on GitHub.
fn anchors(text: &str) -> BTreeSet<String> {
    let mut seen: HashMap<String, usize> = HashMap::new();
    let mut out = BTreeSet::new();
    let mut heading: Option<String> = None;
    for (event, _) in parser(text) {
        match event {
            Event::Start(Tag::Heading { .. }) => heading = Some(String::new()),
            Event::Text(t) | Event::Code(t) => {
                if let Some(h) = heading.as_mut() {
                    h.push_str(&t);
                }
            }
            Event::End(TagEnd::Heading(_)) => {
                let base = slug(&heading.take().unwrap_or_default());
                let n = seen.entry(base.clone()).or_default();
                out.insert(if *n == 0 { base } else { format!("{base}-{n}") });
                *n += 1;
            }
            _ => {}
        }
    }
    out
}

/// Every link and image target of a page, with the line it is on.
fn links(text: &str) -> Vec<(usize, String)> {
    let line = |offset: usize| text[..offset].lines().count().max(1);
    parser(text)
        .filter_map(|(event, range)| match event {
            Event::Start(Tag::Link { dest_url, .. } | Tag::Image { dest_url, .. }) => {
                Some((line(range.start), dest_url.to_string()))
            }
            _ => None,
        })
        .collect()
}

fn is_external(dest: &str) -> bool {
    dest.contains("://") || dest.starts_with("mailto:")
}

#[test]
fn readme_is_at_most_300_lines() {
    let n = read(Path::new("README.md")).lines().count();
    assert!(
        n <= README_MAX_LINES,
        "README.md has {n} lines, more than {README_MAX_LINES}: move detail to a page of docs/"
    );
}

/// The table cells of a page: the line each starts on and its length in characters.
fn cells(text: &str) -> Vec<(usize, usize)> {
    parser(text)
        .filter_map(|(event, range)| match event {
            Event::Start(Tag::TableCell) => Some((
                text[..range.start].lines().count().max(1),
                text[range].trim().chars().count(),
            )),
            _ => None,
        })
        .collect()
}

#[test]
fn no_table_cell_is_over_300_characters() {
    let mut long = Vec::new();
    for page in pages() {
        let cells = cells(&read(&page));
        // The check must see the README's tables, or it checks nothing.
        assert!(
            page != Path::new("README.md") || !cells.is_empty(),
            "no table cells found in README.md"
        );
        for (line, n) in cells.into_iter().filter(|(_, n)| *n > CELL_MAX_CHARS) {
            long.push(format!("{}:{line}: {n} characters", page.display()));
        }
    }
    assert!(
        long.is_empty(),
        "table cells over {CELL_MAX_CHARS} characters (make them prose or a list):\n{}",
        long.join("\n")
    );
}

#[test]
fn cells_are_measured_one_by_one() {
    let long = "x".repeat(CELL_MAX_CHARS + 1);
    let text = format!("intro\n\n| a | b |\n|---|---|\n| `µs` | {long} |\n");
    assert_eq!(
        cells(&text),
        [(3, 1), (3, 1), (5, 4), (5, CELL_MAX_CHARS + 1)]
    );
}

#[test]
fn every_relative_link_points_to_a_file_and_heading_that_exist() {
    let mut anchors_of: HashMap<PathBuf, BTreeSet<String>> = HashMap::new();
    let mut broken = Vec::new();
    let mut checked = 0;
    for page in pages() {
        let text = read(&page);
        let dir = page.parent().unwrap_or(Path::new("")).to_path_buf();
        for (line, dest) in links(&text) {
            if is_external(&dest) {
                continue;
            }
            checked += 1;
            let (file, fragment) = match dest.split_once('#') {
                Some((f, a)) => (f, Some(a)),
                None => (dest.as_str(), None),
            };
            let target = if file.is_empty() {
                page.clone()
            } else {
                normalize(&dir.join(file))
            };
            let at = format!("{}:{line}: {dest}", page.display());
            if !root().join(&target).exists() {
                broken.push(format!("{at}: no file {}", target.display()));
                continue;
            }
            let Some(fragment) = fragment else { continue };
            if target.extension().is_none_or(|x| x != "md") {
                broken.push(format!("{at}: an anchor into a file that is not Markdown"));
                continue;
            }
            let known = anchors_of
                .entry(target.clone())
                .or_insert_with(|| anchors(&read(&target)));
            if !known.contains(fragment) {
                broken.push(format!(
                    "{at}: no heading #{fragment} in {}",
                    target.display()
                ));
            }
        }
    }
    assert!(checked > 0, "no relative links found");
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

#[test]
fn every_docs_page_is_linked_from_the_readme() {
    let linked: BTreeSet<PathBuf> = links(&read(Path::new("README.md")))
        .into_iter()
        .filter(|(_, d)| !is_external(d))
        .map(|(_, d)| normalize(Path::new(d.split('#').next().unwrap_or_default())))
        .collect();
    let missing: Vec<String> = pages()
        .into_iter()
        .filter(|p| p.starts_with("docs") && !linked.contains(p))
        .map(|p| p.display().to_string())
        .collect();
    assert!(
        missing.is_empty(),
        "pages of docs/ the README does not link: {missing:?}"
    );
}

#[test]
fn anchors_follow_github() {
    assert_eq!(
        slug("diff: which hops make one path slower"),
        "diff-which-hops-make-one-path-slower"
    );
    assert_eq!(
        slug("Do the ratios hold still? bench --stability"),
        "do-the-ratios-hold-still-bench---stability"
    );
    assert_eq!(
        slug("The container → container rows"),
        "the-container--container-rows"
    );
    let a = anchors("# A\n\n## Tests\n\n## Tests\n\n## `netpath tune`\n");
    let want = ["a", "netpath-tune", "tests", "tests-1"].map(String::from);
    assert_eq!(a, BTreeSet::from(want));
}

/// `docs/../README.md` → `README.md`, without touching the file system.
fn normalize(p: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in p.components() {
        match c {
            std::path::Component::ParentDir => {
                out.pop();
            }
            std::path::Component::CurDir => {}
            c => out.push(c),
        }
    }
    out
}

/// A backticked repository path in a page or a module comment: `netpath/src/cli/mod.rs`,
/// `docs/cli.md`, `deploy/swarm/`, `cli/<command>.rs` (not checked: placeholders).
fn paths_named(text: &str) -> Vec<String> {
    let exts = [
        ".rs", ".md", ".json", ".yml", ".yaml", ".toml", ".sh", ".txt", ".bpf.c",
    ];
    text.split('`')
        .skip(1)
        .step_by(2)
        .filter(|s| {
            let s = s.trim_end_matches('/');
            !s.contains(char::is_whitespace)
                && !s.contains(['<', '>', '*', '…', '{', '$', '|', '~'])
                && !s.contains("://")
                && !s.starts_with('/')
                && !s.starts_with(['-', '.'])
                && (s.contains('/') || exts.iter().any(|e| s.ends_with(e)))
                && (exts.iter().any(|e| s.ends_with(e)) || s.ends_with('/') || s.contains('/'))
                && s.chars()
                    .next()
                    .is_some_and(|c| c.is_ascii_alphanumeric() || c == '.')
        })
        .filter(|s| exts.iter().any(|e| s.ends_with(e)) || s.ends_with('/'))
        .map(String::from)
        .collect()
}

/// Files a command writes at the root that the repository does not keep: named in the text,
/// absent from a checkout. `cargo xtask bench --proto udp` writes the first.
const WRITTEN: [&str; 1] = ["BENCHMARKS-udp.md"];

/// A repository path in running text (outside backticks): a word that starts with a top
/// directory of the workspace (`netpath/src/lab/mod.rs`, `docs/drivers.md`, a link's
/// `docs/cli.md`) or a page at the root (`BENCHMARKS.md`). Other bare words are prose.
fn prose_paths(text: &str) -> Vec<String> {
    let root = root();
    let is_top = |w: &str| {
        w.split_once('/')
            .is_some_and(|(top, _)| !top.is_empty() && top != "target" && root.join(top).is_dir())
    };
    let is_root_page = |w: &str| {
        w.ends_with(".md") && !w.contains('/') && w.starts_with(|c: char| c.is_ascii_uppercase())
    };
    text.split('`')
        .step_by(2)
        .flat_map(|s| s.split(|c: char| c.is_whitespace() || "()[],;\"'".contains(c)))
        .map(|w| w.trim_end_matches(['.', ':', '!', '?']))
        .filter(|w| !w.contains(['<', '>', '*', '…', '{', '$', '|', '~']))
        .filter(|w| is_top(w) || is_root_page(w))
        .map(String::from)
        .collect()
}

/// Where a path named in `file` may be: from the root, or the file's own directory. In a
/// module comment also from its crate's `src/` (a module-relative `render/mod.rs`) or the
/// crate itself (`tests/docs.rs`), and nowhere else: the crate's own tree is what a reader
/// opens. In a page a path that starts with none of the workspace's top directories (a layout
/// list's `cli/mod.rs` under `netpath/src/`) may end any existing path. Bare names of other
/// kinds (`swarm.json`), a folder's `mod.rs` (the convention, not a file), anything under a
/// `target/` and [`WRITTEN`] are files netpath or cargo make.
fn resolves(file: &Path, named: &str, all: &BTreeSet<String>) -> bool {
    let root = root();
    let named = named.split(['#', ':']).next().unwrap_or(named);
    let bare = named.trim_end_matches('/');
    if !(bare.contains('/') || bare.ends_with(".rs") || bare.ends_with(".md")) {
        return true;
    }
    if bare == "mod.rs" || WRITTEN.contains(&bare) || bare.split('/').any(|c| c == "target") {
        return true;
    }
    let from = |dir: &Path| root.join(dir).join(named).exists();
    if from(Path::new("")) || file.parent().is_some_and(from) {
        return true;
    }
    let krate = file.iter().next().and_then(|c| c.to_str());
    if let Some(krate) = krate.filter(|k| CRATES.contains(k)) {
        return from(&Path::new(krate).join("src")) || from(Path::new(krate));
    }
    let top = bare.split('/').next().unwrap_or_default();
    !root.join(top).exists()
        && all
            .iter()
            .any(|p| p == bare || p.ends_with(&format!("/{bare}")))
}

const CRATES: [&str; 4] = ["netpath", "netpath-common", "netpath-ebpf", "xtask"];

/// Every file and directory of the workspace (not target/ nor .git), relative to its root.
fn all_names() -> BTreeSet<String> {
    fn walk(root: &Path, dir: &Path, out: &mut BTreeSet<String>) {
        for e in fs::read_dir(dir).expect("a directory").flatten() {
            let name = e.file_name();
            if name == "target" || name == ".git" {
                continue;
            }
            let p = e.path();
            if p.is_dir() {
                walk(root, &p, out);
            }
            let rel = p.strip_prefix(root).expect("under the root");
            out.insert(rel.to_string_lossy().into_owned());
        }
    }
    let root = root();
    let mut out = BTreeSet::new();
    walk(&root, &root, &mut out);
    out
}

/// Module comments (`//!`) of the workspace's Rust files, as (path, text).
fn module_comments() -> Vec<(PathBuf, String)> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        for e in fs::read_dir(dir).expect("a source directory").flatten() {
            let p = e.path();
            if p.is_dir() {
                walk(&p, out);
            } else if p.extension().is_some_and(|x| x == "rs") {
                out.push(p);
            }
        }
    }
    let root = root();
    let mut files = Vec::new();
    for krate in CRATES {
        for sub in ["src", "tests", "examples"] {
            let d = root.join(krate).join(sub);
            if d.is_dir() {
                walk(&d, &mut files);
            }
        }
    }
    files
        .into_iter()
        .map(|p| {
            let text: String = fs::read_to_string(&p)
                .unwrap_or_default()
                .lines()
                .filter(|l| l.trim_start().starts_with("//!"))
                .map(|l| format!("{}\n", l.trim_start().trim_start_matches("//!")))
                .collect();
            (
                p.strip_prefix(&root).expect("under the root").to_path_buf(),
                text,
            )
        })
        .collect()
}

#[test]
fn every_path_named_exists() {
    let mut texts: Vec<(PathBuf, String)> = pages()
        .into_iter()
        .map(|p| {
            let t = read(&p);
            (p, t)
        })
        .collect();
    texts.extend(module_comments());
    let all = all_names();
    let mut stale = Vec::new();
    let mut checked = 0;
    for (file, text) in &texts {
        for named in paths_named(text).into_iter().chain(prose_paths(text)) {
            checked += 1;
            if !resolves(file, &named, &all) {
                stale.push(format!("{}: `{named}`", file.display()));
            }
        }
    }
    assert!(checked > 50, "only {checked} paths found");
    assert!(
        stale.is_empty(),
        "paths named that do not exist:\n{}",
        stale.join("\n")
    );
}

#[test]
fn paths_are_told_from_other_code() {
    let t = "`netpath/src/cli/mod.rs`, `docs/cli.md`, `deploy/swarm/`, `cli/<command>.rs`, \
             `--json`, `np<id>-cli`, `/proc/self/ns/net`, `a b.rs`, `render::compare`";
    assert_eq!(
        paths_named(t),
        ["netpath/src/cli/mod.rs", "docs/cli.md", "deploy/swarm/"]
    );
    let prose = "see docs/cli.md, (xtask/src/vm/mod.rs) and BENCHMARKS.md: not `docs/x.md`, \
                 netpath/src/<command>.rs, the netpath binary, a/b nor https://x/docs/y.md";
    assert_eq!(
        prose_paths(prose),
        ["docs/cli.md", "xtask/src/vm/mod.rs", "BENCHMARKS.md"]
    );
}

#[test]
fn a_module_comment_names_its_own_crate() {
    let all = all_names();
    let lab = Path::new("netpath/src/lab/mod.rs");
    assert!(resolves(lab, "render/mod.rs", &all));
    assert!(resolves(
        Path::new("xtask/src/main.rs"),
        "tests/docs.rs",
        &all
    ));
    assert!(!resolves(lab, "vm/mod.rs", &all), "xtask's, not netpath's");
    assert!(resolves(
        Path::new("docs/development.md"),
        "vm/mod.rs",
        &all
    ));
    assert!(!resolves(lab, "PLATFORM.md", &all));
}
