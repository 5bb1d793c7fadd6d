//! Interrupted runs leave nothing behind: each lab driver and `--docker`, stopped at a random
//! point with SIGINT, SIGTERM or SIGKILL (then `netpath cleanup`); two concurrent runs do not
//! collide, and `cleanup` during them removes neither their objects nor foreign ones.
//!
//! Each check compares the machine before and after (namespaces, links, nft tables, BPF
//! programs and links, TC/XDP attachments, docker-proxy and dockerd processes, Docker
//! containers and networks, netpath's state directory). Needs root and a Docker daemon
//! (started if none answers):
//!
//!     sudo -E cargo test -p netpath --test interrupt -- --test-threads=1

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use netpath::driver::Driver;

mod common;
use common::leftovers::snapshot;
use common::{ensure_daemon, need_root};

use common::NETPATH;

/// xorshift64*, seeded from the clock (the seed is printed so a failure can be replayed
/// with `NETPATH_TEST_SEED`).
struct Rng(u64);

impl Rng {
    fn new() -> Rng {
        let seed = std::env::var("NETPATH_TEST_SEED")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| {
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .unwrap()
                    .as_nanos() as u64
                    | 1
            });
        println!("seed {seed} (NETPATH_TEST_SEED={seed} replays it)");
        Rng(seed)
    }
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    /// Uniform in `[lo, hi)` milliseconds.
    fn millis(&mut self, lo: u64, hi: u64) -> Duration {
        Duration::from_millis(lo + self.next() % (hi - lo))
    }
}

fn compare(args: &[&str]) -> Child {
    Command::new(NETPATH)
        .arg("compare")
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start netpath")
}

fn cleanup() {
    let out = Command::new(NETPATH).arg("cleanup").output().unwrap();
    assert!(
        out.status.success(),
        "netpath cleanup: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The machine is as `before` (BPF objects of an exited process go away asynchronously:
/// a few seconds' grace).
fn assert_restored(before: &std::collections::BTreeSet<String>, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let ch = common::leftovers::changes(before, &snapshot());
        if ch.is_empty() {
            return;
        }
        if Instant::now() > deadline {
            panic!("{what}: {ch:?}");
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

const SIGNALS: [(libc::c_int, &str); 3] = [
    (libc::SIGINT, "SIGINT"),
    (libc::SIGTERM, "SIGTERM"),
    (libc::SIGKILL, "SIGKILL"),
];

/// One run of `args`, signalled after `delay`; true if the signal found it running.
fn interrupt_once(args: &[&str], sig: (libc::c_int, &str), delay: Duration) -> bool {
    // What killed runs of others left (e.g. a `doctor` namespace) is not this run's: gone
    // first, so that the cleanup after SIGKILL removes only what this run left.
    cleanup();
    let before = snapshot();
    let mut c = compare(args);
    std::thread::sleep(delay);
    let running = c.try_wait().unwrap().is_none();
    // SAFETY: our own unreaped child.
    unsafe { libc::kill(c.id() as libc::pid_t, sig.0) };
    let st = common::exit_within(&mut c, Duration::from_secs(60));
    let mut err = String::new();
    if let Some(mut e) = c.stderr.take() {
        use std::io::Read;
        let _ = e.read_to_string(&mut err);
    }
    let what = format!(
        "`netpath compare {}` {} after {delay:?} ({st})",
        args.join(" "),
        sig.1
    );
    println!(
        "{what}{}",
        if running { "" } else { ": had already exited" }
    );
    // What the run said about its cleanup goes with any leftover it is charged with.
    let what = format!("{what}; its stderr: {}", err.trim());
    if running && sig.0 != libc::SIGKILL {
        use std::os::unix::process::ExitStatusExt;
        // Exits 128 + signal after its cleanup (or dies of the signal if it came before the
        // handler was in place).
        assert!(
            st.code() == Some(128 + sig.0) || st.signal() == Some(sig.0),
            "{what}"
        );
        assert_restored(&before, &what);
    }
    if sig.0 == libc::SIGKILL {
        cleanup();
    }
    assert_restored(&before, &what);
    running
}

/// Whether this kernel has netfilter programs (`--parts`, 6.4+): `struct bpf_nf_ctx` in its BTF.
fn netfilter_programs_here() -> bool {
    let out = Command::new("bpftool")
        .args([
            "btf",
            "dump",
            "file",
            "/sys/kernel/btf/vmlinux",
            "format",
            "raw",
        ])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).contains("'bpf_nf_ctx'")
}

/// Every lab driver, twice each, at random points, signals rotating.
#[test]
fn interrupted_lab_runs_leave_nothing() {
    let _g = need_root();
    let mut rng = Rng::new();
    let mut interrupted = 0;
    // ipvlan and netkit on a kernel without them: `compare` refuses them before building
    // anything, so a signal there tests nothing (the 6.12 VM has them).
    let here: Vec<Driver> = (Driver::ALL.into_iter())
        .filter(|&d| match common::unavailable_here(d) {
            Some(why) => {
                println!("{d}: not built on this kernel ({why})");
                false
            }
            None => true,
        })
        .collect();
    for (i, d) in here.iter().chain(here.iter()).enumerate() {
        let sig = SIGNALS[(i + rng.next() as usize) % SIGNALS.len()];
        let delay = rng.millis(100, 4000);
        let mut args = vec![
            "-d",
            d.name(),
            "-n",
            "3000",
            "--bulk",
            "0.5",
            "--burst-duration",
            "0.5",
        ];
        // The second pass links netfilter parts too: their programs and links (descriptors
        // only) are in the snapshot, so none may outlive the run whatever ends it.
        if i >= here.len() && netfilter_programs_here() {
            args.push("--parts");
        }
        if interrupt_once(&args, sig, delay) {
            interrupted += 1;
        }
    }
    println!("{interrupted} of {} lab runs interrupted", 2 * here.len());
    assert!(
        interrupted >= here.len(),
        "too few runs were still running when signalled"
    );
}

/// `--idle poll` (the default) holds the CPUs awake while a run measures; the kernel drops the
/// request with the process, SIGKILL included, and `cleanup` finds nothing to undo.
#[test]
fn cpus_held_awake_are_released_on_every_exit() {
    use common::leftovers::cpu_latency_limit_us;
    let _g = need_root();
    cleanup();
    let before = cpu_latency_limit_us().expect("/dev/cpu_dma_latency");
    assert_ne!(
        before, 0,
        "something else holds the CPUs awake: this test cannot tell"
    );
    for sig in SIGNALS {
        let mut c = compare(&["-d", "host", "-n", "200000", "--bulk", "0", "--burst", "0"]);
        // Held from the first round on.
        let deadline = Instant::now() + Duration::from_secs(30);
        while cpu_latency_limit_us() != Some(0) {
            assert!(
                Instant::now() < deadline,
                "the run never held the CPUs awake"
            );
            assert!(c.try_wait().unwrap().is_none(), "the run ended first");
            std::thread::sleep(Duration::from_millis(20));
        }
        // SAFETY: our own unreaped child.
        unsafe { libc::kill(c.id() as libc::pid_t, sig.0) };
        common::exit_within(&mut c, Duration::from_secs(60));
        if sig.0 == libc::SIGKILL {
            cleanup();
        }
        assert_eq!(cpu_latency_limit_us(), Some(before), "after {}", sig.1);
    }
    // Asked to let the CPUs idle, a run holds nothing.
    let mut c = compare(&[
        "-d", "host", "-n", "200000", "--bulk", "0", "--burst", "0", "--idle", "deep",
    ]);
    let t = Instant::now();
    while t.elapsed() < Duration::from_secs(3) && c.try_wait().unwrap().is_none() {
        assert_eq!(
            cpu_latency_limit_us(),
            Some(before),
            "--idle deep held the CPUs"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    // SAFETY: our own unreaped child.
    unsafe { libc::kill(c.id() as libc::pid_t, libc::SIGINT) };
    common::exit_within(&mut c, Duration::from_secs(60));
}

/// `--docker`: one run per signal, at random points (image build, containers, traffic).
#[test]
fn interrupted_docker_runs_leave_nothing() {
    let _g = need_root();
    let _engine = ensure_daemon();
    let mut rng = Rng::new();
    for (sig, d) in SIGNALS.iter().zip(["bridge", "published-proxy", "bridge"]) {
        let delay = rng.millis(500, 8000);
        let args = common::latency_only(&["--docker", "-d", d, "-n", "2000"]);
        interrupt_once(&args, *sig, delay);
    }
}

/// Two runs at once on the same driver finish, and `netpath cleanup` in the middle of them
/// leaves their objects and foreign `np`-looking ones alone.
#[test]
fn concurrent_runs_and_cleanup_do_not_collide() {
    let _g = need_root();
    // Foreign objects: a namespace and a root link whose names start like netpath's.
    let ip = |args: &[&str]| Command::new("ip").args(args).status().unwrap().success();
    assert!(ip(&["netns", "add", "npforeign"]));
    assert!(ip(&[
        "link",
        "add",
        "npforeign0",
        "type",
        "veth",
        "peer",
        "name",
        "npforeign1"
    ]));
    let before = snapshot();
    let args = [
        "-d",
        "bridge",
        "-n",
        "5000",
        "--bulk",
        "1",
        "--burst-duration",
        "0.5",
    ];
    let mut a = compare(&args);
    let mut b = compare(&args);
    std::thread::sleep(Duration::from_millis(1500));
    let out = Command::new(NETPATH).arg("cleanup").output().unwrap();
    let said = String::from_utf8_lossy(&out.stdout).into_owned();
    let sa = common::exit_within(&mut a, Duration::from_secs(120));
    let sb = common::exit_within(&mut b, Duration::from_secs(120));
    let after = snapshot();
    let _ = ip(&["netns", "del", "npforeign"]);
    let _ = ip(&["link", "del", "npforeign0"]);
    assert!(
        out.status.success(),
        "cleanup: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        !said.contains("removed"),
        "cleanup removed something of a live run: {said}"
    );
    assert!(sa.success() && sb.success(), "concurrent runs: {sa}, {sb}");
    let ch = common::leftovers::changes(&before, &after);
    assert!(
        ch.is_empty(),
        "the runs or cleanup changed the machine: {ch:?}"
    );
}
