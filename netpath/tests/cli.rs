//! The command line's conventions, checked on the binary without privilege: `netpath` alone
//! prints the usual help and fails, every subcommand's help ends with examples, and a duration
//! flag takes humantime and its older spelling.

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
