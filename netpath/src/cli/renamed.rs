//! Flags renamed when the command line got one grammar (docs/cli.md): each old spelling stays
//! a hidden alias of its new name for one release, and using it prints one line on stderr
//! saying the new name. A unit test checks that every entry here is a hidden alias of its
//! new flag in that command, so this table and clap agree.

/// One renamed flag: in `command`, `old` is now `new`.
pub struct Renamed {
    pub command: &'static str,
    pub old: &'static str,
    pub new: &'static str,
}

const fn r(command: &'static str, old: &'static str, new: &'static str) -> Renamed {
    Renamed { command, old, new }
}

/// Every hidden alias, by command.
pub const RENAMED: &[Renamed] = &[
    // The phases' durations (issue 16's renames, now said when used).
    r("compare", "--bulk-secs", "--bulk"),
    r("compare", "--burst-secs", "--burst-duration"),
    r("diff", "--bulk-secs", "--bulk"),
    r("diff", "--burst-secs", "--burst-duration"),
    r("validate", "--bulk-secs", "--bulk"),
    r("validate", "--burst-secs", "--burst-duration"),
    r("tune", "--bulk-secs", "--bulk"),
    r("bench", "--secs", "--duration"),
    r("serve", "--rescan-secs", "--rescan"),
    // One name for sampling and one for program statistics.
    r("serve", "--sample", "--sample-every"),
    r("serve", "--program-stats", "--prog-stats"),
    // trace's filters, pwru's way; its stop time is no run length.
    r("trace", "--host", "--filter-addr"),
    r("trace", "--port", "--filter-port"),
    r("trace", "--netns", "--filter-netns"),
    r("trace", "--iface", "--filter-iface"),
    r("trace", "--duration", "--timeout"),
    // Files written: -o, in the format of their extension.
    r("compare", "--report", "--output"),
    r("compare", "--svg", "--output"),
    r("report", "--svg", "--output"),
];

/// The lines to print for the old spellings in `args` (the process's arguments, program name
/// first): one per flag used, nothing after `--`.
pub fn hints(args: &[String]) -> Vec<String> {
    let mut rest = args.iter().skip(1).skip_while(|a| a.starts_with('-'));
    let Some(command) = rest.next() else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for a in rest.take_while(|a| *a != "--") {
        let flag = a.split('=').next().unwrap_or(a);
        for r in RENAMED
            .iter()
            .filter(|r| r.command == command && r.old == flag)
        {
            let line = format!(
                "netpath: {command} {}: now {} (the old name goes in the next release)",
                r.old, r.new
            );
            if !out.contains(&line) {
                out.push(line);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(s: &str) -> Vec<String> {
        s.split_whitespace().map(String::from).collect()
    }

    #[test]
    fn old_spellings_are_named_once_each() {
        assert_eq!(
            hints(&args(
                "netpath serve --all --sample 1 --program-stats --sample=2"
            )),
            [
                "netpath: serve --sample: now --sample-every (the old name goes in the next release)",
                "netpath: serve --program-stats: now --prog-stats (the old name goes in the next release)",
            ]
        );
        // Another command's flag of that name, the new names, and after `--`: nothing.
        assert!(hints(&args("netpath compare --sample-every 2 --port 9")).is_empty());
        assert!(hints(&args("netpath trace --filter-port 9 -- --port")).is_empty());
        assert!(hints(&args("netpath")).is_empty());
    }
}
