//! Helpers shared by the privileged lab test binaries.
#![allow(dead_code)] // each test binary uses its own subset

pub mod dockerd;
pub mod schema;

use std::collections::HashSet;
use std::sync::Mutex;
use std::time::Duration;

use netpath::harness::RrConfig;
use netpath::netns::Netns;
use netpath::path::NetPath;

/// Tests share /run/netns and `cleanup_leftovers` removes every lab not held by another
/// process, so they run one at a time even without `--test-threads=1`.
pub static SERIAL: Mutex<()> = Mutex::new(());

pub fn need_root() -> std::sync::MutexGuard<'static, ()> {
    let g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    assert!(
        nix::unistd::geteuid().is_root(),
        "this test needs root (it creates network namespaces): run the privileged tests as root, e.g. `cargo xtask test`"
    );
    g
}

pub fn small_rr() -> RrConfig {
    RrConfig {
        requests: 200,
        warmup: 20,
        req_size: 1024,
        resp_size: 1024,
        timeout: Duration::from_secs(20),
        ..Default::default()
    }
}

/// /run/netns entries of a run id.
pub fn netns_files(run_id: &str) -> Vec<String> {
    let Ok(rd) = std::fs::read_dir("/run/netns") else {
        return Vec::new();
    };
    rd.filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(&format!("np{run_id}")))
        .collect()
}

/// Names of links in the root namespace (read via netlink from a fresh thread, which
/// starts in the process's namespace).
pub fn root_links() -> HashSet<String> {
    std::thread::spawn(|| {
        netpath::nl::Nl::new()
            .unwrap()
            .links()
            .unwrap()
            .into_iter()
            .map(|l| l.name)
            .collect()
    })
    .join()
    .unwrap()
}

/// if_nametoindex run inside the namespace.
pub fn ifindex_in(ns: &Netns, name: &str) -> u32 {
    let name = name.to_string();
    ns.run(move || Ok(nix::net::if_::if_nametoindex(name.as_str()).unwrap_or(0)))
        .unwrap()
}

/// The lab left the root netns as it found it; after teardown none of its namespaces remain.
pub fn tear_down_cleanly(lab: NetPath, before: &HashSet<String>) {
    assert_eq!(
        &root_links(),
        before,
        "the lab must not touch the root netns"
    );
    let id = lab.run_id.clone();
    lab.teardown().unwrap();
    assert!(netns_files(&id).is_empty(), "{:?}", netns_files(&id));
    assert_eq!(&root_links(), before);
}
