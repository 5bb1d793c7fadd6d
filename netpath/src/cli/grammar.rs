//! The command line's one grammar (docs/cli.md), checked on clap's command tree: every flag
//! described, no long flag with two meanings across commands, every renamed flag a hidden
//! alias of its new name, and every flag the docs name (README.md, docs/*.md) one that
//! `--help` lists, in the command the docs give it to.

use std::collections::{BTreeMap, BTreeSet};

use clap::{Arg, ArgAction, Command, CommandFactory as _};

use super::Cli;

fn tree() -> Command {
    let mut c = Cli::command();
    c.build();
    c
}

/// The subcommands, hidden ones too, without clap's `help`.
fn commands(c: &Command) -> Vec<&Command> {
    c.get_subcommands()
        .filter(|s| s.get_name() != "help")
        .collect()
}

fn flags(c: &Command) -> impl Iterator<Item = &Arg> {
    c.get_arguments()
        .filter(|a| !a.is_positional() && a.get_id() != "help" && a.get_id() != "version")
}

/// What a flag is, beside its name: how it takes values, their names, and its help's first
/// clause (up to the first `(`, `;`, `:` or `.`): "Drivers, comma-separated" whatever each
/// command's default.
#[derive(Debug, PartialEq, Eq, PartialOrd, Ord, Clone)]
struct Meaning {
    kind: String,
    head: String,
}

fn meaning(a: &Arg) -> Meaning {
    let action = match a.get_action() {
        ArgAction::SetTrue => "a switch",
        ArgAction::Set => "one value",
        ArgAction::Append => "values",
        ArgAction::Count => "a count",
        _ => "other",
    };
    let names: Vec<String> = a
        .get_value_names()
        .unwrap_or_default()
        .iter()
        .map(|n| n.to_string())
        .collect();
    let kind = format!(
        "{action} {} {:?} delimiter {:?}",
        names.join(" "),
        a.get_num_args(),
        a.get_value_delimiter()
    );
    let help = a
        .get_help()
        .or(a.get_long_help())
        .map(|h| h.to_string())
        .unwrap_or_default();
    let head = help
        .split(['(', ';', ':', '.'])
        .next()
        .unwrap_or_default()
        .trim()
        .to_string();
    Meaning { kind, head }
}

#[test]
fn every_argument_described_every_command_with_examples() {
    let cmd = Cli::command();
    cmd.clone().debug_assert();
    for sub in cmd.get_subcommands() {
        let name = sub.get_name();
        for a in sub.get_arguments().filter(|a| a.get_id() != "help") {
            assert!(
                a.get_help().is_some() || a.get_long_help().is_some(),
                "netpath {name}: {} has no description",
                a.get_id()
            );
        }
        let after = sub
            .get_after_help()
            .map(|h| h.to_string())
            .unwrap_or_default();
        assert!(
            after.starts_with("EXAMPLES:"),
            "netpath {name}: no EXAMPLES"
        );
        assert!(
            after.contains(&format!("netpath {name}")),
            "netpath {name}: {after}"
        );
    }
}

/// A long flag means one thing wherever it is: the same way of taking values and the same
/// first clause of help in every command that has it (docs/cli.md lists them).
#[test]
fn no_long_flag_has_two_meanings() {
    let t = tree();
    let mut seen: BTreeMap<String, BTreeMap<Meaning, Vec<String>>> = BTreeMap::new();
    for c in commands(&t) {
        for a in flags(c) {
            if let Some(long) = a.get_long() {
                seen.entry(long.to_string())
                    .or_default()
                    .entry(meaning(a))
                    .or_default()
                    .push(c.get_name().to_string());
            }
        }
    }
    // Several commands share flags, or the check checks nothing.
    assert!(seen.values().any(|m| m.values().flatten().count() > 3));
    let two: Vec<String> = seen
        .iter()
        .filter(|(_, m)| m.len() > 1)
        .map(|(flag, m)| format!("--{flag}: {m:#?}"))
        .collect();
    assert!(
        two.is_empty(),
        "flags with two meanings:\n{}",
        two.join("\n")
    );
}

/// Every flag that takes a value shows its default: clap's `[default: …]`, or its help says
/// it (`default …`, or what happens without it).
#[test]
fn every_default_is_shown() {
    let t = tree();
    let mut silent = Vec::new();
    for c in commands(&t).into_iter().filter(|c| !c.is_hide_set()) {
        for a in flags(c).filter(|a| a.get_action().takes_values()) {
            let help = a.get_help().map(|h| h.to_string()).unwrap_or_default();
            let said = !a.get_default_values().is_empty()
                || help.to_lowercase().contains("default")
                || help.contains("required")
                || matches!(a.get_action(), ArgAction::Append)
                || help.starts_with("With --")
                || help.starts_with("Only ")
                || help.starts_with("Also ");
            if !said {
                silent.push(format!("netpath {} --{}", c.get_name(), a.get_id()));
            }
        }
    }
    assert!(silent.is_empty(), "no default shown: {silent:?}");
}

/// `renamed::RENAMED` and clap agree: each old spelling is a hidden alias of its new flag in
/// that command, and no visible flag there is spelled like it.
#[test]
fn renamed_flags_are_hidden_aliases() {
    let t = tree();
    for r in super::renamed::RENAMED {
        let c = t
            .find_subcommand(r.command)
            .unwrap_or_else(|| panic!("no command {}", r.command));
        let (old, new) = (&r.old[2..], &r.new[2..]);
        let a = flags(c)
            .find(|a| a.get_long() == Some(new))
            .unwrap_or_else(|| panic!("netpath {}: no {}", r.command, r.new));
        let hidden: Vec<&str> = a.get_all_aliases().unwrap_or_default();
        let visible: Vec<&str> = a.get_visible_aliases().unwrap_or_default();
        assert!(
            hidden.contains(&old) && !visible.contains(&old),
            "netpath {}: {} is no hidden alias of {}",
            r.command,
            r.old,
            r.new
        );
    }
}

/// Flags of other tools the docs name (docker, dockerd, cargo test, cargo xtask …): checked
/// as netpath's they would fail.
const OTHER_TOOLS: &[&str] = &[
    // dockerd and docker run
    "--userland-proxy",
    "--network",
    "--bridge",
    "--net",
    "--rm",
    // cargo and libtest
    "--test-threads",
    "--test",
    "--release",
    "--lib",
    // cargo xtask (its own --help lists them)
    "--vm",
    "--no-vm",
    "--tests",
    "--soak",
    "--bench",
    "--screenshot",
    "--jobs",
    "--timeout",
    "--seconds",
    "--minutes",
    "--memory",
    "--profile",
    "--accel",
    "--kernel",
    "--lock",
    "--check",
    // iptables, ip, bpftool, tc
    "--dport",
    "--ctstate",
    "--strict",
    "--lines",
    "--with-ns",
];

/// The pages: README.md and docs/*.md, name → text.
fn pages() -> BTreeMap<String, String> {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut out = BTreeMap::new();
    out.insert(
        "README.md".to_string(),
        std::fs::read_to_string(root.join("README.md")).expect("README.md"),
    );
    for e in std::fs::read_dir(root.join("docs")).expect("docs/") {
        let p = e.expect("a docs/ entry").path();
        if p.extension().is_some_and(|x| x == "md") {
            let name = format!("docs/{}", p.file_name().unwrap().to_string_lossy());
            out.insert(name, std::fs::read_to_string(&p).expect("a page"));
        }
    }
    out
}

/// The command-like pieces of a page: each line of a code block (continued lines joined),
/// and each inline code span.
fn pieces(text: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    let mut in_block = false;
    let mut cont = String::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim_start().starts_with("```") {
            in_block = !in_block;
            continue;
        }
        if in_block {
            let l = line.trim_end();
            match l.strip_suffix('\\') {
                Some(head) => cont.push_str(head),
                None => {
                    cont.push_str(l);
                    out.push((i + 1, std::mem::take(&mut cont)));
                }
            }
            continue;
        }
        let mut parts = line.split('`');
        parts.next();
        while let Some(code) = parts.next() {
            out.push((i + 1, code.to_string()));
            parts.next();
        }
    }
    out
}

/// The flags of a piece, by the netpath command they are given to: after `netpath CMD`,
/// `cargo xtask run -- CMD` or a piece that starts with a command's name; `None` for a piece
/// that is flags alone.
fn named_flags(piece: &str, commands: &BTreeSet<String>) -> Vec<(Option<String>, String)> {
    let words = words(piece);
    let mut out = Vec::new();
    if words
        .first()
        .is_some_and(|w| w.starts_with("--") && *w != "--")
    {
        out.push((
            None,
            words[0].split('=').next().unwrap_or_default().to_string(),
        ));
        return out;
    }
    let mut i = 0;
    while i < words.len() {
        let starts = (words[i] == "netpath" && i + 1 < words.len())
            || (i == 0 && commands.contains(words[i]));
        let at = if words[i] == "netpath" { i + 1 } else { i };
        if !starts || !commands.contains(words[at]) {
            i += 1;
            continue;
        }
        let cmd = words[at].to_string();
        i = at + 1;
        // The hidden agent's arguments are its own.
        if cmd == "agent" {
            continue;
        }
        while i < words.len() {
            let w = words[i];
            if ["|", ";", "&&", "||", "#", ">", "2>", "<"].contains(&w) || w.starts_with('#') {
                break;
            }
            if w.starts_with('-') && w.len() > 1 && w != "--" {
                out.push((
                    Some(cmd.clone()),
                    w.split('=').next().unwrap_or(w).to_string(),
                ));
            }
            i += 1;
        }
    }
    out
}

/// A piece's words, a quoted argument (`--apply 'iptables …'`) one word.
fn words(piece: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut rest = piece.trim_start();
    while !rest.is_empty() {
        let end = match rest.chars().next() {
            Some(q @ ('\'' | '"')) => rest[1..].find(q).map_or(rest.len(), |e| e + 2),
            _ => rest.find(char::is_whitespace).unwrap_or(rest.len()),
        };
        out.push(&rest[..end]);
        rest = rest[end..].trim_start();
    }
    out
}

/// What a command's `--help` lists: its long flags (no hidden alias) and short ones.
fn listed(c: &Command) -> BTreeSet<String> {
    let mut s = BTreeSet::new();
    for a in c.get_arguments() {
        if let Some(l) = a.get_long() {
            s.insert(format!("--{l}"));
        }
        if let Some(x) = a.get_short() {
            s.insert(format!("-{x}"));
        }
        for v in a.get_visible_aliases().unwrap_or_default() {
            s.insert(format!("--{v}"));
        }
    }
    s.insert("--help".into());
    s.insert("-h".into());
    s
}

#[test]
fn every_flag_the_docs_name_is_in_help() {
    let t = tree();
    let by_cmd: BTreeMap<String, BTreeSet<String>> = commands(&t)
        .into_iter()
        .map(|c| (c.get_name().to_string(), listed(c)))
        .collect();
    let names: BTreeSet<String> = by_cmd.keys().cloned().collect();
    let top = listed(&t);
    let any: BTreeSet<&String> = by_cmd.values().flatten().chain(&top).collect();
    // docs/cli.md lists the old spellings, which --help hides.
    let old: BTreeSet<&str> = super::renamed::RENAMED.iter().map(|r| r.old).collect();
    let mut wrong = Vec::new();
    let mut checked = 0;
    for (page, text) in pages() {
        for (line, piece) in pieces(&text) {
            for (cmd, flag) in named_flags(&piece, &names) {
                checked += 1;
                let ok = match &cmd {
                    _ if page == "docs/cli.md" && old.contains(flag.as_str()) => true,
                    Some(c) => by_cmd[c].contains(&flag),
                    None => any.contains(&flag) || OTHER_TOOLS.contains(&flag.as_str()),
                };
                if !ok {
                    let whose = cmd.map_or("any command".to_string(), |c| format!("netpath {c}"));
                    wrong.push(format!("{page}:{line}: {flag} is not in {whose}'s --help"));
                }
            }
        }
    }
    assert!(checked > 100, "only {checked} flags found in the docs");
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

#[test]
fn flags_are_found_where_the_docs_give_them() {
    let cmds: BTreeSet<String> = ["compare", "trace"].map(String::from).into();
    let f = |s: &str| named_flags(s, &cmds);
    assert_eq!(
        f("sudo netpath compare -d bridge --bulk=2s | tee x # --nope"),
        [
            (Some("compare".into()), "-d".into()),
            (Some("compare".into()), "--bulk".into())
        ]
    );
    assert_eq!(f("--wait block"), [(None, "--wait".into())]);
    assert_eq!(
        f("trace --filter-port 9"),
        [(Some("trace".into()), "--filter-port".into())]
    );
    assert!(f("docker run --network host").is_empty());
    assert_eq!(
        f("netpath trace --apply 'ip -j --x' -c 1"),
        [
            (Some("trace".into()), "--apply".into()),
            (Some("trace".into()), "-c".into())
        ]
    );
    assert!(f("--").is_empty());
    let p = pieces("a `netpath trace -c 1` b `--x`\n```sh\nnetpath compare \\\n  -d host\n```\n");
    assert_eq!(p.len(), 3, "{p:?}");
    assert_eq!(p[2].1, "netpath compare   -d host");
}
