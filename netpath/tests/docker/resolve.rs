//! Containers netpath did not start (the Docker CLI's, on a user-defined network): resolved
//! to their devices, traced with `trace --container`, measured with `compare --between`
//! (TCP, UDP, ICMP), then removed by cleanup; an unknown name is one clear error.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use netpath::docker;
use netpath::lab;
use netpath::runtime;
use netpath::sys::netns::Netns;
use netpath_common::DevKind;

use super::common::{self, usernet::UserNet, usernet::exchange_until};
use super::{agent_exe, compare_between, compare_between_rows, labelled, setup};

#[test]
fn containers_started_with_the_docker_cli_are_resolved() {
    let (_g, engine) = setup();
    let tag = docker::image::ensure_agent_image_from(&engine, &agent_exe(), false).unwrap();
    let un = UserNet::create(218);
    let net = un.name.clone();
    let srv_ip = un.ip(10);
    let addr: SocketAddr = format!("{srv_ip}:11111").parse().unwrap();
    let srv = un.serve("srv", addr, &[], &tag);
    let cli = un.run("cli", None, &[], &tag, &["hold"]);

    let s = runtime::resolve_container(&engine, &srv).unwrap();
    let c = runtime::resolve_container(&engine, &cli).unwrap();
    assert_eq!(s.ip(), Some(srv_ip.parse().unwrap()));
    let bridge_of = |cn: &docker::ContainerNet| {
        cn.interfaces
            .iter()
            .find(|i| i.link.name == "eth0")
            .and_then(|i| i.peer.as_ref())
            .and_then(|p| p.bridge.as_ref())
            .map(|b| b.name.clone())
    };
    let br = bridge_of(&s).expect("server bridge");
    assert!(br.starts_with("br-"), "{br}");
    assert_eq!(bridge_of(&c).as_deref(), Some(br.as_str()));
    for cn in [&s, &c] {
        let devs = cn.devices();
        eprintln!("{}: {devs:?}", cn.name);
        let eth0 = devs
            .iter()
            .find(|d| d.name == "eth0" && d.kind == DevKind::Veth)
            .expect("eth0");
        assert_eq!(eth0.netns, cn.name);
        assert_eq!(eth0.netns_inum, cn.netns_inum);
        let peer = devs
            .iter()
            .find(|d| d.kind == DevKind::BridgePort)
            .expect("host veth");
        assert!(peer.name.starts_with("veth"));
        assert_eq!(peer.netns, "host");
        assert_eq!(
            std::fs::read_to_string(format!("/sys/class/net/{}/ifindex", peer.name))
                .unwrap()
                .trim(),
            peer.ifindex.to_string()
        );
        let iflink = cn
            .interfaces
            .iter()
            .find(|i| i.link.name == "eth0")
            .unwrap();
        assert_eq!(iflink.link.iflink, Some(peer.ifindex));
        assert!(
            devs.iter()
                .any(|d| d.kind == DevKind::Bridge && d.name == br)
        );
    }

    // The agent server in the foreign container answers a client in the other one.
    let ns = netns_of(&c);
    let n = ns
        .run(move || {
            let mut conn = TcpStream::connect_timeout(&addr, Duration::from_secs(5))?;
            let mut resp = [0u8; 32];
            for _ in 0..50 {
                conn.write_all(&[7u8; 64])?;
                conn.read_exact(&mut resp)?;
                assert_eq!(resp, [0x5a; 32]);
            }
            Ok(50)
        })
        .unwrap();
    assert_eq!(n, 50);

    // `netpath trace --container` on these two containers it did not start: timelines of the
    // agent traffic, from a container's eth0 across the host veth and Docker's bridge.
    let done = std::sync::atomic::AtomicBool::new(false);
    let out = std::thread::scope(|sc| {
        let traffic =
            sc.spawn(|| ns.run(|| Ok(exchange_until(addr, &done, Duration::from_millis(2))?)));
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_netpath"))
            .args([
                "trace",
                "--container",
                &cli,
                "--container",
                &srv,
                "--filter-port",
                "11111",
                "-c",
                "20",
                "--timeout",
                "30",
                "--json",
            ])
            .output()
            .unwrap();
        done.store(true, std::sync::atomic::Ordering::Relaxed);
        traffic.join().unwrap().unwrap();
        out
    });
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let timelines = v["timelines"].as_array().unwrap();
    assert_eq!(timelines.len(), 20, "{v}");
    let complete: Vec<&serde_json::Value> = timelines
        .iter()
        .filter(|t| {
            let p = t["points"].as_array().unwrap();
            p[0]["point"] == "dev_queue" && p[0]["device"].as_str().unwrap().starts_with("eth0@")
        })
        .collect();
    assert!(complete.len() >= 5, "{v}");
    for t in complete {
        let hops = common::json_hops(t, "points");
        assert!(
            hops.contains(&"veth") && hops.contains(&"bridge"),
            "{hops:?}"
        );
    }

    // `netpath compare --between`: netpath's harness between the two containers (client in
    // one, server in the other), traced on their path; nothing is created, nothing remains.
    let before_ns = lab::list_netpath_netns().unwrap();
    let (ctrs, nets) = (labelled("container", None), labelled("network", None));
    let n = 300u64;
    let r = &compare_between(&cli, &srv, n).unwrap();
    assert_eq!(
        r["driver"],
        format!("{cli}→{srv} (bridge via {net})"),
        "{r}"
    );
    assert_eq!(r["traced"]["count"], n, "{r}");
    let completed = r["lost"]["completed"].as_u64().unwrap();
    assert!(completed * 100 >= 2 * n * 99, "{}", r["lost"]);
    let crossings = |dir: &str, hop: &str| common::json_crossings(r, dir, hop);
    for dir in ["request", "response"] {
        // Container eth0 → host veth, then the bridge port → the other container's eth0.
        let done = r["one_way"][dir]["count"].as_u64().unwrap();
        assert!(crossings(dir, "veth") >= 2 * done, "{dir}: {r}");
        assert!(crossings(dir, "bridge") >= done, "{dir}: {r}");
        assert!(crossings(dir, "veth") <= 2 * n && crossings(dir, "bridge") <= n);
    }
    // UDP and ICMP echo between the same two containers, a row each: the datagram ends and
    // the ping socket in their namespaces, matched over the same veth, bridge, veth.
    let rows = compare_between_rows(&cli, &srv, n, &["--proto", "udp,icmp"]).unwrap();
    assert_eq!(rows.len(), 2, "{rows:?}");
    for (r, p) in rows.iter().zip(["udp", "icmp"]) {
        assert_eq!(r["proto"], p, "{r}");
        assert!(r["driver"].as_str().unwrap().ends_with(&format!(" {p}")));
        let l = &r["lost"];
        let completed = l["completed"].as_u64().unwrap();
        let counted = common::counted_losses_json(l);
        assert!(
            completed * 100 >= 2 * n * 99 && completed + counted >= 2 * n,
            "{p}: {l}"
        );
        for dir in ["request", "response"] {
            let c = |hop: &str| common::json_crossings(r, dir, hop);
            let done = r["one_way"][dir]["count"].as_u64().unwrap();
            assert!(
                c("veth") >= 2 * done && c("bridge") >= done,
                "{p} {dir}: {r}"
            );
        }
    }
    assert_eq!(labelled("container", None), ctrs);
    assert_eq!(labelled("network", None), nets);
    assert_eq!(lab::list_netpath_netns().unwrap(), before_ns);
    // One clear line for a container that does not exist, and a non-zero exit.
    let err = compare_between(&cli, &un.container_name("nosuch"), 10).unwrap_err();
    assert!(
        err.contains("nosuch") && err.trim().lines().count() == 1,
        "{err}"
    );

    // cleanup_docker removes containers and networks nobody holds.
    let removed = docker::cleanup_docker(&engine).unwrap();
    eprintln!("cleanup: {removed:?}");
    assert!(removed.iter().any(|r| r.contains(&srv)), "{removed:?}");
    assert!(removed.iter().any(|r| r.contains(&net)), "{removed:?}");
    assert!(labelled("container", None).is_empty());
    assert!(labelled("network", None).is_empty());
}

fn netns_of(c: &docker::ContainerNet) -> Netns {
    Netns {
        name: c.name.clone(),
        path: c.netns_path.clone(),
        inum: c.netns_inum,
    }
}

#[test]
fn unknown_container_is_a_clear_error() {
    let (_g, engine) = setup();
    let e = runtime::resolve_container(&engine, "np-no-such-container-xyz").unwrap_err();
    let s = format!("{e:#}");
    assert!(s.contains("unknown container"), "{s}");
}
