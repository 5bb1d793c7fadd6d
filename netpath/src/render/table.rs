//! Every table netpath prints, drawn by comfy-table: text tables without borders (names
//! left-aligned, figures right-aligned, no trailing spaces) and Markdown tables.
use comfy_table::{CellAlignment, Table, presets};

/// A text table without borders, each line after `indent`: the columns in `left` are
/// left-aligned (names), the others right-aligned (figures). An empty `header` draws none
/// (a timeline's points say what they are). No rows, no table: a header alone says nothing.
pub fn text(indent: &str, header: &[&str], rows: Vec<Vec<String>>, left: &[usize]) -> Vec<String> {
    if rows.is_empty() {
        return Vec::new();
    }
    let mut t = Table::new();
    t.load_style(presets::NOTHING);
    if !header.is_empty() {
        t.set_header(header.to_vec());
    }
    for r in rows {
        t.add_row(r);
    }
    let columns = t.column_count();
    for i in 0..columns {
        let Some(c) = t.column_mut(i) else { continue };
        if !left.contains(&i) {
            c.set_cell_alignment(CellAlignment::Right);
        }
        // comfy-table pads every cell by a space each side: the indent is the caller's.
        if i == 0 {
            c.set_padding((0, 1));
        }
    }
    t.lines()
        .map(|l| format!("{indent}{}", l.trim_end()))
        .collect()
}

/// Writes `text`'s lines.
pub fn write(
    w: &mut dyn std::io::Write,
    indent: &str,
    header: &[&str],
    rows: Vec<Vec<String>>,
    left: &[usize],
) -> std::io::Result<()> {
    for l in text(indent, header, rows, left) {
        writeln!(w, "{l}")?;
    }
    Ok(())
}

/// A GitHub Markdown table, ending with a newline: a `|` in a cell is escaped (it would end
/// the cell) and a line break becomes a space (it would end the row).
pub fn markdown(header: &[&str], rows: Vec<Vec<String>>) -> String {
    let cell = |s: &str| s.replace('|', "\\|").replace('\n', " ");
    let mut t = Table::new();
    t.load_style(presets::ASCII_MARKDOWN)
        .set_header(header.iter().map(|h| cell(h)).collect::<Vec<_>>());
    for r in rows {
        t.add_row(r.iter().map(|c| cell(c)).collect::<Vec<_>>());
    }
    let mut s = String::new();
    for l in t.lines() {
        s.push_str(l.trim_end());
        s.push('\n');
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rows(v: &[&[&str]]) -> Vec<Vec<String>> {
        v.iter()
            .map(|r| r.iter().map(|c| c.to_string()).collect())
            .collect()
    }

    /// Pipes that are not escaped: the cell borders of a Markdown row.
    fn borders(line: &str) -> usize {
        line.replace("\\|", "").matches('|').count()
    }

    #[test]
    fn markdown_has_header_separator_and_escaped_cells() {
        let s = markdown(
            &["goal", "measured", ""],
            rows(&[
                &["a | b", "1.5 µs", "met"],
                &["two\nlines", "", "**not met**"],
            ]),
        );
        let lines: Vec<&str> = s.lines().collect();
        assert_eq!(lines.len(), 4, "{s}");
        assert!(lines[0].starts_with("| goal ") && lines[0].contains("| measured "));
        assert!(
            lines[1]
                .trim_matches('|')
                .split('|')
                .all(|c| !c.is_empty() && c.chars().all(|x| x == '-')),
            "{s}"
        );
        assert!(lines[2].contains("| a \\| b "), "{s}");
        assert!(lines[3].contains("| two lines "), "{s}");
        for l in &lines {
            assert!(l.starts_with('|') && l.ends_with('|'), "{l}");
            assert_eq!(borders(l), 4, "{l}");
        }
    }

    #[test]
    fn text_aligns_names_left_figures_right_without_trailing_spaces() {
        let lines = text(
            "   ",
            &["hop", "p50", "call"],
            rows(&[
                &["veth", "1.25", ""],
                &["receiver-stack", "12.50", "~ noise"],
            ]),
            &[0, 2],
        );
        assert_eq!(lines.len(), 3);
        assert!(lines[0].starts_with("   hop "), "{lines:?}");
        assert!(lines[1].starts_with("   veth "), "{lines:?}");
        assert!(lines.iter().all(|l| l == l.trim_end()), "{lines:?}");
        // Right-aligned: the figures end in the same column.
        let end = |l: &str, x: &str| l.find(x).unwrap() + x.len();
        assert_eq!(end(&lines[1], "1.25"), end(&lines[2], "12.50"));
        assert_eq!(end(&lines[0], "p50"), end(&lines[2], "12.50"));
    }

    #[test]
    fn text_without_header_draws_rows_only() {
        let lines = text("", &[], rows(&[&["a", "1"], &["bb", "22"]]), &[0]);
        assert_eq!(lines, ["a    1", "bb  22"]);
        assert!(text("", &["a", "b"], Vec::new(), &[0]).is_empty());
    }
}
