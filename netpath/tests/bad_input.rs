//! Bad input, as a new user would give it: every case is answered with one line on stderr
//! saying what and how to fix it, a non-zero exit, and nothing created (the machine's
//! namespaces, links, nft tables, netpath's state directory, BPF programs, docker-proxy and
//! dockerd processes and Docker containers/networks are compared before and after).
//!
//! Needs root (it also runs netpath as an unprivileged user through `setpriv`) and a Docker
//! daemon for the container cases (started here if none answers):
//!
//!     sudo -E cargo test -p netpath --test bad_input -- --test-threads=1

use std::process::{Command, Output, Stdio};
use std::time::Duration;

mod common;
use common::leftovers::snapshot;
use common::{SERIAL, ensure_daemon};

use common::NETPATH;

/// How a case runs netpath.
#[derive(Clone, Copy)]
enum How {
    /// As root, as it is.
    Root,
    /// As `nobody` through setpriv (no capabilities).
    Unprivileged,
    /// In a private mount namespace where /sys/kernel/btf is an empty tmpfs.
    NoBtf,
    /// With `DOCKER_HOST` at a socket nothing listens on.
    DeadDocker,
}

struct Case {
    args: Vec<String>,
    how: How,
    /// A fragment the one line must contain (what is wrong).
    says: String,
}

fn case(args: &str, how: How, says: &str) -> Case {
    Case {
        args: args.split_whitespace().map(String::from).collect(),
        how,
        says: says.to_string(),
    }
}

fn run(c: &Case) -> Output {
    let mut cmd = match c.how {
        How::Root | How::DeadDocker => Command::new(NETPATH),
        How::Unprivileged => {
            let mut x = Command::new("setpriv");
            x.args([
                "--reuid=65534",
                "--regid=65534",
                "--clear-groups",
                "--inh-caps=-all",
            ]);
            x.arg(NETPATH);
            x
        }
        How::NoBtf => {
            let mut x = Command::new("unshare");
            x.args(["-m", "sh", "-c"]);
            x.arg("mount -t tmpfs none /sys/kernel/btf && exec \"$0\" \"$@\"");
            x.arg(NETPATH);
            x
        }
    };
    cmd.args(&c.args).stdin(Stdio::null());
    if let How::DeadDocker = c.how {
        cmd.env("DOCKER_HOST", "unix:///run/netpath-test-no-daemon.sock");
    }
    cmd.output().expect("run netpath")
}

/// Runs every case, checks each, and panics with the list of those that failed.
fn check_all(cases: &[Case]) {
    let mut failures = Vec::new();
    for c in cases {
        let before = snapshot();
        let out = run(c);
        let after = snapshot();
        let err = String::from_utf8_lossy(&out.stderr);
        let lines: Vec<&str> = err.lines().filter(|l| !l.trim().is_empty()).collect();
        let what = format!("`netpath {}`", c.args.join(" "));
        println!("{what}: exit {:?}: {}", out.status.code(), err.trim());
        if out.status.success() {
            failures.push(format!("{what} exited 0"));
        }
        // One `netpath:` prefix, not two ("netpath: netpath report: …").
        let once = lines
            .first()
            .is_some_and(|l| l.starts_with("netpath: ") && !l.starts_with("netpath: netpath"));
        if lines.len() != 1 || !once || !lines[0].contains(&c.says) {
            failures.push(format!(
                "{what}: want one line containing {:?}, got {lines:?}",
                c.says
            ));
        }
        let ch = common::leftovers::changes(&before, &after);
        if !ch.is_empty() {
            failures.push(format!("{what}: {ch:?}"));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

fn need_root() -> std::sync::MutexGuard<'static, ()> {
    common::need_root()
}

/// (arguments, what the one line names) of the cases run as root.
const AS_ROOT: &[(&str, &str)] = &[
    // The eight cases of issue 16.
    (
        "compare -d bridge --streams 100000 --burst 0 -n 100",
        "--streams",
    ),
    ("compare -d bridge --req-size 100000000", "--req-size"),
    ("compare -d bridge --burst 100000000", "--burst"),
    (
        "compare -d bridge --warmup 99999999999999 -n 10",
        "--warmup",
    ),
    ("compare -d bridge --bulk 100000000000", "--bulk <DURATION>"),
    ("compare -d bridge -n 0", "--requests"),
    ("compare -d bridge --rounds 0", "--rounds"),
    ("trace --count 0", "--count"),
    // More numbers out of range, not numbers, zero where it means nothing.
    ("compare --burst-duration 0", "--burst-duration"),
    ("compare --bulk=-1", "--bulk <DURATION>"),
    ("compare --bulk nan", "--bulk <DURATION>"),
    ("compare --resp-size 0", "--resp-size"),
    ("compare --sample-every 2000000", "--sample-every"),
    ("compare --streams 0", "--streams"),
    ("compare -n lots", "--requests"),
    ("trace --timeout 0", "--timeout"),
    ("trace --filter-port 70000", "--filter-port"),
    ("trace --filter-addr 10.0.0.300", "--filter-addr"),
    ("bench --rounds 0", "--rounds"),
    ("bench --duration 0", "--duration"),
    ("bench --proto icmp", "sockperf has no ICMP mode"),
    ("bench --stability --proto udp", "has no --proto"),
    ("compare --underlay-delay 5s", "at most 1s"),
    ("compare --underlay-jitter 1ms", "--underlay-delay"),
    ("compare -d bridge,nosuch", "possible values"),
    ("compare --backend ebpf", "possible values"),
    ("compare --between onlyone", "--between"),
    ("frobnicate", "frobnicate"),
    ("doctor --format xml", "possible values: text, json"),
    ("trace -c 1 --json --format text", "cannot be used with"),
    // Values only the run can check: refused before any lab is built.
    ("trace --filter-proto bogus -c 1", "unknown protocol"),
    ("trace --proto udp,icmp -c 1", "trace takes one --proto"),
    ("tune -d bridge,host --knob gro", "tune takes one -d"),
    ("diff -d overlay,host --vs bridge", "diff takes one -d"),
    ("doctor -o /nonexistent/dir/d.json", "does not exist"),
    ("doctor -o d.html", "writes text or JSON"),
    // Protocols a path cannot carry the way netpath measures them, said before any lab.
    (
        "compare -d published-proxy --proto udp -n 10",
        "cannot be measured on published-proxy",
    ),
    (
        "trace -d published-proxy --proto udp -c 1",
        "cannot be measured on published-proxy",
    ),
    (
        "compare -d bridge --proto udp --req-size 70000",
        "does not fit one datagram",
    ),
    (
        "compare --docker -d bridge --proto icmp --resp-size 64",
        "echo reply carries",
    ),
    (
        "compare -d published-proxy --proto icmp -n 10",
        "cannot be measured on published-proxy",
    ),
    (
        "compare -d published-nat --proto icmp -n 10",
        "cannot be measured on published-nat",
    ),
    (
        "compare -d bridge --proto icmp --resp-size 64",
        "echo reply carries",
    ),
    ("compare -d bridge --proto sctp", "possible values"),
    ("trace -d bridge --filter-proto 47 -c 1", "protocol number"),
    (
        "trace -d bridge --proto tcp --filter-proto udp -c 1",
        "nothing else would match",
    ),
    ("trace --filter-netns nosuch -c 1", "no lab netns"),
    ("trace --filter-iface nosuch0 -c 1", "no lab device"),
];

/// …run as `nobody`: the environment lacks root.
const UNPRIVILEGED: &[(&str, &str)] = &[
    // The environment.
    ("compare -d host -n 10", "needs root"),
    ("trace -c 1", "needs root"),
    ("cleanup", "needs root"),
    ("diff -d overlay --vs bridge -n 10", "needs root"),
];

/// …run with no kernel BTF.
const NO_BTF: &[(&str, &str)] = &[
    (
        "diff -d overlay --vs bridge -n 10 --burst 0",
        "no kernel BTF",
    ),
    ("compare -d host -n 10 --burst 0", "no kernel BTF"),
    ("trace -c 1", "no kernel BTF"),
];

/// …run with `DOCKER_HOST` at a dead socket.
const DEAD_DOCKER: &[(&str, &str)] = &[
    ("compare --docker -d bridge", "not reachable"),
    ("compare --between a b", "not reachable"),
    ("trace --container web", "not reachable"),
    ("inspect web", "not reachable"),
];

/// The options and environments that never reach a daemon.
#[test]
fn bad_options_and_environments_answered_in_one_line() {
    let _g = need_root();
    use How::*;
    let tables = [
        (AS_ROOT, Root),
        (UNPRIVILEGED, Unprivileged),
        (NO_BTF, NoBtf),
        (DEAD_DOCKER, DeadDocker),
    ];
    let mut cases: Vec<Case> = tables
        .into_iter()
        .flat_map(|(t, how)| t.iter().map(move |(args, says)| case(args, how, says)))
        .collect();
    // A backend the kernel refuses (which one depends on the kernel: doctor says).
    let doctor = Command::new(NETPATH).args(["doctor", "--json"]).output();
    let refused = doctor
        .ok()
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .and_then(|j| refused_backend(&j));
    match refused {
        Some(b) => cases.push(case(
            &format!("compare -d host -n 10 --backend {b}"),
            Root,
            "cannot be used on this kernel",
        )),
        None => println!("every backend loads on this kernel: no refused-backend case here"),
    }
    check_all(&cases);
}

/// The first of kprobe, fentry whose check `doctor --json` reports as failed.
fn refused_backend(doctor_json: &str) -> Option<&'static str> {
    let v: serde_json::Value = serde_json::from_str(doctor_json).ok()?;
    let checks = v.get("capabilities")?.get("checks")?.as_array()?.clone();
    ["kprobe", "fentry"].into_iter().find(|b| {
        checks.iter().any(|c| {
            c.get("name").and_then(|n| n.as_str()) == Some(*b)
                && c.get("ok").and_then(|o| o.as_bool()) == Some(false)
        })
    })
}

/// Containers: unknown ones, one without a network; a link name clash in the Docker host.
#[test]
fn bad_containers_answered_in_one_line() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    assert!(nix::unistd::geteuid().is_root(), "this test needs root");
    let engine = ensure_daemon();
    let image = netpath::docker::image::ensure_agent_image_from(
        &engine,
        std::path::Path::new(NETPATH),
        true,
    )
    .expect("agent image");
    let docker = |args: &[&str]| common::run_ok("docker", args);
    let tag = format!("npt{}", std::process::id());
    let net = format!("{tag}-net");
    let (cli, srv, lone) = (
        format!("{tag}-cli"),
        format!("{tag}-srv"),
        format!("{tag}-lone"),
    );
    docker(&["network", "create", "--label", "netpath-test", &net]);
    let runs = [
        (cli.as_str(), net.as_str()),
        (srv.as_str(), net.as_str()),
        (lone.as_str(), "none"),
    ];
    for (name, network) in runs {
        let args = [
            "--label",
            "netpath-test",
            "--name",
            name,
            "--network",
            network,
        ];
        docker(&[&["run", "-d"][..], &args, &[&image, "hold"]].concat());
    }
    std::thread::sleep(Duration::from_millis(300));
    use How::Root;
    let cases = vec![
        case("inspect np-no-such-container", Root, "np-no-such-container"),
        case(
            "trace --container np-no-such-container",
            Root,
            "np-no-such-container",
        ),
        case(
            &format!("compare --between np-no-such-container {srv}"),
            Root,
            "np-no-such-container",
        ),
        case(&format!("compare --between {cli} {lone}"), Root, &lone),
        case(&format!("trace --container {lone}"), Root, &lone),
        // What a Docker path cannot carry, said before anything is loaded or built.
        case(
            "compare --docker -d published-proxy --proto icmp -n 10",
            Root,
            "cannot be measured on published-proxy",
        ),
        case(
            "compare --docker -d published-proxy --proto tcp,udp -n 10",
            Root,
            "cannot be measured on published-proxy",
        ),
    ];
    // An echo from the Docker host's own namespace, where root may not open ping sockets:
    // refused naming the setting, which netpath leaves as it is.
    let range = netpath::sys::netns::read_sysctl("net.ipv4.ping_group_range").unwrap();
    let mut cases = cases;
    if !netpath::harness::icmp::ping_allows_root(&range) {
        cases.push(case(
            "compare --docker -d host --proto icmp -n 10",
            Root,
            &format!("ping_group_range ({})", range.replace('\t', " ")),
        ));
    } else {
        println!("this host's ping_group_range ({range}) lets root ping: docker host icmp runs");
    }
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        check_all(&cases);
        name_clash_leaves_the_foreign_link(&engine);
    }));
    let _ = Command::new("docker")
        .args(["rm", "-f", &cli, &srv, &lone])
        .output();
    let _ = Command::new("docker")
        .args(["network", "rm", &net])
        .output();
    if let Err(e) = r {
        std::panic::resume_unwind(e);
    }
}

/// A link in the Docker host's namespace with the name a run would give its egress uplink:
/// the build fails with one line naming it, the link stays, nothing else is created.
fn name_clash_leaves_the_foreign_link(engine: &netpath::docker::Engine) {
    let id = format!("{:06x}", std::process::id() & 0xff_ffff);
    let clash = format!("np{id}up");
    let ip = |args: &[&str]| common::run_ok("ip", args);
    // A veth pair (the host kernel has no dummy driver); its peer's name clashes with nothing.
    ip(&[
        "link",
        "add",
        &clash,
        "type",
        "veth",
        "peer",
        "name",
        &format!("np{id}zz"),
    ]);
    let before = snapshot();
    let r = netpath::docker::DockerLab::build(
        engine,
        netpath::driver::Driver::Egress,
        &netpath::docker::DockerLabOptions {
            exe: Some(NETPATH.into()),
            reuse_image: true,
            run_id: Some(id.clone()),
            ..Default::default()
        },
    );
    let after = snapshot();
    let _ = Command::new("ip").args(["link", "del", &clash]).output();
    let e = match r {
        Ok(_) => panic!("the egress lab was built over the existing link {clash}"),
        Err(e) => format!("{e:#}"),
    };
    println!("egress lab with {clash} taken: {e}");
    assert!(e.contains(&clash) && e.contains("already exists"), "{e}");
    assert!(!e.contains('\n'), "one line: {e}");
    let ch = common::leftovers::changes(&before, &after);
    assert!(
        ch.is_empty(),
        "the failed build changed the machine: {ch:?}"
    );
}

/// Ports that netpath's lab and Docker drivers use, taken on the host: nothing of netpath's
/// binds there (the lab lives in its own namespaces, Docker's ports are picked free), so the
/// run works and leaves nothing.
#[test]
fn occupied_host_ports_do_not_matter() {
    let _g = need_root();
    let _held: Vec<_> = [netpath::lab::LAB_PORT, netpath::lab::PUBLISHED_PORT]
        .iter()
        .map(|p| std::net::TcpListener::bind(("127.0.0.1", *p)).expect("port free on the host"))
        .collect();
    let before = snapshot();
    common::output_ok(
        Command::new(NETPATH)
            .args([
                "compare",
                "-d",
                "published-proxy,host",
                "-n",
                "50",
                "--warmup",
                "10",
            ])
            .args(common::LATENCY_ONLY)
            .stdin(Stdio::null()),
    );
    let ch = common::leftovers::changes(&before, &snapshot());
    assert!(ch.is_empty(), "{ch:?}");
}
