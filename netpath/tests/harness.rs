//! Privileged integration tests for the bulk, open-loop and context parts of the traffic
//! harness. They build real lab namespaces, so they need root:
//!
//!     sudo -E cargo test -p netpath --test harness -- --test-threads=1
//!
//! Without root they fail with a message saying so (no silent skips). No test asserts
//! on timing or throughput thresholds.

use std::net::SocketAddrV4;
use std::time::{Duration, Instant};

use netpath::driver::Driver;
use netpath::harness::{
    BulkConfig, BurstConfig, NoPhases, RrConfig, RrLoad, device_context, read_counters, run_bulk,
    run_bulk_to, run_burst, run_burst_phases, run_rr, scheduled_requests,
};
use netpath::lab;

mod common;
use common::need_root;

fn bulk_cfg(streams: usize) -> BulkConfig {
    BulkConfig {
        streams,
        duration: Duration::from_secs(1),
        chunk: 128 * 1024,
        timeout: Duration::from_secs(20),
    }
}

fn burst_cfg(rate: f64, duration: Duration) -> BurstConfig {
    BurstConfig {
        rate,
        duration,
        connections: 4,
        req_size: 256,
        resp_size: 1024,
        timeout: Duration::from_secs(20),
        spin: netpath::harness::burst::DEFAULT_SPIN,
        ..Default::default()
    }
}

#[test]
fn bulk_on_bridge_one_and_two_streams() {
    let _serial = need_root();
    let lab = lab::build(Driver::Bridge).unwrap();
    for streams in [1, 2] {
        let r = run_bulk(&lab, &bulk_cfg(streams)).unwrap();
        assert!(r.bytes > 0, "{r:?}");
        assert!(r.gbit_per_s > 0.0, "{r:?}");
        assert_eq!(r.per_stream.len(), streams, "{r:?}");
        // The server reads everything up to EOF.
        assert_eq!(r.received, r.bytes, "{r:?}");
        assert_eq!(r.bytes, r.per_stream.iter().map(|s| s.bytes).sum::<u64>());
        assert_eq!(
            r.retransmits,
            r.per_stream.iter().map(|s| s.retransmits).sum::<u64>()
        );
        assert!(r.elapsed >= Duration::from_secs(1), "{r:?}");
        for s in &r.per_stream {
            assert!(s.bytes > 0 && s.gbit_per_s > 0.0, "{s:?}");
            // TCP_INFO was read on a live connection.
            assert!(s.cwnd > 0, "{s:?}");
            assert!(s.rtt_us > 0, "{s:?}");
        }
    }
    // Same port right after, for request/response: no TIME_WAIT trouble.
    let rr = RrConfig {
        load: RrLoad {
            requests: 50,
            warmup: 5,
            timeout: Duration::from_secs(20),
            ..RrLoad::default()
        },
        wait: netpath::harness::WaitMode::Block,
        ..RrConfig::default()
    };
    assert_eq!(run_rr(&lab, &rr, &NoPhases).unwrap().count, 50);
    // And bulk again on the same port.
    assert!(run_bulk(&lab, &bulk_cfg(1)).unwrap().bytes > 0);
    lab.teardown().unwrap();
}

#[test]
fn bulk_on_host_loopback() {
    let _serial = need_root();
    let lab = lab::build(Driver::Host).unwrap();
    let cfg = BulkConfig {
        duration: Duration::from_millis(300),
        ..bulk_cfg(2)
    };
    let r = run_bulk(&lab, &cfg).unwrap();
    assert_eq!(r.per_stream.len(), 2);
    assert!(r.bytes > 0 && r.received == r.bytes, "{r:?}");
    lab.teardown().unwrap();
}

#[test]
fn bulk_errors_are_clear_and_bounded() {
    let _serial = need_root();
    let lab = lab::build(Driver::Bridge).unwrap();
    // Nothing listens on the port the clients connect to.
    let wrong = SocketAddrV4::new(*lab.connect_to.ip(), lab.connect_to.port() + 7);
    let t = Instant::now();
    let e = run_bulk_to(
        &lab.client_ns,
        &lab.server_ns,
        lab.server_bind,
        wrong,
        &bulk_cfg(2),
    )
    .unwrap_err();
    assert!(format!("{e:#}").contains("cannot connect"), "{e:#}");
    assert!(t.elapsed() < Duration::from_secs(15), "{:?}", t.elapsed());
    // Wildcard binds are refused.
    let any = SocketAddrV4::new(std::net::Ipv4Addr::UNSPECIFIED, lab.server_bind.port());
    let e = run_bulk_to(
        &lab.client_ns,
        &lab.server_ns,
        any,
        lab.connect_to,
        &bulk_cfg(1),
    )
    .unwrap_err();
    assert!(format!("{e:#}").contains("wildcard"), "{e:#}");
    assert!(run_bulk(&lab, &bulk_cfg(0)).is_err());
    // The lab still works afterwards (nothing left listening or stuck).
    assert!(run_bulk(&lab, &bulk_cfg(1)).unwrap().bytes > 0);
    lab.teardown().unwrap();
}

#[test]
fn burst_at_2000_per_second() {
    let _serial = need_root();
    let lab = lab::build(Driver::Bridge).unwrap();
    let cfg = burst_cfg(2000.0, Duration::from_secs(1));
    let r = run_burst(&lab, &cfg).unwrap();
    assert_eq!(scheduled_requests(2000.0, Duration::from_secs(1)), 2000);
    assert_eq!(r.scheduled, 2000);
    assert_eq!(r.sent, r.scheduled, "sent {} of {}", r.sent, r.scheduled);
    assert_eq!(r.completed, r.sent);
    assert_eq!(r.hist.len(), r.completed);
    assert_eq!(r.uncorrected.len(), r.completed);
    // Measured from the intended time, which is never after the actual send.
    assert!(r.hist.max() >= r.uncorrected.max());
    assert!(r.hist.min() > 0 && r.uncorrected.min() > 0);
    assert!(r.achieved_rate > 0.0);
    // The last request is due at 0.9995 s.
    assert!(r.elapsed >= Duration::from_millis(999), "{:?}", r.elapsed);
    assert!(r.percentile_ns(50.0) <= r.percentile_ns(99.9));
    lab.teardown().unwrap();
}

#[test]
fn burst_phases_and_host_lab() {
    let _serial = need_root();
    let lab = lab::build(Driver::Host).unwrap();
    let cfg = BurstConfig {
        connections: 3,
        ..burst_cfg(500.0, Duration::from_millis(300))
    };
    let phases = run_burst_phases(&lab, &cfg, &[1.0, 2.0]).unwrap();
    assert_eq!(phases.len(), 2);
    for (m, r) in &phases {
        let want = scheduled_requests(500.0 * m, Duration::from_millis(300));
        assert_eq!(r.scheduled, want, "×{m}");
        assert_eq!(r.sent, want, "×{m}");
        assert_eq!(r.completed, want, "×{m}");
        assert_eq!(r.hist.len(), want, "×{m}");
    }
    assert_eq!(phases[0].1.sent, 150);
    assert_eq!(phases[1].1.sent, 300);
    assert!(run_burst_phases(&lab, &cfg, &[0.0]).is_err());
    assert!(
        run_burst(
            &lab,
            &BurstConfig {
                rate: 0.0,
                ..cfg.clone()
            }
        )
        .is_err()
    );
    lab.teardown().unwrap();
}

#[test]
fn counters_follow_the_namespace() {
    let _serial = need_root();
    let lab = lab::build(Driver::Bridge).unwrap();
    let before = read_counters(&lab.client_ns).unwrap();
    let node = lab.node_ns.clone().unwrap();
    let node_before = read_counters(&node).unwrap();
    let r = run_bulk(&lab, &bulk_cfg(1)).unwrap();
    assert!(r.bytes > 0);
    let after = read_counters(&lab.client_ns).unwrap();
    let d = after.delta(&before);
    assert!(d.out_segs > 0, "{d:?}");
    assert!(d.in_segs > 0, "{d:?}"); // ACKs
    // Cumulative counters never go down.
    assert!(after.out_segs >= before.out_segs);
    assert!(after.in_segs >= before.in_segs);
    assert!(after.retrans_segs >= before.retrans_segs);
    assert!(after.tcp_ofo_queue >= before.tcp_ofo_queue);
    assert!(after.tcp_sack_reorder >= before.tcp_sack_reorder);
    // The server received what the client sent: its InSegs grew too.
    let srv = read_counters(&lab.server_ns).unwrap();
    assert!(srv.in_segs > 0 && srv.out_segs > 0, "{srv:?}");
    // The node only forwards: no TCP endpoint there, its counters did not move.
    let node_after = read_counters(&node).unwrap();
    assert_eq!(node_after.delta(&node_before).out_segs, 0);
    lab.teardown().unwrap();
}

#[test]
fn device_context_per_lab_device() {
    let _serial = need_root();
    // Only sysfs mounts: other processes may add netns bind mounts meanwhile.
    let sysfs_mounts = || -> Vec<String> {
        std::fs::read_to_string("/proc/self/mountinfo")
            .unwrap()
            .lines()
            .filter(|l| l.contains(" - sysfs "))
            .map(str::to_string)
            .collect()
    };
    let mounts_before = sysfs_mounts();
    let root_devs = || -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir("/sys/class/net")
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    };
    let devs_before = root_devs();
    for driver in [Driver::Bridge, Driver::Host] {
        let lab = lab::build(driver).unwrap();
        let ctx = device_context(&lab).unwrap();
        assert_eq!(ctx.len(), lab.devices.len(), "{ctx:?}");
        for (c, d) in ctx.iter().zip(&lab.devices) {
            assert_eq!((&c.netns, &c.name), (&d.netns, &d.name));
            assert_eq!(c.mtu, d.mtu, "{c:?}");
            assert!(!c.rps_cpus.is_empty(), "{c:?}");
            for m in &c.rps_cpus {
                assert!(
                    !m.is_empty() && m.chars().all(|ch| ch.is_ascii_hexdigit() || ch == ','),
                    "{c:?}"
                );
            }
        }
        lab.teardown().unwrap();
    }
    // The private sysfs mounts never reached this thread's (the host's) mounts.
    assert_eq!(sysfs_mounts(), mounts_before);
    assert_eq!(root_devs(), devs_before);
}
