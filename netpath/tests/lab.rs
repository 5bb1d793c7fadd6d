//! Privileged integration tests for the netns lab and the request/response harness.
//! They build real namespaces, veths, bridges and nft tables, so they need root:
//!
//!     sudo -E cargo test -p netpath --test lab -- --test-threads=1
//!
//! Without root they fail with a message saying so (no silent skips).

use std::net::{Ipv4Addr, SocketAddrV4};
use std::os::fd::AsFd;
use std::path::Path;
use std::process::Stdio;
use std::sync::Mutex;
use std::time::Duration;

use netpath::driver::Driver;
use netpath::harness::{NoPhases, Phases, RrLoad, run_rr};
use netpath::lab::{self, IFNAME_MAX, cleanup_leftovers};
use netpath::sys::netns::{Held, Netns, current_inum, read_sysctl};
use netpath::sys::nl::links_in;
use netpath_common::DevKind;

mod common;
use common::{
    KillOnDrop, build_checked, check_devices, need_root, netns_files, root_links, rr_200, small_rr,
    sorted_names, tear_down_cleanly, want_names,
};

#[test]
fn netns_create_enter_run_delete() {
    let _serial = need_root();
    let id = lab::new_run_id().unwrap();
    let name = lab::netns_name(&id, "t");
    let ns = Netns::create(&name).unwrap();
    assert!(ns.path.exists());
    assert_eq!(ns.path, Path::new("/run/netns").join(&name));
    let root = current_inum().unwrap();
    assert_ne!(ns.inum, root);
    // run() enters on its own thread only.
    let inside = ns.run(current_inum).unwrap();
    assert_eq!(inside, ns.inum);
    assert_eq!(current_inum().unwrap(), root);
    // enter() moves the calling thread only.
    let ns2 = ns.clone();
    let (a, b) = std::thread::spawn(move || {
        ns2.enter().unwrap();
        (
            current_inum().unwrap(),
            std::thread::spawn(|| current_inum().unwrap())
                .join()
                .unwrap(),
        )
    })
    .join()
    .unwrap();
    assert_eq!(a, ns.inum);
    // A thread spawned from inside inherits the namespace.
    assert_eq!(b, ns.inum);
    assert_eq!(current_inum().unwrap(), root);
    // run_here() enters on the calling thread and comes back, even after an error.
    assert_eq!(ns.run_here(current_inum).unwrap(), ns.inum);
    assert_eq!(current_inum().unwrap(), root);
    let e = ns
        .run_here(|| -> anyhow::Result<()> { anyhow::bail!("here") })
        .unwrap_err();
    assert!(format!("{e:#}").contains("here"));
    assert_eq!(current_inum().unwrap(), root);
    // A fresh namespace has only lo, and it is down.
    let links = links_in(&ns).unwrap();
    assert_eq!(links.len(), 1, "{links:?}");
    assert_eq!(links[0].name, "lo");
    // Errors propagate out of run().
    let e = ns
        .run(|| -> anyhow::Result<()> { anyhow::bail!("boom") })
        .unwrap_err();
    assert!(format!("{e:#}").contains("boom"));
    // A panic inside run() becomes an error.
    let e = ns
        .run(|| -> anyhow::Result<()> { panic!("kaboom") })
        .unwrap_err();
    assert!(format!("{e:#}").contains("kaboom"), "{e:#}");
    // Creating the same name twice is refused.
    assert!(Netns::create(&name).is_err());
    ns.delete().unwrap();
    assert!(!ns.path.exists());
    ns.delete().unwrap(); // idempotent
}

/// A namespace held through an fd (as Docker containers' are) is named `/proc/self/fd/N`,
/// outlives its other names while held, is checked against the inode it should have, and is
/// freed once let go.
#[test]
fn held_namespace_outlives_its_name() {
    let _serial = need_root();
    let id = lab::new_run_id().unwrap();
    let ns = Netns::create(&lab::netns_name(&id, "held")).unwrap();
    let wrong = Held::through_fd("x", &ns.path, Some(ns.inum + 1)).unwrap_err();
    assert!(
        format!("{wrong:#}").contains("changed under us"),
        "{wrong:#}"
    );
    let held = Held::through_fd("held", &ns.path, Some(ns.inum)).unwrap();
    assert_eq!(held.ns.name, "held");
    assert_eq!(held.ns.inum, ns.inum);
    assert!(
        held.ns.path.starts_with("/proc/self/fd/"),
        "{:?}",
        held.ns.path
    );
    ns.delete().unwrap();
    assert!(!ns.path.exists());
    // Still there, through the fd: threads enter it, netlink lists its lo.
    assert_eq!(held.ns.run(current_inum).unwrap(), ns.inum);
    let links = links_in(&held.ns).unwrap();
    assert_eq!(links.len(), 1, "{links:?}");
    assert!(links[0].loopback && links[0].name == "lo", "{links:?}");
    // Opening it by name fails now that the name is gone.
    assert!(Netns::open_existing(&ns.name).is_err());
    drop(held);
    assert!(netns_files(&id).is_empty());
}

#[test]
fn host_driver_builds_runs_and_tears_down() {
    let (_serial, before, lab) = build_checked(Driver::Host, "host", &["host"]);
    assert!(lab::is_run_id(&lab.run_id), "{}", lab.run_id);
    assert_eq!(lab.driver, Driver::Host);
    assert_eq!(lab.client_ns, lab.server_ns);
    assert_eq!(
        lab.server_bind,
        SocketAddrV4::new(Ipv4Addr::LOCALHOST, lab::LAB_PORT)
    );
    assert_eq!(lab.connect_to, lab.server_bind);
    assert_eq!(lab.devices.len(), 1);
    let lo = &lab.devices[0];
    assert_eq!((lo.name.as_str(), lo.kind), ("lo", DevKind::Loopback));
    assert_eq!(lo.ifindex, 1);
    assert_eq!(lo.mtu, 65536);
    check_devices(&lab);
    let links = links_in(&lab.client_ns).unwrap();
    assert!(links.iter().all(|l| l.name == "lo" && l.up), "{links:?}");

    let r = rr_200(&lab);
    assert!(r.percentile_ns(50.0) <= r.percentile_ns(99.0));
    assert!(r.percentile_ns(100.0) >= r.percentile_ns(0.0));
    tear_down_cleanly(lab, &before);
}

#[test]
fn bridge_driver_builds_runs_and_tears_down() {
    let _serial = need_root();
    let before = root_links();
    let root_fwd = read_sysctl("net.ipv4.ip_forward").unwrap();
    let lab = lab::build(Driver::Bridge).unwrap();
    let id = lab.run_id.clone();
    let names = sorted_names(&lab);
    assert_eq!(names, want_names(&id, &["cli", "node", "srv"]));
    for n in &names {
        assert!(Path::new("/run/netns").join(n).exists());
    }
    let node = lab.node_ns.clone().unwrap();
    let (cli, srv) = (lab.client_ns.clone(), lab.server_ns.clone());
    let (net, plen) = lab.subnet.unwrap();
    assert_eq!(plen, 24);
    assert_eq!(net.octets()[..2], [10, 213]);
    let gw = Ipv4Addr::new(10, 213, net.octets()[2], 1);
    assert_eq!(
        *lab.server_bind.ip(),
        Ipv4Addr::new(10, 213, net.octets()[2], 3)
    );
    assert_eq!(lab.connect_to, lab.server_bind);
    assert_eq!(
        lab.published,
        Some(SocketAddrV4::new(gw, lab::PUBLISHED_PORT))
    );

    // Devices: kinds, counts, where they live.
    let br = format!("np{id}br");
    let (cport, sport) = (format!("np{id}c"), format!("np{id}s"));
    let kinds: Vec<(String, String, DevKind)> = lab
        .devices
        .iter()
        .map(|d| (d.netns.clone(), d.name.clone(), d.kind))
        .collect();
    for want in [
        (cli.name.clone(), "eth0".to_string(), DevKind::Veth),
        (srv.name.clone(), "eth0".to_string(), DevKind::Veth),
        (node.name.clone(), cport.clone(), DevKind::BridgePort),
        (node.name.clone(), sport.clone(), DevKind::BridgePort),
        (node.name.clone(), br.clone(), DevKind::Bridge),
        (cli.name.clone(), "lo".to_string(), DevKind::Loopback),
        (srv.name.clone(), "lo".to_string(), DevKind::Loopback),
        (node.name.clone(), "lo".to_string(), DevKind::Loopback),
    ] {
        assert!(kinds.contains(&want), "missing {want:?} in {kinds:?}");
    }
    assert_eq!(lab.devices.len(), 8);
    check_devices(&lab);
    for d in &lab.devices {
        if d.kind != DevKind::Loopback {
            assert_eq!(d.mtu, 1500, "{d:?}");
        }
    }

    // Netlink view: ports enslaved to the bridge, everything up, veth/bridge kinds.
    let nl = links_in(&node).unwrap();
    let brl = nl.iter().find(|l| l.name == br).unwrap();
    assert_eq!(brl.kind, "bridge");
    for p in [&cport, &sport] {
        let l = nl.iter().find(|l| &l.name == p).unwrap();
        assert_eq!(l.kind, "veth");
        assert_eq!(l.master, Some(brl.ifindex), "{l:?}");
        assert!(l.up);
    }
    for ns in [&cli, &srv] {
        let l = links_in(ns).unwrap();
        assert_eq!(l.len(), 2, "{l:?}"); // lo + eth0
        assert!(l.iter().all(|l| l.up), "{l:?}");
        assert_eq!(l.iter().find(|l| l.name == "eth0").unwrap().kind, "veth");
    }

    // Forwarding on in the node only; the root namespace untouched.
    assert_eq!(
        node.run(|| read_sysctl("net.ipv4.ip_forward")).unwrap(),
        "1"
    );
    assert_eq!(read_sysctl("net.ipv4.ip_forward").unwrap(), root_fwd);
    assert_eq!(
        root_links(),
        before,
        "the lab must not touch the root netns"
    );

    // nft table exists in the node namespace and not in the root one.
    let table = lab.nft_table.clone().unwrap();
    assert_eq!(table, format!("netpath_{id}"));
    let t = table.clone();
    let json = node.run(move || lab::nft::list_table(&t)).unwrap();
    assert!(
        json.contains("masquerade") && json.contains("dnat"),
        "{json}"
    );
    assert!(
        lab::nft::list_table(&table).is_err(),
        "table leaked into the root netns"
    );

    // cli -> srv over veth + bridge + veth.
    rr_200(&lab);

    // Keep the namespaces alive past teardown to check the links really went away.
    let keep: Vec<(Netns, std::os::fd::OwnedFd)> = lab
        .namespaces()
        .into_iter()
        .map(|n| {
            let fd = n.open().unwrap();
            (n, fd)
        })
        .collect();
    lab.teardown().unwrap();
    assert!(netns_files(&id).is_empty(), "{:?}", netns_files(&id));
    for (n, fd) in &keep {
        let left = common::link_names(Some(fd.as_fd().try_clone_to_owned().unwrap()));
        assert_eq!(left, vec!["lo".to_string()], "links left in {}", n.name);
    }
    drop(keep);
    assert_eq!(root_links(), before);
}

#[test]
fn bridge_published_port_dnat_from_node() {
    let _serial = need_root();
    let mut lab = lab::build(Driver::Bridge).unwrap();
    // Like reaching `-p` from the Docker host: the node's OUTPUT DNAT sends
    // gateway:PUBLISHED_PORT to the server container.
    lab.client_ns = lab.node_ns.clone().unwrap();
    lab.connect_to = lab.published.unwrap();
    let r = run_rr(&lab, &small_rr(), &NoPhases).unwrap();
    assert_eq!(r.count, 200);
    lab.teardown().unwrap();
}

#[test]
fn two_labs_at_once_are_isolated() {
    let _serial = need_root();
    let a = lab::build(Driver::Bridge).unwrap();
    let b = lab::build(Driver::Bridge).unwrap();
    assert_ne!(a.run_id, b.run_id);
    std::thread::scope(|s| {
        let ha = s.spawn(|| run_rr(&a, &small_rr(), &NoPhases));
        let hb = s.spawn(|| run_rr(&b, &small_rr(), &NoPhases));
        assert_eq!(ha.join().unwrap().unwrap().count, 200);
        assert_eq!(hb.join().unwrap().unwrap().count, 200);
    });
    let (ia, ib) = (a.run_id.clone(), b.run_id.clone());
    a.teardown().unwrap();
    assert!(netns_files(&ia).is_empty());
    // b still works after a is gone.
    assert_eq!(run_rr(&b, &small_rr(), &NoPhases).unwrap().count, 200);
    b.teardown().unwrap();
    assert!(netns_files(&ib).is_empty());
}

#[test]
fn drop_tears_down() {
    let _serial = need_root();
    let lab = lab::build(Driver::Bridge).unwrap();
    let id = lab.run_id.clone();
    assert_eq!(netns_files(&id).len(), 3);
    drop(lab);
    assert!(netns_files(&id).is_empty());
}

#[test]
fn cleanup_leftovers_removes_a_dead_lab_and_nothing_else() {
    let _serial = need_root();
    // Not ours by the pattern: must survive.
    let other = Netns::create("npzzzzzz-keep").unwrap();
    let lab = lab::build(Driver::Bridge).unwrap();
    let id = lab.run_id.clone();
    let mut names = lab.netns_names();
    names.sort();
    std::mem::forget(lab); // the process that built it "died"
    assert_eq!(netns_files(&id).len(), 3);
    let removed = cleanup_leftovers().unwrap();
    for n in &names {
        assert!(removed.contains(n), "{n} not removed: {removed:?}");
    }
    assert!(netns_files(&id).is_empty(), "{:?}", netns_files(&id));
    assert!(
        other.path.exists(),
        "cleanup removed a namespace that is not ours"
    );
    assert!(removed.iter().all(|n| lab::run_id_of_netns(n).is_some()));
    other.delete().unwrap();
    // Nothing left to do now.
    assert!(
        cleanup_leftovers()
            .unwrap()
            .iter()
            .all(|n| !n.contains(&id))
    );
}

#[test]
fn interface_names_fit_ifnamsiz() {
    let _serial = need_root();
    for d in Driver::ALL {
        let lab = match lab::build(d) {
            Ok(lab) => lab,
            Err(e) => {
                // ipvlan and netkit on a kernel without them: the VM kernels run this part.
                let why = netpath::driver::unavailable(&e).unwrap_or_else(|| panic!("{e:#}"));
                eprintln!("skipped {d}: {why}");
                continue;
            }
        };
        for dev in &lab.devices {
            assert!(dev.name.len() <= IFNAME_MAX, "{dev:?}");
            assert!(!dev.name.is_empty());
        }
        for ns in lab.namespaces() {
            for l in links_in(&ns).unwrap() {
                assert!(l.name.len() <= IFNAME_MAX, "{l:?}");
                assert!(
                    l.name == "lo"
                        || l.name == "eth0"
                        || l.name.starts_with(&format!("np{}", lab.run_id)),
                    "unexpected link {l:?}"
                );
            }
        }
        lab.teardown().unwrap();
    }
    // Worst-case run id and every suffix netpath uses.
    for s in ["br", "c", "s"] {
        assert!(lab::ifname("ffffff", s).unwrap().len() <= IFNAME_MAX);
    }
    assert!(lab::ifname("ffffff", "toolong-suffix").is_err());
}

/// One hook call: (which, client tid, server tid, client comm, server comm).
type Call = (&'static str, u32, u32, String, String);

/// Records what the harness tells the phase hooks.
struct Recorder {
    calls: Mutex<Vec<Call>>,
}

fn comm(tid: u32) -> String {
    std::fs::read_to_string(format!("/proc/self/task/{tid}/comm"))
        .unwrap_or_default()
        .trim()
        .to_string()
}

impl Recorder {
    fn record(&self, which: &'static str, c: u32, s: u32) -> anyhow::Result<()> {
        self.calls
            .lock()
            .unwrap()
            .push((which, c, s, comm(c), comm(s)));
        Ok(())
    }
}

impl Phases for Recorder {
    fn measure_start(&self, c: u32, s: u32) -> anyhow::Result<()> {
        self.record("start", c, s)
    }
    fn measure_end(&self, c: u32, s: u32) -> anyhow::Result<()> {
        self.record("end", c, s)
    }
}

#[test]
fn rr_phases_get_real_thread_ids() {
    let _serial = need_root();
    let lab = lab::build(Driver::Bridge).unwrap();
    let rec = Recorder {
        calls: Mutex::new(Vec::new()),
    };
    let r = run_rr(&lab, &small_rr(), &rec).unwrap();
    assert_eq!(r.count, 200);
    let calls = rec.calls.into_inner().unwrap();
    assert_eq!(calls.len(), 2, "{calls:?}");
    assert_eq!(calls[0].0, "start");
    assert_eq!(calls[1].0, "end");
    let (c, s) = (calls[0].1, calls[0].2);
    assert_ne!(c, s);
    assert_eq!((calls[1].1, calls[1].2), (c, s));
    // Both threads were alive, with the harness's names, at both calls.
    for call in &calls {
        assert_eq!(call.3, "np-rr-cli", "{calls:?}");
        assert_eq!(call.4, "np-rr-srv", "{calls:?}");
    }

    // A failing hook is reported and the server still exits.
    struct Fail;
    impl Phases for Fail {
        fn measure_start(&self, _: u32, _: u32) -> anyhow::Result<()> {
            anyhow::bail!("probe attach failed")
        }
        fn measure_end(&self, _: u32, _: u32) -> anyhow::Result<()> {
            Ok(())
        }
    }
    let e = run_rr(&lab, &small_rr(), &Fail).unwrap_err();
    assert!(format!("{e:#}").contains("probe attach failed"), "{e:#}");
    lab.teardown().unwrap();
}

#[test]
fn rr_errors_are_clear() {
    let _serial = need_root();
    let mut lab = lab::build(Driver::Bridge).unwrap();
    let mut bad = small_rr();
    bad.load.req_size = 0;
    assert!(run_rr(&lab, &bad, &NoPhases).is_err());
    // Nobody listens there: connect fails, the server is woken and joined, no hang.
    let t0 = std::time::Instant::now();
    lab.connect_to = SocketAddrV4::new(*lab.server_bind.ip(), lab::LAB_PORT + 1);
    let e = run_rr(&lab, &small_rr(), &NoPhases).unwrap_err();
    assert!(format!("{e:#}").contains("cannot connect"), "{e:#}");
    assert!(t0.elapsed() < Duration::from_secs(10));
    lab.teardown().unwrap();
}

#[test]
fn rr_timeout_bounds_the_run() {
    let _serial = need_root();
    let lab = lab::build(Driver::Host).unwrap();
    let mut cfg = small_rr();
    cfg.load = RrLoad {
        requests: u64::MAX / 2,
        warmup: 0,
        timeout: Duration::from_millis(300),
        ..cfg.load
    };
    let t0 = std::time::Instant::now();
    let r = run_rr(&lab, &cfg, &NoPhases).unwrap();
    assert!(t0.elapsed() < Duration::from_secs(5));
    assert!(r.count > 0 && r.count < cfg.load.requests);
    assert_eq!(r.hist.len(), r.count);
    lab.teardown().unwrap();
}

// --- signal and panic cleanup, checked in a child process -------------------------

const CHILD_ENV: &str = "NETPATH_LAB_TEST_CHILD";

/// Child side (ignored in normal runs): builds a lab, installs the cleanup, then either
/// waits to be signalled or panics with the lab forgotten (so only the hook can clean).
#[test]
#[ignore = "helper run as a child process by the signal/panic cleanup tests"]
fn child_lab_process() {
    let Ok(mode) = std::env::var(CHILD_ENV) else {
        return;
    };
    lab::install_signal_cleanup();
    let lab = lab::build(Driver::Bridge).unwrap();
    println!("RUNID={}", lab.run_id);
    std::mem::forget(lab);
    if mode == "panic" {
        panic!("child panics on purpose");
    }
    std::thread::sleep(Duration::from_secs(60));
    panic!("child was not signalled");
}

fn spawn_child(mode: &str) -> (KillOnDrop, String) {
    let (child, id) = common::spawn_test_child(
        "child_lab_process",
        (CHILD_ENV, mode),
        Stdio::piped(),
        "RUNID=",
        Duration::from_secs(30),
    );
    assert!(lab::is_run_id(&id), "child printed no run id");
    (child, id)
}

fn check_signal(sig: nix::sys::signal::Signal, code: i32) {
    let _serial = need_root();
    let (mut child, id) = spawn_child("wait");
    assert_eq!(netns_files(&id).len(), 3);
    // While the child lives, cleanup_leftovers from here leaves its lab alone.
    let removed = cleanup_leftovers().unwrap();
    assert!(removed.iter().all(|n| !n.contains(&id)), "{removed:?}");
    assert_eq!(netns_files(&id).len(), 3);
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(child.0.id() as i32), sig).unwrap();
    let st = child.0.wait().unwrap();
    assert_eq!(st.code(), Some(code), "{st:?}");
    assert!(netns_files(&id).is_empty(), "{:?}", netns_files(&id));
}

#[test]
fn sigterm_removes_labs_and_exits_143() {
    check_signal(nix::sys::signal::Signal::SIGTERM, 143);
}

#[test]
fn sigint_removes_labs_and_exits_130() {
    check_signal(nix::sys::signal::Signal::SIGINT, 130);
}

#[test]
fn panic_hook_removes_labs() {
    let _serial = need_root();
    let (mut child, id) = spawn_child("panic");
    let st = child.0.wait().unwrap();
    assert!(!st.success());
    let mut err = String::new();
    std::io::Read::read_to_string(&mut child.0.stderr.take().unwrap(), &mut err).unwrap();
    assert!(err.contains("child panics on purpose"), "{err}");
    assert!(netns_files(&id).is_empty(), "{:?}", netns_files(&id));
}

#[test]
fn rr_hook_time_is_not_charged_to_the_timeout() {
    let _serial = need_root();
    struct Slow;
    impl Phases for Slow {
        fn measure_start(&self, _: u32, _: u32) -> anyhow::Result<()> {
            std::thread::sleep(Duration::from_millis(1500));
            Ok(())
        }
        fn measure_end(&self, _: u32, _: u32) -> anyhow::Result<()> {
            Ok(())
        }
    }
    let lab = lab::build(Driver::Host).unwrap();
    let mut cfg = small_rr();
    cfg.load.timeout = Duration::from_secs(1);
    let r = run_rr(&lab, &cfg, &Slow).unwrap();
    assert_eq!(r.count, 200);
    lab.teardown().unwrap();
}
