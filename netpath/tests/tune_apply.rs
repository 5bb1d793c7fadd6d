//! `netpath tune --apply CMD --revert CMD`: a change of the user's own, in place only while
//! side A runs (nft counters the commands read at every change of side: every packet of A's
//! turns hit A's rule, none of B's could), reverted at the end, after a failing --apply and
//! on SIGINT (a scratch namespace's rule set equals the one before), with nothing of netpath's
//! left; bad input in one line. (`--between` shares the whole path with this: only the
//! path it is handed differs, and `compare --between` is tested in docker/resolve.rs.)
//!
//!     sudo -E cargo test -p netpath --test tune_apply -- --test-threads=1

use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

mod common;
use common::leftovers::{assert_nothing_left, snapshot};
use common::{NETPATH, need_root};

/// The apply command: counts the server's requests in two nft tables of the server's
/// namespace (`tap_all` made once and kept, `tap_a` A's rule), marks the scratch namespace,
/// and logs `apply ALL`. `$TAP_VIA` says how the command reaches the server's nft
/// (`server`: through `ip netns exec $NP_SERVER_NS`; else the commands run in it already).
const APPLY: &str = r#"set -e
tnft() { if [ "$TAP_VIA" = server ]; then ip netns exec "$NP_SERVER_NS" nft "$@"; else nft "$@"; fi; }
count() { tnft list table inet "$1" | sed -n 's/.*counter packets \([0-9]*\).*/\1/p'; }
table() { printf 'table inet %s {\n chain c {\n type filter hook input priority %s;\n udp dport %s counter\n }\n}\n' "$1" "$2" "$NP_SERVER_PORT"; }
tnft list table inet tap_all >/dev/null 2>&1 || table tap_all -10 | tnft -f -
echo "apply-start" >> "$TAP_LOG"
table tap_a 0 | tnft -f -
ip netns exec "$TAP_NS" nft add table inet tap_applied
sleep "${TAP_SLEEP:-0}"
echo "apply $(count tap_all)" >> "$TAP_LOG""#;

/// The revert command: logs `revert ALL A` (both counters at the same moment: no traffic runs
/// while a command does), then removes A's rule and the scratch mark.
const REVERT: &str = r#"set -e
tnft() { if [ "$TAP_VIA" = server ]; then ip netns exec "$NP_SERVER_NS" nft "$@"; else nft "$@"; fi; }
count() { tnft list table inet "$1" | sed -n 's/.*counter packets \([0-9]*\).*/\1/p'; }
a=$(tnft list table inet tap_a >/dev/null 2>&1 && count tap_a || echo none)
echo "revert $(count tap_all 2>/dev/null || echo 0) $a" >> "$TAP_LOG"
tnft delete table inet tap_a 2>/dev/null || true
ip netns exec "$TAP_NS" nft delete table inet tap_applied"#;

/// A namespace of the test's own, outside any lab: what the commands change there must be
/// as it was after every run.
struct Scratch {
    name: String,
    log: std::path::PathBuf,
}

impl Scratch {
    fn new(tag: &str) -> Scratch {
        let name = format!("tapply-{}-{tag}", std::process::id());
        sh(&format!("ip netns add {name}"));
        sh(&format!(
            "ip netns exec {name} nft add table inet tap_keep && \
             ip netns exec {name} nft add chain inet tap_keep c '{{ type filter hook input priority 0; }}'"
        ));
        let log = std::env::temp_dir().join(format!("{name}.log"));
        let _ = std::fs::remove_file(&log);
        Scratch { name, log }
    }

    fn ruleset(&self) -> String {
        sh(&format!("ip netns exec {} nft list ruleset", self.name))
    }

    fn log(&self) -> Vec<String> {
        std::fs::read_to_string(&self.log)
            .unwrap_or_default()
            .lines()
            .map(str::to_string)
            .collect()
    }

    /// `netpath tune ARGS` with the commands' variables set, not waited for.
    fn tune(&self, via: &str, sleep: u32, args: &[&str]) -> Command {
        let mut c = Command::new(NETPATH);
        c.arg("tune")
            .args(args)
            .env("TAP_VIA", via)
            .env("TAP_NS", &self.name)
            .env("TAP_LOG", &self.log)
            .env("TAP_SLEEP", sleep.to_string())
            .stdin(Stdio::null());
        c
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = Command::new("ip")
            .args(["netns", "del", &self.name])
            .status();
        let _ = std::fs::remove_file(&self.log);
    }
}

fn sh(cmd: &str) -> String {
    let out = Command::new("sh").args(["-c", cmd]).output().unwrap();
    assert!(
        out.status.success(),
        "{cmd}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// One change of side read from the log.
#[derive(Debug, PartialEq)]
enum Step {
    Apply { all: u64 },
    Revert { all: u64, a: u64 },
}

fn steps(log: &[String]) -> Vec<Step> {
    log.iter()
        .filter(|l| *l != "apply-start")
        .map(|l| {
            let w: Vec<&str> = l.split_whitespace().collect();
            let n = |i: usize| w[i].parse::<u64>().unwrap_or_else(|_| panic!("{l}"));
            match w[0] {
                "apply" => Step::Apply { all: n(1) },
                "revert" => Step::Revert { all: n(1), a: n(2) },
                _ => panic!("{l}"),
            }
        })
        .collect()
}

/// The log of a whole run: apply and revert alternate from an apply to a revert; while each
/// apply held, A's rule counted every request the server got (it was there for all of A's
/// turn), and outside those windows B's turns got as many requests as A's (the sides send the
/// same traffic) with no rule of A's in place. Returns the number of applies.
fn check_windows(log: &[String], requests_per_side: Option<u64>) -> usize {
    let s = steps(log);
    assert!(s.len() >= 2 && s.len().is_multiple_of(2), "{log:?}");
    let (mut in_a, mut in_b, mut last) = (0, 0, 0);
    for pair in s.chunks(2) {
        let (Step::Apply { all: at_apply }, Step::Revert { all, a }) = (&pair[0], &pair[1]) else {
            panic!("not apply then revert: {log:?}");
        };
        assert_eq!(
            *a,
            all - at_apply,
            "A's rule missed a request of A's turn: {log:?}"
        );
        assert!(*a > 0, "{log:?}");
        in_b += at_apply - last;
        in_a += a;
        last = *all;
    }
    assert!(in_b > 0, "B never ran between two of A's turns: {log:?}");
    if let Some(n) = requests_per_side {
        assert_eq!(in_a, n, "{log:?}");
    }
    s.len() / 2
}

/// `tune` on the bridge lab, UDP (one datagram a request: counts are exact), the blocking
/// wait (no blocking line after the rounds), two rounds: A, B, then B, A.
const SMALL: [&str; 13] = [
    "-d", "bridge", "--proto", "udp", "-n", "300", "--warmup", "0", "--rounds", "2", "--wait",
    "block", "--json",
];

#[test]
fn a_change_is_in_place_only_for_side_a_and_reverted_at_the_end() {
    let _g = need_root();
    let s = Scratch::new("run");
    let rules = s.ruleset();
    let before = snapshot();
    let mut args = SMALL.to_vec();
    args.extend(["--apply", APPLY, "--revert", REVERT]);
    let out = common::output_ok(&mut s.tune("server", 0, &args));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    // Two rounds, each side three runs of 300 requests: the round's opening sweep (every
    // side's untraced run back to back, which the ratio pairs), then untraced and traced.
    let applies = check_windows(&s.log(), Some(2 * 3 * 300));
    // Sweep A, B, runs A, B | sweep B, A, runs B, A: applied for each of A's four turns,
    // reverted after each (the last one at the end).
    assert_eq!(applies, 4, "{:?}", s.log());
    let c = &v["change"];
    assert_eq!(
        (c["applied"].as_u64(), c["reverted"].as_u64()),
        (Some(4), Some(4)),
        "{c}"
    );
    assert_eq!(c["run_in"], "host");
    assert_eq!(c["path"], "bridge");
    let env = &c["environment"];
    let ns = env["NP_SERVER_NS"].as_str().unwrap();
    assert!(ns.starts_with("np") && ns.ends_with("-srv"), "{env}");
    assert_eq!(env["NP_SERVER_NS_PATH"], format!("/run/netns/{ns}"));
    assert_eq!(env["NP_DRIVER"], "bridge");
    assert!(
        env["NP_NFT_TABLE"]
            .as_str()
            .unwrap()
            .starts_with("netpath_"),
        "{env}"
    );
    let devices = env["NP_DEVICES"].as_str().unwrap();
    assert!(devices.contains(&format!("eth0@{ns}")), "{devices}");
    assert_eq!(
        env["NP_DEVICE_COUNT"]
            .as_str()
            .unwrap()
            .parse::<usize>()
            .unwrap(),
        devices.split_whitespace().count()
    );
    // The sides are named by their commands and say which is which.
    assert!(
        v["a"]["label"].as_str().unwrap().starts_with("A (set -e"),
        "{}",
        v["a"]["label"]
    );
    assert!(
        v["b"]["label"].as_str().unwrap().starts_with("B ("),
        "{}",
        v["b"]["label"]
    );
    assert!(v["knob"].is_null() && v["a"]["setting"].is_null());
    assert!(!v["verdicts"].as_array().unwrap().is_empty());
    // Each side's report holds its own requests only (both are one lab).
    for side in ["a", "b"] {
        assert_eq!(v[side]["report"]["traced"]["count"], 300, "{side}");
    }
    common::schema::validate("tune", &v);
    assert_eq!(s.ruleset(), rules);
    assert_nothing_left(&before);
}

/// Sends SIGINT to `child` once `ready` holds for the log, then waits for it; its stderr.
fn interrupt_when(
    s: &Scratch,
    mut child: std::process::Child,
    ready: impl Fn(&[String]) -> bool,
) -> (std::process::ExitStatus, String) {
    let deadline = Instant::now() + Duration::from_secs(120);
    while !ready(&s.log()) {
        assert!(Instant::now() < deadline, "never got there: {:?}", s.log());
        assert!(
            child.try_wait().unwrap().is_none(),
            "ended early: {:?}",
            s.log()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGINT,
    )
    .unwrap();
    let out: Output = child.wait_with_output().unwrap();
    (
        out.status,
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn sigint_while_applied_or_while_applying_reverts_and_leaves_nothing() {
    let _g = need_root();
    // In A's turn (the log's last line an apply), then halfway through --apply itself (its
    // rule added, the command still running): either way the revert runs, last.
    for (tag, sleep, at) in [("turn", 0, "apply "), ("cmd", 3, "apply-start")] {
        let s = Scratch::new(tag);
        let rules = s.ruleset();
        let before = snapshot();
        let child = s
            .tune(
                "here",
                sleep,
                &[
                    "-d",
                    "bridge",
                    "--proto",
                    "udp",
                    "-n",
                    "20000",
                    "--warmup",
                    "0",
                    "--rounds",
                    "50",
                    "--wait",
                    "block",
                    "--commands-in",
                    "server",
                    "--apply",
                    APPLY,
                    "--revert",
                    REVERT,
                ],
            )
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let (st, err) = interrupt_when(&s, child, |log| {
            log.last().is_some_and(|l| l.starts_with(at))
        });
        assert_eq!(st.code(), Some(130), "{tag}: {err}");
        assert!(err.contains("reverting the change"), "{tag}: {err}");
        let log = s.log();
        assert!(log.last().unwrap().starts_with("revert "), "{tag}: {log:?}");
        if sleep > 0 {
            // The command was let finish before the revert: nothing half-applied.
            assert_eq!(
                log[log.len() - 2].split(' ').next(),
                Some("apply"),
                "{log:?}"
            );
        }
        assert_eq!(s.ruleset(), rules, "{tag}");
        assert_nothing_left(&before);
    }
}

#[test]
fn a_failing_apply_is_reverted_and_said_in_one_line() {
    let _g = need_root();
    let s = Scratch::new("fail");
    let rules = s.ruleset();
    let before = snapshot();
    let apply = "ip netns exec \"$TAP_NS\" nft add table inet tap_applied; \
                 echo 'cannot do that here' >&2; exit 7";
    let mut args = SMALL.to_vec();
    args.extend(["--apply", apply, "--revert", REVERT]);
    let out = s.tune("server", 0, &args).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        out.stdout.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    for says in [
        "--apply",
        "exit status: 7",
        "cannot do that here",
        "reverted with --revert",
    ] {
        assert!(err.contains(says), "{says}: {err}");
    }
    assert_eq!(s.log().len(), 1, "{:?}", s.log());
    assert_eq!(s.ruleset(), rules);
    assert_nothing_left(&before);
}

#[test]
fn bad_change_input_is_one_line_and_builds_nothing() {
    let _g = need_root();
    let before = snapshot();
    for (args, says) in [
        (&["--apply", "true"][..], "--revert"),
        (&["--revert", "true"][..], "--apply"),
        (
            &["--apply", "true", "--revert", "true", "--knob", "gro"][..],
            "--knob",
        ),
        (&["--between", "a", "b", "--knob", "gro"][..], "--apply"),
        (&["--apply", " ", "--revert", "true"][..], "empty"),
        (
            &[
                "-d",
                "bridge",
                "--between",
                "a",
                "b",
                "--apply",
                "true",
                "--revert",
                "true",
            ][..],
            "--between",
        ),
    ] {
        let err = common::refused(&[&["tune"][..], args].concat());
        assert!(err.contains(says), "{args:?}: {err}");
    }
    assert_nothing_left(&before);
}

/// `--parts`: a chain the change adds (20 rules no packet matches, in the server's INPUT) is a
/// part of side A's request `receiver-stack` with its rule count, absent from side B, and its
/// difference is ranked with the parts'.
#[test]
fn parts_name_the_chain_a_change_added() {
    let _g = need_root();
    let before = snapshot();
    let rules: String = (1..=20)
        .map(|i| format!(" ip daddr 192.0.2.{i} counter\n"))
        .collect();
    let apply = format!(
        "printf 'table ip np_parts {{\\n chain c {{\\n type filter hook input priority 5;\\n{}}}\\n}}\\n' \
         | ip netns exec \"$NP_SERVER_NS\" nft -f -",
        rules.replace('\n', "\\n")
    );
    let revert = "ip netns exec \"$NP_SERVER_NS\" nft delete table ip np_parts";
    let mut args = SMALL.to_vec();
    args.extend(["--parts", "--apply", &apply, "--revert", revert]);
    let out = common::output_ok(Command::new(NETPATH).arg("tune").args(&args));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let parts = |side: &str| {
        v[side]["report"]["parts"]
            .as_array()
            .cloned()
            .unwrap_or_default()
    };
    let ours = |p: &Value| p["name"] == "np_parts/c";
    let a: Vec<Value> = parts("a").into_iter().filter(ours).collect();
    assert_eq!(a.len(), 1, "{:#}", v["a"]["report"]["parts"]);
    let a = &a[0];
    assert_eq!(
        (a["hook"].as_str(), a["rules"].as_u64()),
        (Some("INPUT"), Some(20))
    );
    assert_eq!(
        (a["dir"].as_str(), a["hop"].as_str()),
        (Some("request"), Some("receiver-stack"))
    );
    assert!(a["netns"].as_str().unwrap().ends_with("-srv"), "{a}");
    assert!(a["packets"].as_u64().unwrap() >= 300, "{a}");
    assert!(!parts("b").iter().any(ours), "B has no such chain");
    let d = (v["parts"].as_array().unwrap().iter())
        .find(|d| d["name"] == "np_parts/c INPUT (request)")
        .unwrap_or_else(|| panic!("no delta for the part: {:#}", v["parts"]));
    assert_eq!(d["b"]["median"].as_f64(), Some(0.0), "{d}");
    assert!(d["a"]["median"].as_f64().unwrap() > 0.0, "{d}");
    common::schema::validate("tune", &v);
    assert_nothing_left(&before);
}
