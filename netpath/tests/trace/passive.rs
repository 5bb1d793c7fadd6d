//! Passive tracing: traffic from threads netpath knows nothing about, followed from the
//! client's eth0 across veth and bridge to where the application read it (socket-queue).

use netpath::{driver::Driver, harness::RrConfig, lab};
use netpath_common::devrole;

use super::common;

#[test]
fn passive_trace_follows_traffic_netpath_does_not_trace() {
    let _g = common::need_root();
    let backend = common::backend();
    let lab = lab::build(Driver::Bridge).unwrap();
    let port = lab.server_bind.port();
    // Traffic from threads the tracer knows nothing about, repeated until the tracer has what
    // it asked for (loading the programs, with the run-cost calibration, takes a while on a busy
    // machine and minutes under emulation). The cap only guards against a tracer that hangs.
    let done = std::sync::atomic::AtomicBool::new(false);
    let (runs, out) = std::thread::scope(|s| {
        let h = s.spawn(|| {
            let mut runs = Vec::new();
            let until = std::time::Instant::now() + std::time::Duration::from_secs(600);
            while !done.load(std::sync::atomic::Ordering::Relaxed)
                && std::time::Instant::now() < until
            {
                runs.push(
                    netpath::harness::run_rr(
                        &lab,
                        &RrConfig {
                            load: netpath::harness::RrLoad {
                                requests: 50,
                                warmup: 0,
                                ..Default::default()
                            },
                            wait: netpath::harness::WaitMode::Block,
                            ..RrConfig::default()
                        },
                        &netpath::harness::NoPhases,
                    )
                    .map(|r| r.count),
                );
            }
            runs
        });
        // The lab's devices have no container roles: a journey starts at any point of any.
        let any: Vec<_> = lab
            .devices
            .iter()
            .map(|d| (d.clone(), devrole::ANY))
            .collect();
        let out = netpath::trace::run_passive(
            backend,
            "bridge",
            &any,
            netpath::probe::tracer::Filter {
                port: Some(port),
                proto: Some(6),
                ..Default::default()
            },
            &[],
            40,
            std::time::Duration::from_secs(20),
            &mut Vec::new,
        );
        done.store(true, std::sync::atomic::Ordering::Relaxed);
        (h.join().unwrap(), out)
    });
    lab.teardown().unwrap();
    assert!(!runs.is_empty());
    for r in runs {
        assert_eq!(r.unwrap(), 50);
    }
    let out = out.unwrap();
    // Device-started journeys of traffic netpath does not follow end when the application's
    // receive consumed their data (or, on kernels without sk_data_ready, at the copy to the
    // reader). On a busy machine a few addresses are recycled mid-way; those are cut and
    // counted, the rest are complete.
    let ready = std::path::Path::new("/sys/kernel/tracing/events/sock/sk_data_ready").exists();
    let end = if ready { "sock_read" } else { "copy_to_user" };
    let complete: Vec<_> = out
        .timelines
        .iter()
        .filter(|t| {
            // Packets already on their way when the probes attached start mid-path.
            let first = t
                .points
                .first()
                .map(|p| (p.point, p.device.starts_with("eth0@")));
            let last = t.points.last().map(|p| p.point);
            first == Some(("dev_queue", true)) && last == Some(end)
        })
        .collect();
    assert!(
        complete.len() >= 10,
        "{} complete of {}: {:?}",
        complete.len(),
        out.timelines.len(),
        out.lost
    );
    for t in complete {
        let names: Vec<&str> = t.points.iter().map(|p| p.point).collect();
        assert_eq!(names.first(), Some(&"dev_queue"), "{names:?}");
        assert!(t.points[0].device.starts_with("eth0@"), "{:?}", t.points[0]);
        assert!(t.tuple.contains(&format!(":{port}")), "{}", t.tuple);
        let hops: Vec<&str> = t.points.iter().map(|p| p.hop).collect();
        assert!(
            hops.contains(&"bridge") && hops.contains(&"veth"),
            "{hops:?}"
        );
        // Every device of the lab is known: no segment is unnamed.
        assert!(!hops.contains(&"other"), "{hops:?}");
        // The data waited in the socket until the harness's client or server read it: that
        // time is its own hop, after the receiver's stack.
        if ready {
            let n = names.len();
            assert_eq!(names[n - 2..], ["sk_data_ready", "sock_read"], "{names:?}");
            assert_eq!(
                hops[n - 2..],
                ["receiver-stack", "socket-queue"],
                "{hops:?}"
            );
        }
    }
}
