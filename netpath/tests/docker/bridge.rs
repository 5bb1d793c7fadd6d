//! Docker's bridges: the agent image and `netpath inspect` of a container on docker0, a
//! user-defined bridge lab's requests and cleanup, and traced runs across veth → bridge → veth
//! (TCP, then UDP and ICMP echo).

use std::time::{Duration, Instant};

use netpath::docker::{self, DockerLab, DockerLabOptions};
use netpath::driver::Driver;
use netpath_common::DevKind;

use super::common::{self, root_links, usernet::docker as docker_cli};
use super::{agent_exe, assert_run_gone, has, opts, rr_on, server_name, setup};

#[test]
fn agent_image_builds_and_bridge_container_is_inspected() {
    let (_g, engine) = setup();
    let t0 = Instant::now();
    let tag = docker::image::ensure_agent_image_from(&engine, &agent_exe(), false).unwrap();
    eprintln!("image {tag} ready in {:?}", t0.elapsed());
    assert!(tag.starts_with("netpath-agent:"));
    // A second call reuses it.
    let t1 = Instant::now();
    docker::image::ensure_agent_image_from(&engine, &agent_exe(), false).unwrap();
    assert!(t1.elapsed() < Duration::from_secs(5));

    let o = DockerLabOptions {
        default_bridge: true,
        ..opts()
    };
    let dl = DockerLab::build(&engine, Driver::Bridge, &o).unwrap();
    let id = dl.path.run_id.clone();
    // The containers run `hold`.
    let cmd = docker_cli(&[
        "inspect",
        "-f",
        "{{json .Config.Cmd}} {{.State.Running}}",
        &server_name(&dl),
    ]);
    assert_eq!(cmd, "[\"hold\"] true");

    let rep = netpath::runtime::inspect_docker(&engine, &server_name(&dl)).unwrap();
    eprintln!("{}", rep.render());
    assert_eq!(rep.mtu, Some(1500));
    assert_eq!(rep.network_mode, "bridge");
    let eth0 = rep.interfaces.iter().find(|i| i.name == "eth0").unwrap();
    assert_eq!(eth0.kind, "veth");
    let peer = eth0.peer.as_deref().unwrap();
    assert!(peer.starts_with("host/veth"), "{peer}");
    assert_eq!(eth0.bridge.as_deref(), Some("docker0"));
    assert_eq!(eth0.network.as_deref(), Some("bridge"));
    assert!(
        rep.devices
            .iter()
            .any(|d| d.name == "docker0" && d.mtu == 1500)
    );
    assert!(
        serde_json::to_string(&rep)
            .unwrap()
            .contains("\"mtu\":1500")
    );
    // The CLI's JSON, header included, matches the committed schema.
    let v = common::run_json(&["inspect", &server_name(&dl), "--json"]);
    common::schema::validate("inspect", &v);
    assert_eq!(v["mtu"], 1500);
    dl.teardown().unwrap();
    assert_run_gone(&id);
}

#[test]
fn bridge_lab_runs_rr_and_cleans_up() {
    let (_g, engine) = setup();
    let br = rr_on(&engine, Driver::Bridge, &opts(), |dl, id| {
        let br = format!("np{id}br");
        assert!(
            has(&dl.path.devices, DevKind::Bridge, &br),
            "{:?}",
            dl.path.devices
        );
        assert!(has(&dl.path.devices, DevKind::BridgePort, "veth"));
        assert_eq!(
            dl.path
                .devices
                .iter()
                .filter(|d| d.kind == DevKind::Veth)
                .count(),
            2
        );
        assert!(root_links().contains(&br));
        br
    });
    assert!(!root_links().contains(&br));
}

/// The tracer runs unchanged on a real Docker bridge: every request and response is a
/// complete journey through veth → bridge → veth, as on the netns lab.
#[test]
fn traced_run_on_a_docker_bridge() {
    use netpath::measure::compare;
    let (_g, engine) = setup();
    const N: u64 = 300;
    let dl = DockerLab::build(&engine, Driver::Bridge, &opts()).unwrap();
    let mut o = common::one_traced_run(Driver::Bridge, N, 50);
    o.tracer.sample_every = 1;
    let mut tracer = common::load_tracer(&o.tracer);
    let r = compare::measure(&mut tracer, &dl.path, &o).unwrap();
    dl.teardown().unwrap();
    assert_eq!(r.traced.count, N);
    // Every journey completes, or the kernel counted why not (an skb merged or freed early).
    let l = &r.lost;
    assert_eq!(l["ringbuf_lost"] + l["skb_map_full"], 0, "{l:?}");
    let counted = common::counted_losses(l);
    for dir in ["request", "response"] {
        let done = r.one_way[dir].count;
        assert!(
            done * 100 >= N * 99 && done + counted >= N,
            "{dir} journeys: {r:#?}"
        );
        let c: std::collections::BTreeMap<&str, u64> = r
            .hops
            .iter()
            .filter(|h| h.at.dir == dir)
            .map(|h| (h.at.hop, h.at.crossings))
            .collect();
        let (veth, bridge) = (c["veth"], c["bridge"]);
        assert!((2 * done..=2 * N).contains(&veth), "{dir}: {c:?}");
        assert!((done..=N).contains(&bridge), "{dir}: {c:?}");
    }
}

/// `--proto udp|icmp` on a real Docker bridge: the harness's datagram ends and the ping
/// socket in the containers' namespaces (Docker opens ping sockets there; netpath changes
/// nothing), each journey matched and crossing veth, bridge, veth in order; an echo request
/// ends where the server container's kernel makes the reply (no server thread).
#[test]
fn udp_and_icmp_journeys_on_a_docker_bridge() {
    use netpath::{harness::Proto, measure::compare};
    let (_g, engine) = setup();
    const N: u64 = 1000;
    let dl = DockerLab::build(&engine, Driver::Bridge, &opts()).unwrap();
    let id = dl.path.run_id.clone();
    let ping_range = || {
        dl.path
            .client_ns
            .run(|| netpath::sys::netns::read_sysctl("net.ipv4.ping_group_range"))
            .unwrap()
    };
    let range = ping_range();
    assert!(netpath::harness::icmp::ping_allows_root(&range), "{range}");
    let mut runs = Vec::new();
    for proto in [Proto::Udp, Proto::Icmp] {
        let mut o = common::one_traced_run(Driver::Bridge, N, 50);
        o.protos = vec![proto];
        o.tracer.sample_every = 1;
        o.tracer.detail = true;
        o.keep_timelines = usize::MAX;
        let mut tracer = common::load_tracer(&o.tracer);
        runs.push(compare::measure(&mut tracer, &dl.path, &o));
    }
    // Docker's own setting, used as it is.
    assert_eq!(ping_range(), range);
    dl.teardown().unwrap();
    assert_run_gone(&id);
    let order = "sender-stack veth backlog bridge veth backlog receiver-stack";
    for r in runs {
        let r = r.unwrap();
        let name = format!("docker:bridge {}", r.proto);
        common::dgram::assert_accounted(&r, N);
        common::dgram::assert_order(&r, &name, [order; 2], docker::AGENT_PORT);
        if r.proto == Proto::Icmp {
            let turn = r.turnaround.as_ref().expect("turnaround");
            assert_eq!(turn.count, r.one_way["request"].count);
            assert_eq!(turn.mean_us, 0.0, "{name}");
        }
    }
}

/// `--parts` on a real Docker bridge: Docker's filter/FORWARD in the host's namespace is a
/// part of the `bridge` hop in both directions, naming the chains it reaches (DOCKER-USER
/// first), crossed by every journey; nothing stays linked afterwards.
#[test]
fn parts_on_a_docker_bridge_name_dockers_forward_chains() {
    use netpath::{measure::compare, path::parts::NfHook};
    let (_g, engine) = setup();
    let iptables = std::process::Command::new("iptables")
        .arg("--version")
        .output()
        .unwrap();
    let iptables = String::from_utf8_lossy(&iptables.stdout).into_owned();
    if !iptables.contains("nf_tables") {
        // iptables-legacy tables are not nft base chains: netpath sees no parts there.
        eprintln!("skipped: Docker's iptables here is not iptables-nft ({iptables})");
        return;
    }
    const N: u64 = 300;
    let dl = DockerLab::build(&engine, Driver::Bridge, &opts()).unwrap();
    let mut o = common::one_traced_run(Driver::Bridge, N, 50);
    o.parts = true;
    o.tracer.sample_every = 4;
    let mut tracer = common::load_tracer(&o.tracer());
    let r = compare::measure(&mut tracer, &dl.path, &o);
    dl.teardown().unwrap();
    let r = r.unwrap();
    drop(tracer);
    for dir in ["request", "response"] {
        let fwd: Vec<_> = (r.parts.iter())
            .filter(|p| p.dir == dir && p.name == "filter/FORWARD")
            .collect();
        assert_eq!(fwd.len(), 1, "{dir}: {:#?}", r.parts);
        let p = fwd[0];
        assert_eq!(
            (p.hook, p.hop.as_str()),
            (NfHook::Forward, "bridge"),
            "{p:?}"
        );
        assert!(!p.netns.starts_with("np"), "the host's namespace: {p:?}");
        let reached: Vec<&str> = p.reached.iter().map(|c| c.chain.as_str()).collect();
        assert!(reached.contains(&"DOCKER-USER"), "{reached:?}");
        assert!(p.packets >= r.one_way[dir].count, "{p:?}");
    }
    let links = aya::programs::loaded_links().filter_map(Result::ok);
    let nf =
        links.filter(|l| l.link_type().ok() == Some(aya::programs::links::LinkType::Netfilter));
    assert_eq!(nf.count(), 0, "a netfilter link left behind");
}
