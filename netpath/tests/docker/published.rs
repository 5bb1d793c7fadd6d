//! Published ports: the published-proxy lab through the real docker-proxy, the published-nat
//! lab on a second daemon in its own netns, and `trace --container --port P` on a port a user
//! published (`-p 127.0.0.1:P:8080`): host loopback → docker-proxy → container, nothing else.

use std::net::{Ipv4Addr, SocketAddr};
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use netpath::docker::{self, Engine};
use netpath::driver::Driver;

use super::common::usernet::{UserNet, docker as docker_cli, exchange_until};
use super::{agent_exe, opts, rr_on, server_name, setup};

#[test]
fn published_proxy_lab_goes_through_docker_proxy() {
    let (_g, engine) = setup();
    rr_on(&engine, Driver::PublishedProxy, &opts(), |dl, _| {
        let pid = dl.path.proxy_pid.expect("docker-proxy pid");
        let exe = std::fs::read_link(format!("/proc/{pid}/exe")).unwrap();
        assert!(exe.to_string_lossy().contains("docker-proxy"), "{exe:?}");
        let p = dl.path.published.unwrap();
        assert_eq!(p.ip(), &Ipv4Addr::LOCALHOST);
        let rep = netpath::runtime::inspect_docker(&engine, &server_name(dl)).unwrap();
        eprintln!("{}", rep.render());
        assert!(
            rep.proxies
                .iter()
                .any(|x| x.pid == pid && x.host_port == p.port())
        );
        assert!(rep.ports.iter().all(|m| m.host_ip == "127.0.0.1"));
    });
}

#[test]
fn published_nat_lab_uses_a_second_daemon_in_its_own_netns() {
    let (_g, engine) = setup();
    let before = docker_cli(&["info", "-f", "{{.ContainersRunning}}"]);
    let (id, sock) = rr_on(&engine, Driver::PublishedNat, &opts(), |dl, id| {
        assert!(dl.path.proxy_pid.is_none());
        assert_eq!(dl.path.client_ns.name, format!("np{id}-dkr"));
        let sock = dl.daemon_socket.clone().unwrap();
        assert!(sock.exists());
        // The second daemon's NAT rule is in its own namespace, not the host's.
        let e2 = Engine::connect_to(&format!("unix://{}", sock.display())).unwrap();
        assert!(e2.api_version.starts_with("1."));
        let host_nat = Command::new("iptables-save")
            .args(["-t", "nat"])
            .output()
            .unwrap();
        let p = dl.path.published.unwrap().port().to_string();
        assert!(
            !String::from_utf8_lossy(&host_nat.stdout).contains(&format!("--dport {p} ")),
            "published-nat rule leaked into the host namespace"
        );
        // The main daemon did not see any of it.
        assert_eq!(
            docker_cli(&["info", "-f", "{{.ContainersRunning}}"]),
            before
        );
        (id.to_string(), sock)
    });
    assert!(!sock.exists());
    assert!(!Path::new(&format!("/var/lib/netpath-docker-{id}")).exists());
}

/// What both published-port tests start from: a `web` container serving on `un`'s .10:8080,
/// published as 127.0.0.1:P:8080 (P = `un.port`). Returns (web's name, its .10:8080, the
/// agent image's tag for any other container on the network).
fn publish_web(engine: &Engine, un: &UserNet) -> (String, SocketAddr, String) {
    let tag = docker::image::ensure_agent_image_from(engine, &agent_exe(), false).unwrap();
    let publish = format!("127.0.0.1:{}:8080", un.port);
    let direct: SocketAddr = format!("{}:8080", un.ip(10)).parse().unwrap();
    let web = un.serve("web", direct, &["-p", &publish], &tag);
    (web, direct, tag)
}

/// `netpath trace --container web --port P`: 20 timelines or 30 s, with `more` options.
fn trace_published(web: &str, port: u16, more: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_netpath"))
        .args([
            "trace",
            "--container",
            web,
            "--filter-port",
            &port.to_string(),
        ])
        .args(["-c", "20", "--timeout", "30"])
        .args(more)
        .output()
        .unwrap()
}

/// What a new user tries (issue 12): a container on a user-defined network publishing
/// `-p 127.0.0.1:P:8080`, requests from the host to 127.0.0.1:P, and
/// `netpath trace --container web --port P`: the journeys are followed from the host's
/// loopback through docker-proxy (the proxy hop) to the container, and the output says
/// which port the container side uses.
#[test]
fn published_port_trace_follows_host_loopback_and_docker_proxy() {
    let (_g, engine) = setup();
    let un = UserNet::create(212);
    let port = un.port;
    let (web, _, _) = publish_web(&engine, &un);
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let done = std::sync::atomic::AtomicBool::new(false);
    let out = std::thread::scope(|sc| {
        let traffic = sc.spawn(|| exchange_until(addr, &done, Duration::from_millis(2)));
        let out = trace_published(&web, port, &[]);
        done.store(true, std::sync::atomic::Ordering::Relaxed);
        let n = traffic.join().unwrap().unwrap();
        assert!(n > 0, "no request answered through the published port");
        out
    });
    drop(un);
    assert!(docker_cli(&["ps", "-aq", "--filter", &format!("name={web}")]).is_empty());
    let text = String::from_utf8_lossy(&out.stdout);
    // The counts and what did not attach first: a failure's excerpt keeps its head.
    let summary: Vec<&str> = text
        .lines()
        .filter(|l| l.contains(" timelines (backend ") || l.starts_with("not "))
        .collect();
    println!(
        "{}\n{}\n{text}",
        summary.join("\n"),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "trace failed: {}", summary.join("; "));
    let first = text.lines().next().unwrap_or_default();
    assert!(
        first.starts_with(&format!("127.0.0.1:{port} is published by {web}"))
            && first.contains("docker-proxy (pid ")
            && first.ends_with("container port 8080/tcp"),
        "{first}"
    );
    // Points: `   at  +since  point  device  kind  cpuN  hop`.
    let hops: Vec<&str> = text
        .lines()
        .filter(|l| l.trim_start().starts_with(|c: char| c.is_ascii_digit()))
        .filter_map(|l| l.split_whitespace().last())
        .collect();
    for want in ["loopback", "proxy", "veth"] {
        assert!(
            hops.contains(&want),
            "no {want} hop; {}",
            summary.join("; ")
        );
    }
    // The leg after the proxy reaches the container: its journeys cross the bridge.
    assert!(
        hops.contains(&"bridge"),
        "no bridge hop; {}",
        summary.join("; ")
    );
}

/// `trace --container web --port P` on a published port follows the journeys that came in
/// through P (host lo → docker-proxy → web), not another container's requests to web's own
/// port on the same network.
#[test]
fn published_port_trace_leaves_other_clients_of_the_container_port_out() {
    let (_g, engine) = setup();
    let un = UserNet::create(211);
    let port = un.port;
    let cli_ip = un.ip(20);
    let (web, direct, tag) = publish_web(&engine, &un);
    let cli = un.run("cli", Some(&cli_ip), &[], &tag, &["hold"]);
    let pid = docker_cli(&["inspect", "-f", "{{.State.Pid}}", &cli]);
    let cli_ns =
        netpath::sys::netns::Netns::at(&cli, Path::new(&format!("/proc/{}/ns/net", pid.trim())))
            .unwrap();
    let done = std::sync::atomic::AtomicBool::new(false);
    let published: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let (out, n_pub, n_direct) = std::thread::scope(|sc| {
        let via_port = sc.spawn(|| exchange_until(published, &done, Duration::from_millis(4)));
        // The other client, inside its own container, five times as busy.
        let other = sc.spawn(|| {
            cli_ns
                .run(|| Ok(exchange_until(direct, &done, Duration::from_millis(1))?))
                .unwrap()
        });
        let out = trace_published(&web, port, &["--format", "json"]);
        done.store(true, std::sync::atomic::Ordering::Relaxed);
        let a = via_port.join().unwrap().unwrap();
        let b = other.join().unwrap();
        (out, a, b)
    });
    drop(un);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "trace failed: {stderr}");
    assert!(
        n_pub > 0 && n_direct > n_pub,
        "published {n_pub}, direct {n_direct}"
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let timelines = v["timelines"].as_array().unwrap();
    let tuples: Vec<&str> = timelines
        .iter()
        .map(|t| t["tuple"].as_str().unwrap_or(""))
        .collect();
    println!("published {n_pub}, direct {n_direct}; tuples: {tuples:?}");
    assert!(!timelines.is_empty(), "no timeline; {stderr}");
    for t in &tuples {
        assert!(
            !t.contains(&cli_ip),
            "a journey of the other client was followed: {t}"
        );
    }
    // What was followed came through the published port: its loopback leg or the proxy's.
    assert!(
        tuples
            .iter()
            .all(|t| t.contains(&format!(":{port}")) || t.contains(":8080")),
        "{tuples:?}"
    );
    let hops: Vec<&str> = timelines
        .iter()
        .flat_map(|t| t["points"].as_array().unwrap())
        .filter_map(|p| p["hop"].as_str())
        .collect();
    assert!(hops.contains(&"proxy"), "no proxy hop in {hops:?}");
}
