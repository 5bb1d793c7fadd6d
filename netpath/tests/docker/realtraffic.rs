//! `trace --container` on real traffic: Debian's redis-server (an epoll event loop) and
//! redis-benchmark (its client, the same event loop) in two containers of one bridge, built
//! into a local image from the host's redis-tools (the bench's image), no registry.
use super::*;

/// Removes the containers, the network and the image however the test ends.
struct Gone(Vec<String>, String, String);
impl Drop for Gone {
    fn drop(&mut self) {
        for c in &self.0 {
            let _ = Command::new("docker").args(["rm", "-f", c]).output();
        }
        let _ = Command::new("docker")
            .args(["network", "rm", &self.1])
            .output();
        let _ = Command::new("docker").args(["rmi", &self.2]).output();
    }
}

/// Every device of a journey between two containers is named with its namespace, whether its
/// container is followed or not; no hop is `other`; every journey ends where the application
/// consumed its data, after its `socket-queue` hop.
#[test]
fn trace_container_names_every_device_of_real_traffic() {
    let (_g, _engine) = setup();
    let id = lab::new_run_id().unwrap();
    let k = u8::from_str_radix(&id[..2], 16).unwrap() % 254 + 1;
    let (net, srv, cli) = (
        format!("np-test-{id}-net"),
        format!("np-test-{id}-redis"),
        format!("np-test-{id}-bench"),
    );
    let tag = format!("np-test-redis:{id}");
    netpath::bench::serve_on::redis_image(&tag).unwrap_or_else(|e| panic!("{e:#}"));
    let gone = Gone(vec![srv.clone(), cli.clone()], net.clone(), tag.clone());
    let srv_ip = format!("10.219.{k}.10");
    let subnet = format!("10.219.{k}.0/24");
    docker_cli(&[
        "network", "create", "--label", "netpath", "--subnet", &subnet, &net,
    ]);
    let run = |name: &str, ip: Option<&str>, cmd: &[&str]| {
        let mut a = vec!["run", "-d", "--name", name, "--label", "netpath"];
        a.extend(["--network", &net]);
        if let Some(ip) = ip {
            a.extend(["--ip", ip]);
        }
        a.push(&tag);
        a.extend(cmd);
        docker_cli(&a);
    };
    run(
        &srv,
        Some(&srv_ip),
        &netpath::bench::serve_on::redis_server_cmd(&srv_ip),
    );
    // One connection, one request at a time, looping until removed.
    run(
        &cli,
        None,
        &[
            "/usr/bin/redis-benchmark",
            "-h",
            &srv_ip,
            "-c",
            "1",
            "-P",
            "1",
            "-t",
            "ping",
            "-l",
            "-q",
        ],
    );
    let out = Command::new(env!("CARGO_BIN_EXE_netpath"))
        .args(["trace", "--container", &srv, "--filter-port", "6379"])
        .args(["-c", "40", "--timeout", "30", "--json"])
        .output()
        .unwrap();
    drop(gone);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "trace failed: {stderr}");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stdout)));
    let timelines = v["timelines"].as_array().expect("timelines");
    assert!(timelines.len() >= 10, "{} timelines: {v}", timelines.len());
    let ready = Path::new("/sys/kernel/tracing/events/sock/sk_data_ready").exists();
    let mut dirs = BTreeSet::new();
    let mut client_seen = false;
    for t in timelines {
        let points = t["points"].as_array().unwrap();
        let s = |p: &serde_json::Value, f: &str| p[f].as_str().unwrap_or_default().to_string();
        let line = || {
            points
                .iter()
                .map(|p| format!("{} {} {}", s(p, "point"), s(p, "device"), s(p, "hop")))
                .collect::<Vec<_>>()
                .join(" | ")
        };
        for p in points {
            let dev = s(p, "device");
            // Named with its namespace: never `if221@ns4026531833`.
            assert!(
                !(dev.starts_with("if") && dev.contains("@ns")),
                "unresolved {dev}: {}",
                line()
            );
            assert!(s(p, "kind") != "?", "device of no kind: {}", line());
            assert_ne!(s(p, "hop"), "other", "{}", line());
            client_seen |= dev.ends_with(&format!("@{cli}"));
        }
        let names: Vec<String> = points.iter().map(|p| s(p, "point")).collect();
        let hops: Vec<String> = points.iter().map(|p| s(p, "hop")).collect();
        let n = names.len();
        if ready {
            assert_eq!(names[n - 2..], ["sk_data_ready", "sock_read"], "{}", line());
            assert_eq!(hops[n - 1], "socket-queue", "{}", line());
            assert!(
                !hops[..n - 1].contains(&"socket-queue".to_string()),
                "{}",
                line()
            );
        } else {
            assert_eq!(names[n - 1], "copy_to_user", "{}", line());
        }
        let tuple = s(t, "tuple");
        // A passive journey's direction is relative to the followed server: its replies go
        // out of it (they start on its eth0), requests come in (on its veth's host end).
        let reply = tuple.starts_with(&format!("{srv_ip}:6379 "));
        let want = if reply { "response" } else { "request" };
        assert_eq!(t["dir"], want, "{tuple}: {}", line());
        if dirs.insert(reply) {
            println!("{tuple}: {}", line());
        }
    }
    // Requests to the server and replies through the client's devices, which are not
    // followed and still named.
    assert_eq!(dirs.len(), 2, "requests and replies: {dirs:?}");
    assert!(client_seen, "no device of {cli} named: {v}");
}
