use super::*;
use crate::harness::Proto;

fn ok(e: &str) -> Compiled {
    compile(e).unwrap_or_else(|err| panic!("{e}: {err}"))
}

fn refused(e: &str) -> String {
    let msg = compile(e).expect_err(e).to_string();
    assert!(!msg.contains('\n'), "one line: {msg}");
    msg
}

#[test]
fn the_issue_example_is_protocol_port_and_address() {
    assert_eq!(
        ok("tcp port 5432 and host 10.0.0.2"),
        Compiled {
            proto: Some(L4::Harness(Proto::Tcp)),
            host: Some(Ipv4Addr::new(10, 0, 0, 2)),
            port: Some(5432),
        }
    );
}

#[test]
fn spellings_of_one_filter_compile_alike() {
    let want = ok("udp and port 53");
    for e in [
        "udp port 53",
        "port 53 && udp",
        "(udp and port 53)",
        "ip and udp and port 53",
        "ip proto udp and port 53",
        "ip proto \\udp and (port 53)",
        "proto 17 and port 53",
        "UDP PORT 53",
    ] {
        assert_eq!(ok(e), want, "{e}");
    }
    assert_eq!(ok("net 10.1.2.3/32").host, Some(Ipv4Addr::new(10, 1, 2, 3)));
    assert_eq!(ok("proto 47").proto, Some(L4::Number(47)));
    // Saying the same thing twice is no conflict.
    assert_eq!(ok("port 80 and tcp port 80").port, Some(80));
}

#[test]
fn what_the_kernel_cannot_test_is_refused_saying_why() {
    for (e, says) in [
        ("tcp or udp", "`or` cannot be tested"),
        ("not port 22", "`not` cannot be tested"),
        ("! port 22", "`not` cannot be tested"),
        ("src port 80", "either side"),
        ("dst host 10.0.0.1", "either side"),
        ("port 80 and port 443", "two ports"),
        ("host 10.0.0.1 and host 10.0.0.2", "two addresses"),
        ("tcp and udp", "two protocols"),
        ("ip6", "IPv4 packets only"),
        ("net 10.0.0.0/24", "single address"),
        ("portrange 80-90", "cannot be tested"),
        ("tcp[13] & 2 != 0", "byte offsets"),
        ("port http", "number"),
        ("host db", "IPv4 address"),
        ("tcp port", "needs a value"),
        ("tcp and", "incomplete"),
        ("(tcp", "incomplete"),
        ("tcp port 80 udp", "expected `and`"),
        ("", "empty"),
        ("frobnicate", "unknown primitive"),
    ] {
        let msg = refused(e);
        assert!(msg.contains(says), "{e}: {msg}");
    }
}
