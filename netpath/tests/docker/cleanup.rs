//! What a run leaves when it dies: `cleanup_docker` after a killed run (its child is
//! `child_docker_labs_process` in docker.rs) and Ctrl-C in the middle of `compare --docker`.
//! The check that nothing at all is left is `zz_cleanup_docker_leaves_nothing`, the last test.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use netpath::docker;

use super::common::{self, root_links, usernet::docker as docker_cli};
use super::{CHILD_ENV, assert_run_gone, labelled, setup};

#[test]
fn cleanup_docker_removes_what_a_killed_run_left() {
    let (_g, engine) = setup();
    let (mut child, ids) = common::spawn_test_child(
        "child_docker_labs_process",
        (CHILD_ENV, "1"),
        Stdio::null(),
        "RUNIDS=",
        Duration::from_secs(120),
    );
    assert!(!ids.is_empty(), "child printed no run ids");
    let ids: Vec<String> = ids.split_whitespace().map(String::from).collect();
    assert_eq!(ids.len(), 3);
    // The egress run's uplink is in the host's namespace until cleanup removes it.
    assert!(root_links().contains(&format!("np{}up", ids[2])));
    // While the child lives, cleanup leaves its runs alone.
    let removed = docker::cleanup_docker(&engine).unwrap();
    assert!(
        removed
            .iter()
            .all(|r| ids.iter().all(|id| !r.contains(id.as_str()))),
        "{removed:?}"
    );
    assert!(!labelled("container", Some(&ids[0])).is_empty());
    let _ = child.0.kill();
    let _ = child.0.wait();
    // The second daemon outlives its parent (own process group) until cleanup stops it.
    let sock = format!("/run/netpath/dockerd-{}.sock", ids[1]);
    assert!(Path::new(&sock).exists());
    let removed = docker::cleanup_docker(&engine).unwrap();
    eprintln!("cleanup: {removed:?}");
    for id in &ids {
        assert_run_gone(id);
    }
    assert!(!Path::new(&sock).exists());
    assert!(!Path::new(&format!("/var/lib/netpath-docker-{}", ids[1])).exists());
    assert!(!Path::new(&format!("/run/netpath/dockerd-{}.json", ids[1])).exists());
}

/// Ctrl-C in the middle of `compare --docker`: the run's containers, networks, macvlan parent
/// and namespace are removed before netpath exits with 130.
#[test]
fn interrupted_compare_docker_removes_its_objects() {
    let (_g, _engine) = setup();
    let mut child = Command::new(env!("CARGO_BIN_EXE_netpath"))
        .args(["compare", "--docker", "-d", "macvlan", "-n", "1000000"])
        .arg("--no-untraced")
        .args(common::LATENCY_ONLY)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // The run id, once both of its containers run (the harness starts right after).
    let deadline = Instant::now() + Duration::from_secs(120);
    let id = loop {
        let names = docker_cli(&["ps", "--format", "{{.Names}}", "--filter", "label=netpath"]);
        let ids: Vec<&str> = names
            .lines()
            .filter_map(|n| n.strip_prefix("np")?.strip_suffix("-srv"))
            .filter(|id| names.contains(&format!("np{id}-cli")))
            .collect();
        if let [id] = ids.as_slice() {
            break id.to_string();
        }
        if Instant::now() > deadline || child.try_wait().unwrap().is_some() {
            let _ = child.kill();
            let out = child.wait_with_output().unwrap();
            panic!(
                "no macvlan containers came up: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    std::thread::sleep(Duration::from_secs(2));
    assert!(Path::new(&format!("/run/netpath/docker-mvp-{id}")).exists());
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(130), "{err}");
    assert!(err.contains(&format!("container np{id}-srv")), "{err}");
    assert_run_gone(&id);
}
