//! docker-proxy never outlives its lab: stopped when the lab is dropped, on SIGTERM, and by
//! `cleanup_leftovers` after the run that started it died or was SIGKILLed (a real killed run
//! in a child process: `child_published_proxy_process` in lab_drivers.rs).

use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use netpath::driver::Driver;
use netpath::lab::{self, cleanup_leftovers};

use super::common::{self, KillOnDrop, need_root, netns_files};
use super::{CHILD_ENV, exited};

#[test]
fn dropping_a_published_proxy_lab_stops_the_proxy() {
    let _serial = need_root();
    let lab = lab::build(Driver::PublishedProxy).unwrap();
    let (id, pid) = (lab.run_id.clone(), lab.proxy_pid.unwrap());
    assert!(!exited(pid));
    drop(lab);
    assert_proxy_and_netns_gone(pid, &id, "drop");
}

#[test]
fn cleanup_leftovers_kills_a_dead_runs_docker_proxy() {
    let _serial = need_root();
    let lab = lab::build(Driver::PublishedProxy).unwrap();
    let (id, pid) = (lab.run_id.clone(), lab.proxy_pid.unwrap());
    let names = common::sorted_names(&lab);
    std::mem::forget(lab); // the process that built it "died"
    assert!(!exited(pid));
    assert_eq!(netns_files(&id).len(), 2);
    let removed = cleanup_leftovers().unwrap();
    for n in &names {
        assert!(removed.contains(n), "{n} not removed: {removed:?}");
    }
    // The proxy was our child: killed and reaped, so its pid is gone altogether.
    assert_proxy_and_netns_gone(pid, &id, "cleanup");
}

/// The docker-proxy `pid`, our child, reaped (its pid gone altogether) and run `id`'s
/// namespaces removed, after `what`.
fn assert_proxy_and_netns_gone(pid: u32, id: &str, what: &str) {
    assert!(
        !Path::new(&format!("/proc/{pid}")).exists(),
        "docker-proxy {pid} survived {what}"
    );
    assert!(netns_files(id).is_empty(), "{:?}", netns_files(id));
}

fn wait_exited(pid: u32) -> bool {
    let t0 = Instant::now();
    while t0.elapsed() < Duration::from_secs(5) {
        if exited(pid) {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    false
}

fn spawn_child() -> (KillOnDrop, String, u32) {
    let (child, v) = common::spawn_test_child(
        "child_published_proxy_process",
        (CHILD_ENV, "1"),
        Stdio::null(),
        "RUNID=",
        Duration::from_secs(30),
    );
    let (id, pid) = v.split_once(" PID=").expect("child printed no run id");
    assert!(lab::is_run_id(id), "{v}");
    (child, id.to_string(), pid.parse().unwrap())
}

#[test]
fn sigterm_stops_the_docker_proxy() {
    let _serial = need_root();
    let (mut child, id, pid) = spawn_child();
    assert!(!exited(pid));
    // While the child lives, cleanup_leftovers from here leaves its lab and proxy alone.
    let removed = cleanup_leftovers().unwrap();
    assert!(removed.iter().all(|n| !n.contains(&id)), "{removed:?}");
    assert!(!exited(pid));
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.0.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let st = child.0.wait().unwrap();
    assert_eq!(st.code(), Some(143), "{st:?}");
    assert_proxy_and_netns_gone(pid, &id, "SIGTERM");
}

#[test]
fn sigkilled_runs_proxy_is_removed_by_cleanup_leftovers() {
    let _serial = need_root();
    let (mut child, id, pid) = spawn_child();
    child.0.kill().unwrap(); // SIGKILL: no cleanup in the child at all
    child.0.wait().unwrap();
    // The orphaned proxy keeps running in the node namespace.
    assert!(!exited(pid));
    assert_eq!(netns_files(&id).len(), 2);
    let removed = cleanup_leftovers().unwrap();
    assert!(removed.iter().any(|n| n.contains(&id)), "{removed:?}");
    // Not our child: it is gone, or a zombie of whoever adopted it.
    assert!(wait_exited(pid), "docker-proxy {pid} survived cleanup");
    assert!(netns_files(&id).is_empty(), "{:?}", netns_files(&id));
}
