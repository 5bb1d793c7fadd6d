//! Leaving the Docker host: egress labs on docker0 and on a user-defined bridge (Docker's own
//! masquerade, netpath adds no rule), host-egress from the host's stack, and the gateway lab
//! serving on docker0's address; traced, the request's source rewritten to the uplink's.

use std::path::Path;
use std::process::Command;

use netpath::docker::{DockerLab, DockerLabOptions};
use netpath::driver::Driver;
use netpath_common::DevKind;

use super::common::{self, root_links};
use super::{has, opts, rr_on, setup};

/// Docker's rules and nftables tables as text (counters and comments left out).
fn firewall() -> String {
    let save = |t: &str| {
        let out = Command::new("iptables-save")
            .args(["-t", t])
            .output()
            .unwrap();
        assert!(out.status.success(), "iptables-save -t {t}");
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter(|l| !l.starts_with('#') && !l.starts_with(':'))
            .collect::<Vec<_>>()
            .join("\n")
    };
    let tables = Command::new("nft")
        .args(["list", "tables"])
        .output()
        .unwrap();
    format!(
        "{}\n{}\n{}",
        save("filter"),
        save("nat"),
        String::from_utf8_lossy(&tables.stdout)
    )
}

/// The uplink of a Docker egress lab: `np<id>up` in the Docker host's namespace, its peer in
/// netpath's `np<id>-rmt`, both of kind `Uplink`; the server on the remote's own address.
fn check_docker_uplink(dl: &DockerLab) {
    let (p, id) = (&dl.path, &dl.path.run_id);
    let ends: Vec<(&str, &str)> = p
        .uplinks()
        .iter()
        .map(|d| (d.name.as_str(), d.netns.as_str()))
        .collect();
    let (up, rm, rmt) = (
        format!("np{id}up"),
        format!("np{id}rm"),
        format!("np{id}-rmt"),
    );
    assert_eq!(ends, [(up.as_str(), "host"), (rm.as_str(), rmt.as_str())]);
    assert!(root_links().contains(&up));
    assert_eq!(p.server_ns.name, rmt);
    assert!(Path::new(&format!("/run/netpath/docker-rmt-{id}")).exists());
    let ip = p.server_bind.ip().octets();
    assert_eq!(ip[..2], [10, 217], "{:?}", p.server_bind);
    assert_eq!(ip[3], 2);
    assert_eq!(p.node_ns.as_ref().map(|n| n.name.as_str()), Some("host"));
}

/// A traced run of `dl`'s path: every journey crossed `hops` in that order (tracepoints) and
/// the request's source was rewritten from the container's address to the uplink's.
fn traced_egress(dl: &DockerLab, hops: [&str; 2]) {
    use netpath::measure::compare;
    const N: u64 = 200;
    let mut o = common::one_traced_run(dl.path.driver, N, 50);
    o.tracer.sample_every = 1;
    o.tracer.detail = true;
    o.keep_timelines = usize::MAX;
    let mut tracer = common::load_tracer(&o.tracer);
    let r = compare::measure(&mut tracer, &dl.path, &o).unwrap();
    let l = &r.lost;
    assert_eq!(l["ringbuf_lost"] + l["skb_map_full"], 0, "{l:?}");
    let counted = common::counted_losses(l);
    let uplink = dl.path.server_bind.ip().octets();
    let uplink = format!("10.217.{}.1:", uplink[2]);
    let client_ip = dl
        .client
        .as_ref()
        .and_then(|c| c.ip())
        .map(|ip| format!("{ip}:"));
    for (i, dir) in ["request", "response"].into_iter().enumerate() {
        let done = r.one_way[dir].count;
        assert!(
            done * 100 >= N * 99 && done + counted >= N,
            "{dir} journeys: {l:?}"
        );
        let mut n = 0;
        for t in r.timelines.iter().filter(|t| t.dir == dir) {
            // The data path's order; the receiving thread's wakeup parts (present when it
            // slept) are checked by the lab tests.
            let mut seen: Vec<&str> = t
                .points
                .iter()
                .skip(1)
                .map(|p| p.hop)
                .filter(|h| !["wakeup", "idle-exit", "runqueue", "recv-copy"].contains(h))
                .collect();
            seen.dedup();
            assert_eq!(seen.join(" "), hops[i], "{t:#?}");
            if let Some(c) = &client_ip {
                let x = t.translated.as_deref().unwrap_or_default();
                let (from, to) = x.split_once(" → ").unwrap_or_default();
                match dir {
                    "request" => assert!(from.starts_with(&format!("src {c}")), "{x}"),
                    _ => assert!(to.starts_with(c.as_str()), "{x}"),
                }
                let uplink_side = if dir == "request" { to } else { from };
                assert!(uplink_side.contains(&uplink), "{x}");
            }
            n += 1;
        }
        assert!(n * 100 >= N * 99, "{dir}: {n} timelines");
    }
}

#[test]
fn egress_lab_on_docker0_goes_through_dockers_masquerade() {
    let (_g, engine) = setup();
    let before = firewall();
    let o = DockerLabOptions {
        default_bridge: true,
        ..opts()
    };
    rr_on(&engine, Driver::Egress, &o, |dl, _| {
        check_docker_uplink(dl);
        assert!(has(&dl.path.devices, DevKind::Bridge, "docker0"));
        // netpath added no rule anywhere: Docker's own accept the path and masquerade it.
        assert_eq!(firewall(), before, "netpath changed the host's rules");
        traced_egress(
            dl,
            [
                "sender-stack veth backlog bridge forward uplink backlog receiver-stack recv-return",
                "sender-stack uplink backlog forward bridge veth backlog receiver-stack recv-return",
            ],
        );
    });
    assert_eq!(firewall(), before);
}

#[test]
fn egress_lab_on_a_user_defined_bridge() {
    let (_g, engine) = setup();
    rr_on(&engine, Driver::Egress, &opts(), |dl, id| {
        check_docker_uplink(dl);
        assert!(has(&dl.path.devices, DevKind::Bridge, &format!("np{id}br")));
    });
}

#[test]
fn host_egress_lab_reaches_the_remote_from_the_hosts_stack() {
    let (_g, engine) = setup();
    rr_on(&engine, Driver::HostEgress, &opts(), |dl, _| {
        check_docker_uplink(dl);
        assert_eq!(dl.path.client_ns.name, "host");
        assert!(
            dl.path
                .devices
                .iter()
                .all(|d| matches!(d.kind, DevKind::Loopback | DevKind::Uplink))
        );
        traced_egress(
            dl,
            ["sender-stack uplink backlog receiver-stack recv-return"; 2],
        );
    });
}

#[test]
fn gateway_lab_serves_on_docker0s_address() {
    let (_g, engine) = setup();
    let o = DockerLabOptions {
        default_bridge: true,
        ..opts()
    };
    rr_on(&engine, Driver::Gateway, &o, |dl, _| {
        let docker0 = std::thread::spawn(|| {
            netpath::sys::nl::Nl::new()
                .unwrap()
                .link("docker0")
                .unwrap()
                .expect("docker0")
                .addrs
        })
        .join()
        .unwrap();
        assert_eq!(
            docker0.first().map(|a| a.0),
            Some(*dl.path.server_bind.ip())
        );
        assert_eq!(dl.path.server_ns.name, "host");
        assert!(dl.path.uplinks().is_empty());
        assert!(has(&dl.path.devices, DevKind::Bridge, "docker0"));
    });
}
