//! What a run could leave behind on the machine, as comparable text, and what changed.

use std::collections::BTreeSet;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use super::root_links;

/// Everything a run could leave behind, as comparable text.
pub fn snapshot() -> BTreeSet<String> {
    let mut s = BTreeSet::new();
    if let Ok(rd) = std::fs::read_dir("/run/netns") {
        s.extend(rd.flatten().map(|e| format!("netns {:?}", e.file_name())));
    }
    if let Ok(rd) = std::fs::read_dir("/run/netpath") {
        s.extend(rd.flatten().map(|e| format!("state {:?}", e.file_name())));
    }
    s.extend(root_links().into_iter().map(|l| format!("link {l}")));
    // The CPU latency limit every process's requests make (`--idle poll` holds one): a run
    // that left CPUs held awake would show here.
    if let Some(us) = cpu_latency_limit_us() {
        s.insert(format!("cpu-latency {us}"));
    }
    // (tag, program, its arguments): each line the program prints, tagged.
    let mut listings: Vec<(&str, &str, &[&str])> = vec![
        ("nft", "nft", &["list", "tables"]),
        // Program ids, not names: a program of this run would be a new id.
        (
            "bpf",
            "sh",
            &["-c", "bpftool prog show | grep -o '^[0-9]*:'"],
        ),
        (
            "bpf-link",
            "sh",
            &["-c", "bpftool link show | grep -o '^[0-9]*:'"],
        ),
        // TC and XDP attachments in the host's namespace (tc filters, tcx links).
        ("bpf-net", "bpftool", &["net", "show"]),
        ("pid", "pgrep", &["-x", "docker-proxy|dockerd"]),
    ];
    if std::path::Path::new("/var/run/docker.sock").exists() {
        listings.push((
            "container",
            "docker",
            &["ps", "-a", "--format", "{{.Names}}"],
        ));
        listings.push((
            "network",
            "docker",
            &["network", "ls", "--format", "{{.Name}}"],
        ));
    }
    for (tag, program, args) in listings {
        let out = Command::new(program)
            .args(args)
            .stderr(Stdio::null())
            .output();
        if let Ok(o) = out {
            for l in String::from_utf8_lossy(&o.stdout).lines() {
                s.insert(format!("{tag} {}", l.trim()));
            }
        }
    }
    s
}

/// The machine's CPU latency limit, µs (2000000000 when no process asks for less).
pub fn cpu_latency_limit_us() -> Option<i32> {
    use std::io::Read;
    let mut b = [0u8; 4];
    std::fs::File::open("/dev/cpu_dma_latency")
        .and_then(|mut f| f.read_exact(&mut b))
        .ok()?;
    Some(i32::from_ne_bytes(b))
}

/// What netpath's runs left behind or removed since `before` among the kinds of objects
/// netpath makes (namespaces, np links, nft tables, BPF programs and links, state files). The
/// machine is shared: other users' containers, their veths and daemons come and go, and BPF
/// programs of other runs end meanwhile; none of those is netpath's to account for.
pub fn our_changes(before: &BTreeSet<String>) -> Vec<String> {
    changes(before, &snapshot())
        .into_iter()
        .filter(|c| !c.contains(" container ") && !c.contains(" network "))
        .filter(|c| !c.contains(" link ") || c.contains(" link np"))
        .filter(|c| !c.starts_with("removed bpf") && !c.starts_with("left pid"))
        .collect()
}

/// Nothing of netpath's changed since `before` (BPF objects of an exited process go away
/// asynchronously: a few seconds' grace).
pub fn assert_nothing_left(before: &BTreeSet<String>) {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let ch = our_changes(before);
        if ch.is_empty() {
            return;
        }
        assert!(Instant::now() < deadline, "left behind or removed: {ch:?}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// What changed between two snapshots, ignoring processes that ended (other users' daemons
/// and proxies come and go on their own; a process of netpath's that stays is still caught,
/// as are new ones). Empty when the machine is as it was.
pub fn changes(before: &BTreeSet<String>, after: &BTreeSet<String>) -> Vec<String> {
    let made = after.difference(before).map(|s| format!("left {s}"));
    let gone = before
        .difference(after)
        .filter(|s| !s.starts_with("pid "))
        .map(|s| format!("removed {s}"));
    made.chain(gone).collect()
}
