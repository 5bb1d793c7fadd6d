//! The command line's conventions, checked on the binary without privilege: `netpath` alone
//! prints the usual help and fails, every subcommand's help ends with examples, a duration
//! flag takes humantime and its older spelling, completions name every flag `--help` lists, a
//! closed pipe ends quietly, `-V` names the commit, and `report` renders a saved run.

use std::process::{Command, Output};

const NETPATH: &str = env!("CARGO_BIN_EXE_netpath");

fn netpath(args: &[&str]) -> Output {
    Command::new(NETPATH)
        .args(args)
        .output()
        .expect("run netpath")
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

#[test]
fn alone_it_prints_multi_line_help_and_fails() {
    let o = netpath(&[]);
    let t = text(&o);
    assert!(!o.status.success(), "{t}");
    assert!(t.lines().count() > 10, "{t}");
    assert!(
        t.lines().all(|l| l.len() < 300),
        "a line of help over 300 bytes:\n{t}"
    );
    assert!(
        t.contains("Usage: netpath <COMMAND>") && t.contains("Commands:"),
        "{t}"
    );
}

/// The subcommands `netpath --help` lists, and the hidden `agent`.
fn subcommands() -> Vec<String> {
    let t = text(&netpath(&["--help"]));
    let list = t.split("Commands:").nth(1).expect("a command list");
    let mut names: Vec<String> = list
        .lines()
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        .filter_map(|l| l.split_whitespace().next().map(String::from))
        .filter(|n| n != "help")
        .collect();
    names.push("agent".into());
    names
}

#[test]
fn every_subcommand_help_ends_with_examples() {
    let subs = subcommands();
    assert!(subs.len() >= 10, "{subs:?}");
    for s in &subs {
        for flag in ["-h", "--help"] {
            let o = netpath(&[s, flag]);
            let t = text(&o);
            assert!(o.status.success(), "netpath {s} {flag}: {t}");
            let ex = t
                .rfind("EXAMPLES:")
                .unwrap_or_else(|| panic!("netpath {s} {flag}:\n{t}"));
            assert!(
                t[ex..].contains(&format!("netpath {s}")),
                "netpath {s} {flag}:\n{t}"
            );
        }
    }
    // `netpath help agent` knows the hidden command.
    let o = netpath(&["help", "agent"]);
    assert!(
        o.status.success() && text(&o).contains("EXAMPLES:"),
        "{}",
        text(&o)
    );
}

/// `diff` of saved files refuses traffic flags after parsing them: a value it parsed gets that
/// refusal, one it could not parse gets clap's one line. Nothing runs, nothing needs root.
#[test]
fn a_duration_flag_takes_humantime_and_its_old_spelling() {
    let parsed = |args: &[&str]| {
        let mut all = vec!["diff", "a.json", "b.json"];
        all.extend_from_slice(args);
        let o = netpath(&all);
        let t = text(&o);
        assert!(!o.status.success(), "{t}");
        // An old spelling says its new name in a line of its own (docs/cli.md).
        let (hints, lines): (Vec<&str>, Vec<&str>) = t
            .trim()
            .lines()
            .partition(|l| l.contains("the old name goes in the next release"));
        let old = args.iter().any(|a| a.ends_with("-secs"));
        assert_eq!(
            hints.len(),
            usize::from(old && lines[0].contains("are for measuring")),
            "{t}"
        );
        assert_eq!(lines.len(), 1, "{t}");
        t.contains("are for measuring now")
    };
    for ok in [
        &["--burst-duration", "2s"][..],
        &["--bulk", "500ms"],
        &["--bulk", "3s"],
        &["--bulk-secs", "3"],
        &["--bulk", "1.5"],
        &["--burst-duration", "250ms"],
        &["--burst-secs", "2"],
    ] {
        assert!(parsed(ok), "{ok:?} was not taken");
    }
    for bad in [
        &["--bulk", "2 parsecs"][..],
        &["--bulk", "11m"],
        &["--bulk-secs", "-1"],
    ] {
        assert!(!parsed(bad), "{bad:?} was taken");
    }
}

/// The long flags a command's `--help` lists.
fn help_flags(sub: &str) -> Vec<String> {
    let t = text(&netpath(&[sub, "--help"]));
    t.lines()
        .filter_map(|l| {
            let l = l.trim_start();
            let l = l
                .strip_prefix("-")
                .filter(|r| r.len() > 3 && &r[1..3] == ", ")
                .map_or(l, |r| &r[3..]);
            l.strip_prefix("--")
                .map(|r| format!("--{}", r.split([' ', ',', '=']).next().unwrap_or_default()))
        })
        .collect()
}

#[test]
fn completions_name_every_flag_help_lists() {
    let o = netpath(&["completions", "bash"]);
    assert!(o.status.success(), "{}", text(&o));
    let script = String::from_utf8_lossy(&o.stdout);
    let mut checked = 0;
    for sub in subcommands().iter().filter(|s| *s != "agent") {
        assert!(
            script.contains(&format!("netpath__{}", sub.replace('-', "__")))
                || script.contains(sub.as_str()),
            "{sub}"
        );
        for flag in help_flags(sub) {
            checked += 1;
            assert!(
                script.contains(&flag),
                "bash completion lacks netpath {sub} {flag}"
            );
        }
        // Old spellings are hidden: not completed.
        for old in netpath::cli::renamed::RENAMED
            .iter()
            .filter(|r| r.command == sub)
        {
            assert!(
                !help_flags(sub).contains(&old.old.to_string()),
                "{sub} {}",
                old.old
            );
        }
    }
    assert!(checked > 100, "{checked}");
}

/// Standard output already closed (`netpath … | true`): exit 0, nothing on stderr.
#[test]
fn a_closed_pipe_ends_quietly() {
    for args in [
        &["completions", "bash"][..],
        &["--help"],
        &[
            "report",
            "../docs/data/readme-compare.json",
            "--format",
            "text",
        ],
    ] {
        let (reader, writer) = std::io::pipe().unwrap();
        drop(reader);
        let o = Command::new(NETPATH)
            .args(args)
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .stdout(writer)
            .output()
            .unwrap();
        assert!(
            o.status.success(),
            "netpath {args:?}: {:?} {}",
            o.status,
            text(&o)
        );
        assert!(o.stderr.is_empty(), "netpath {args:?}: {}", text(&o));
    }
}

#[test]
fn version_names_its_commit() {
    let o = netpath(&["-V"]);
    let t = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{t}");
    // Built from a git checkout: `netpath 0.1.0 (0123456789ab)`.
    let commit = t
        .trim()
        .rsplit_once('(')
        .map(|(_, c)| c.trim_end_matches(')'))
        .unwrap_or("");
    assert!(
        commit.len() >= 7 && commit.chars().all(|c| c.is_ascii_hexdigit()),
        "{t}"
    );
}

/// A saved compare: the HTML report by default (named after the run, in the current
/// directory), the text with --format text, the charts and the text by -o's extension.
#[test]
fn report_renders_a_saved_run() {
    let run =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/data/readme-compare.json");
    let dir = tempfile::tempdir().unwrap();
    let o = Command::new(NETPATH)
        .arg("report")
        .arg(&run)
        .current_dir(dir.path())
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    let html = std::fs::read_to_string(dir.path().join("readme-compare.html")).unwrap();
    assert!(
        html.starts_with("<!DOCTYPE html>"),
        "{}",
        &html[..100.min(html.len())]
    );
    assert!(
        text(&o).contains("wrote readme-compare.html"),
        "{}",
        text(&o)
    );
    let (svg, txt) = (dir.path().join("c.svg"), dir.path().join("c.txt"));
    let o = Command::new(NETPATH)
        .arg("report")
        .arg(&run)
        .arg("-q")
        .arg("-o")
        .arg(&svg)
        .arg("-o")
        .arg(&txt)
        .output()
        .unwrap();
    assert!(
        o.status.success() && o.stdout.is_empty() && o.stderr.is_empty(),
        "{}",
        text(&o)
    );
    assert!(std::fs::read_to_string(&svg).unwrap().contains("<svg"));
    let printed = netpath(&["report", run.to_str().unwrap(), "--format", "text"]);
    let t = String::from_utf8(printed.stdout).unwrap();
    assert_eq!(t, std::fs::read_to_string(&txt).unwrap());
    assert!(
        t.starts_with("backend: ") && t.contains("== the answer"),
        "{t}"
    );
}

/// The report of a saved default run opens with its answer: the answer table with each
/// driver's ratio and interval as the JSON has them, the claims with their verdicts, whether
/// the hops add up; then each driver's figures. No section is empty: a table has rows, a
/// chart has marks, an empty one says "none".
#[test]
fn the_report_opens_with_the_answer_and_no_section_is_empty() {
    let run =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/data/readme-compare.json");
    let dir = tempfile::tempdir().unwrap();
    let page = dir.path().join("r.html");
    let o = netpath(&[
        "report",
        run.to_str().unwrap(),
        "-q",
        "-o",
        page.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", text(&o));
    let html = std::fs::read_to_string(&page).unwrap();
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&run).unwrap()).unwrap();
    let at = |s: &str| html.find(s).unwrap_or_else(|| panic!("no {s}"));
    let order = [
        "<h2>The answer</h2>",
        "<h2>The claims, judged on this run</h2>",
        "<h2>Do the hops add up?</h2>",
        "<h2>Each driver's round trips</h2>",
        "<h2>Where the time goes</h2>",
        "<h2>Lost events</h2>",
    ];
    let pos: Vec<usize> = order.iter().map(|s| at(s)).collect();
    assert!(pos.windows(2).all(|w| w[0] < w[1]), "{order:?} at {pos:?}");
    let answer = &html[pos[0]..pos[1]];
    let s = &json["summary"];
    for p in s["pairs"].as_array().unwrap() {
        let r = format!("{:.2}×", p["ratio"].as_f64().unwrap());
        // In the table and beside its dot in the chart.
        assert!(answer.matches(&r).count() >= 2, "{r}: {answer}");
        let label = format!(
            "{} / {}",
            p["driver"].as_str().unwrap(),
            p["reference"].as_str().unwrap()
        );
        assert!(answer.contains(&label), "{label}");
    }
    for r in s["rows"].as_array().unwrap() {
        assert!(answer.contains(&format!("<td>{}</td>", r["driver"].as_str().unwrap())));
    }
    let claims = &html[pos[1]..pos[2]];
    for c in s["claims"].as_array().unwrap() {
        let v = c["verdict"].as_str().unwrap();
        assert!(claims.contains(&format!("verdict {v}")), "{v}");
        assert!(claims.contains(c["claim"].as_str().unwrap()), "{c}");
    }
    let within = format!(
        "{} of {}",
        s["check"]["within"].as_u64().unwrap(),
        s["check"]["checked"].as_u64().unwrap()
    );
    assert!(html[pos[2]..pos[3]].contains(&within), "{within}");
    // Protocol-true and in words.
    assert!(html.contains("over one TCP connection"));
    assert!(
        !html.contains("cross_cpu_wakeups"),
        "placement as a key dump"
    );
    // No table without rows, no chart without marks.
    for t in html.split("<table>").skip(1) {
        let t = &t[..t.find("</table>").unwrap()];
        assert!(t.contains("<td"), "a table without rows: {t}");
    }
    for svg in html.split("<svg").skip(1) {
        let svg = &svg[..svg.find("</svg>").unwrap()];
        assert!(
            ["<circle", "<rect", "<path", "<polyline", "<line"]
                .iter()
                .any(|m| svg.contains(m)),
            "a chart without marks"
        );
    }
    // This run lost nothing: said, not an empty table.
    assert!(html[pos[5]..].contains("none: every event"));
}
