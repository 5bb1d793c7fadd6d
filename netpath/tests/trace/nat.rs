//! NAT in the timelines: published-nat's DNAT to the server and its reply's rewrite back,
//! and egress's MASQUERADE to the uplink address and de-NAT back, for TCP and ICMP echo.

use netpath::{driver::Driver, lab};

use super::common;

/// `trace` run in-process on a lab of `driver` until `count` timelines, the harness sending
/// `proto` (TCP when none), with no host, port, netns or interface filter.
fn trace_lab(
    driver: Driver,
    count: usize,
    proto: Option<&str>,
) -> anyhow::Result<netpath::trace::TraceOutput> {
    let opts = netpath::trace::TraceOptions {
        driver,
        count,
        proto: proto.map(|p| p.parse().unwrap()),
        host: None,
        port: None,
        netns: None,
        iface: None,
        parts: false,
    };
    netpath::trace::run(common::backend(), &opts)
}

#[test]
fn nat_rewrite_shows_in_trace() {
    let _g = common::need_root();
    let before = lab::list_netpath_netns().unwrap();
    let out = trace_lab(Driver::PublishedNat, 4, None).unwrap();
    assert_eq!(out.timelines.len(), 4);
    let published = format!(":{}", lab::PUBLISHED_PORT);
    let server = format!(":{}", lab::LAB_PORT);
    // The sending socket's destination comes from tcp:tcp_sendmsg_locked (6.10+); older kernels
    // bound journeys with syscall tracepoints, which do not carry the socket.
    let sock_point =
        std::path::Path::new("/sys/kernel/tracing/events/tcp/tcp_sendmsg_locked").exists();
    for t in &out.timelines {
        if t.dir == "request" && !sock_point {
            continue;
        }
        let x = t
            .translated
            .as_deref()
            .unwrap_or_else(|| panic!("no NAT seen: {t:?}"));
        match t.dir {
            // The client connects to the published port; OUTPUT DNAT rewrites the destination.
            "request" => assert!(
                x.starts_with("dst") && x.contains(&published) && x.contains(&server),
                "{x}"
            ),
            // The reply's source is rewritten back to the published address.
            _ => assert!(x.starts_with("src") && x.contains(&published), "{x}"),
        }
    }
    assert_eq!(common::leftovers(&before), Vec::<String>::new());
}

/// MASQUERADE on egress, for TCP and for ICMP echo (whose identifier stands where a port
/// would: `10.213.K.2 id=N`): the request reaches the remote from the node's uplink address,
/// the reply is de-NATed back to the container.
#[test]
fn egress_masquerade_shows_in_trace() {
    let _g = common::need_root();
    let before = lab::list_netpath_netns().unwrap();
    for proto in ["tcp", "icmp"] {
        egress_masquerade(proto);
    }
    assert_eq!(common::leftovers(&before), Vec::<String>::new());
}

fn egress_masquerade(proto: &str) {
    let out = match trace_lab(Driver::Egress, 6, Some(proto)) {
        // Kernels without the socket tracepoints refuse ICMP in one line (protocols.rs).
        Err(e) if proto == "icmp" && format!("{e:#}").contains("needs the socket tracepoints") => {
            eprintln!("icmp refused on this kernel, as it should be: {e:#}");
            return;
        }
        r => r.unwrap(),
    };
    assert_eq!(out.timelines.len(), 6);
    // 10.213.K.2 is the client container, 10.217.K.1 the node's uplink (the masquerade's
    // address), 10.217.K.2 the remote host; after the address a port (`:P`) or an echo
    // identifier (` id=N`).
    let host = |x: &str, h: &str| x.contains(&format!("{h}:")) || x.contains(&format!("{h} id="));
    let client = |x: &str| x.contains("10.213.") && host(x, ".2");
    for t in &out.timelines {
        let x = t
            .translated
            .as_deref()
            .unwrap_or_else(|| panic!("{proto}: no NAT seen: {t:?}"));
        let (from, to) = x
            .split_once(" → ")
            .unwrap_or_else(|| panic!("not one rewrite: {x}"));
        match t.dir {
            // The request leaves the container from its own address and reaches the remote
            // from the node's uplink address.
            "request" => {
                assert!(from.starts_with("src ") && client(from), "{x}");
                assert!(to.starts_with("10.217.") && host(to, ".1"), "{x}");
                let want = if proto == "tcp" {
                    ":11111"
                } else {
                    " icmp echo "
                };
                assert!(t.tuple.contains(want), "{}", t.tuple);
            }
            // The reply is addressed to the uplink and reaches the container de-NATed.
            _ => {
                assert!(from.starts_with("dst 10.217.") && host(from, ".1"), "{x}");
                assert!(client(to), "{x}");
            }
        }
    }
}
