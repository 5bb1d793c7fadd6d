//! README's example output ("What the output looks like"), rendered from a checked-in run
//! (`docs/data/readme-compare.json`) by the renderer every run prints with: `cargo xtask
//! readme` writes the block (the `readme` example), and a unit test fails when README
//! differs, so the example is always what today's netpath prints. Also checked here: every
//! hop name the output can print is in README's glossary.

use anyhow::{Context as _, Result, bail};

/// The checked-in run, from the workspace root.
pub const FIXTURE: &str = "docs/data/readme-compare.json";

/// The line before the block in README.
pub const MARKER: &str =
    "<!-- output: docs/data/readme-compare.json, written by `cargo xtask readme` -->";

/// Drivers whose whole block the example shows; the answer shows every driver.
const BLOCKS_SHOWN: usize = 2;

/// The example from the run's text (`render::compare::full_text`): the conditions, the first
/// drivers' blocks, `…` for the others, and the answer.
pub fn example(full_text: &str) -> String {
    let sections: Vec<&str> = full_text.split("\n\n").collect();
    let mut out: Vec<&str> = Vec::new();
    let mut blocks = 0;
    let mut skipped = false;
    for s in &sections {
        let block = s.starts_with("== ") && !s.starts_with("== the answer");
        if block {
            blocks += 1;
            if blocks > BLOCKS_SHOWN {
                if !skipped {
                    out.push("…");
                    skipped = true;
                }
                continue;
            }
        }
        out.push(s.trim_end_matches('\n'));
    }
    out.join("\n\n") + "\n"
}

/// `readme` with the block after `MARKER` (a fenced `text` block) replaced by `block`.
pub fn replace_block(readme: &str, block: &str) -> Result<String> {
    let at = readme
        .find(MARKER)
        .with_context(|| format!("README.md has no line {MARKER}"))?;
    let open = at + MARKER.len() + 1;
    if !readme[open..].starts_with("```text\n") {
        bail!("README.md: the line after {MARKER} must open a ```text block");
    }
    let body = open + "```text\n".len();
    let close = readme[body..]
        .find("\n```\n")
        .context("README.md: the example's block is not closed")?;
    Ok(format!(
        "{}{}{}",
        &readme[..body],
        block,
        &readme[body + close + 1..]
    ))
}

/// The example README should show, from the fixture under `root` (the workspace).
pub fn render(root: &std::path::Path) -> Result<String> {
    Ok(example(&fixture(root)?.text(false)?))
}

fn fixture(root: &std::path::Path) -> Result<super::saved::Saved> {
    let run = root.join(FIXTURE);
    super::saved::Saved::read_for(&run, "readme", "renders")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn root() -> std::path::PathBuf {
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
    }

    fn readme() -> String {
        std::fs::read_to_string(root().join("README.md")).expect("README.md")
    }

    #[test]
    fn readme_example_is_what_the_renderer_prints() {
        let readme = readme();
        let want = replace_block(&readme, &render(&root()).unwrap()).unwrap();
        if want != readme {
            let diff: Vec<String> = readme
                .lines()
                .zip(want.lines())
                .enumerate()
                .filter(|(_, (a, b))| a != b)
                .take(5)
                .map(|(i, (a, b))| format!("README.md:{}:\n  is   {a}\n  want {b}", i + 1))
                .collect();
            panic!(
                "README's example output is not what netpath renders from {FIXTURE}: run `cargo xtask readme`\n{}",
                diff.join("\n")
            );
        }
    }

    #[test]
    fn the_example_keeps_conditions_two_blocks_and_the_answer() {
        let text = "backend: x\nmachine\n\n== a  (TCP)\n   1\n\n== b  (TCP)\n   2\n\n== c  (TCP)\n   3\n\n== d\n\n== the answer (…)\n   a: 1\n";
        assert_eq!(
            example(text),
            "backend: x\nmachine\n\n== a  (TCP)\n   1\n\n== b  (TCP)\n   2\n\n…\n\n== the answer (…)\n   a: 1\n"
        );
        let readme = format!("x\n{MARKER}\n```text\nold\nlines\n```\ny\n");
        assert_eq!(
            replace_block(&readme, "new\n").unwrap(),
            format!("x\n{MARKER}\n```text\nnew\n```\ny\n")
        );
    }

    /// docs/outputs.md's reading of compare's text names only lines the text has: each code
    /// span of its list of a block's lines is in the checked-in run's text, and each of its
    /// `--verbose` list in that run's verbose text.
    #[test]
    fn outputs_md_names_lines_the_text_prints() {
        let page = std::fs::read_to_string(root().join("docs/outputs.md")).unwrap();
        let from = page
            .find("## Reading `compare`'s text")
            .expect("the section");
        let part = |start: &str, end: &str| {
            let s = from + page[from..].find(start).expect(start);
            let e = s + page[s..].find(end).expect(end);
            page[s + start.len()..e].to_string()
        };
        let spans = |t: &str| -> Vec<String> {
            t.split('`')
                .skip(1)
                .step_by(2)
                .filter(|s| !s.starts_with('-'))
                .map(String::from)
                .collect()
        };
        let saved = fixture(&root()).unwrap();
        for (list, verbose) in [
            (part("Per driver, a block", "With `--verbose`"), false),
            (
                part("each block has every line instead:", "Then a summary"),
                true,
            ),
        ] {
            let text = if verbose {
                saved.text(true).unwrap()
            } else {
                saved.text_with_blocks().unwrap()
            };
            let names = spans(&list);
            assert!(names.len() > 5, "{names:?}");
            let absent: Vec<&String> = names
                .iter()
                .filter(|n| !text.contains(n.as_str()))
                .collect();
            assert!(
                absent.is_empty(),
                "docs/outputs.md names lines a {} run does not print: {absent:?}",
                if verbose { "--verbose" } else { "default" }
            );
        }
    }

    /// Every hop name netpath can print is explained under "Words used in the output".
    #[test]
    fn every_hop_name_is_in_the_glossary() {
        let readme = readme();
        let start = readme
            .find("## Words used in the output")
            .expect("README has its glossary");
        let end = readme[start + 3..]
            .find("\n## ")
            .map_or(readme.len(), |e| start + 3 + e);
        let glossary = &readme[start..end];
        let missing: Vec<&str> = netpath_common::Hop::ALL
            .iter()
            .map(|h| h.name())
            .filter(|n| !glossary.contains(&format!("`{n}`")))
            .collect();
        assert!(
            missing.is_empty(),
            "hops missing from README's glossary: {missing:?}"
        );
    }
}
