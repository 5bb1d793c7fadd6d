//! The README and the pages under docs/: the README stays short enough to read (at most 300
//! lines), no table cell grows into a paragraph (at most 300 characters), every page of docs/
//! is reachable from the README, and every relative link points to a file that exists and,
//! with a `#fragment`, to a heading of that page. Reads files only; needs no privilege.

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
