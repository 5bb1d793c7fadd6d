//! `trace`'s pcap filter expression selects what the equivalent flags select, in the kernel:
//! one lab, traced with the flags and with the expression; and an expression nothing on the
//! lab matches selects nothing.
use netpath::{
    cli::pcap_filter,
    driver::Driver,
    harness::{Proto, proto::L4},
    lab,
    record::Timeline,
    trace::{self, TraceOptions},
};

use super::common;

/// What a selection is made of: each timeline's direction, addresses, the server's port and
/// hops (the client's port is new in every run).
fn selected(ts: &[Timeline]) -> Vec<String> {
    let mut v: Vec<String> = ts
        .iter()
        .map(|t| {
            let h = &t.headers;
            // The wakeup's parts (idle-exit or runqueue, a copy) vary from packet to packet:
            // the path up to the wakeup is what a filter selects.
            let hops: Vec<&str> = (t.points.iter())
                .map(|p| p.hop)
                .filter(|h| !netpath::record::WAKEUP_PARTS.contains(h) || *h == "wakeup")
                .collect();
            format!(
                "{} {} {}>{} {} {}",
                t.dir,
                h.proto,
                h.saddr,
                h.daddr,
                h.sport.min(h.dport),
                hops.join(",")
            )
        })
        .collect();
    v.sort();
    v.dedup();
    v
}

#[test]
fn a_filter_expression_selects_what_its_flags_select() {
    let _g = common::need_root();
    let backend = common::backend();
    let lab = lab::build(Driver::Bridge).unwrap();
    let server = *lab.server_bind.ip();
    let port = lab.server_bind.port();
    let flags = TraceOptions {
        driver: Driver::Bridge,
        count: 6,
        proto: Some(L4::Harness(Proto::Udp)),
        host: Some(server),
        port: Some(port),
        netns: None,
        iface: None,
    };
    let expr = format!("udp port {port} and host {server}");
    let c = pcap_filter::compile(&expr).unwrap();
    let compiled = TraceOptions {
        proto: c.proto,
        host: c.host,
        port: c.port,
        ..flags.clone()
    };
    let by_flags = trace::run_on(backend, &lab, &flags);
    let by_expr = trace::run_on(backend, &lab, &compiled);
    // Nothing on the lab is 10.9.9.9: the kernel drops every packet at its first point.
    let none = TraceOptions {
        host: pcap_filter::compile("udp and host 10.9.9.9").unwrap().host,
        ..compiled.clone()
    };
    let by_none = trace::run_on(backend, &lab, &none);
    lab.teardown().unwrap();
    let (by_flags, by_expr, by_none) = (by_flags.unwrap(), by_expr.unwrap(), by_none.unwrap());
    assert_eq!(by_flags.timelines.len(), 6);
    assert_eq!(by_expr.timelines.len(), 6);
    assert_eq!(selected(&by_flags.timelines), selected(&by_expr.timelines));
    for t in &by_expr.timelines {
        assert_eq!(t.headers.proto, 17, "{t:?}");
        assert!(
            t.headers.saddr == server || t.headers.daddr == server,
            "{t:?}"
        );
        assert!(t.headers.sport == port || t.headers.dport == port, "{t:?}");
    }
    assert!(
        by_none.timelines.is_empty(),
        "host 10.9.9.9 selected {:?}",
        by_none.timelines
    );
}
