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
    // TCP on every kernel; UDP (one datagram a request) where the kernel names a datagram's
    // socket (6.3+): before, `trace --proto udp` is refused with its reason.
    selects_alike(Proto::Tcp).unwrap();
    match selects_alike(Proto::Udp) {
        Err(e) if e.to_string().contains("needs the socket tracepoints") => {
            eprintln!("udp refused on this kernel, as it says: {e}");
        }
        other => other.unwrap(),
    }
}

/// Traces the bridge lab three times, by flags, by the equivalent expression, and by an
/// expression nothing matches; compares what each selected. Err: the kernel refused `proto`.
fn selects_alike(proto: Proto) -> anyhow::Result<()> {
    let backend = common::backend();
    let lab = lab::build(Driver::Bridge).unwrap();
    let server = *lab.server_bind.ip();
    let port = lab.server_bind.port();
    let word = proto.name();
    let flags = TraceOptions {
        driver: Driver::Bridge,
        count: 6,
        proto: Some(L4::Harness(proto)),
        host: Some(server),
        port: Some(port),
        netns: None,
        iface: None,
        parts: false,
    };
    let expr = format!("{word} port {port} and host {server}");
    let c = pcap_filter::compile(&expr).unwrap();
    let compiled = TraceOptions {
        proto: c.proto,
        host: c.host,
        port: c.port,
        ..flags.clone()
    };
    let by_flags = trace::run_on(backend, &lab, &flags);
    let by_expr = by_flags
        .is_ok()
        .then(|| trace::run_on(backend, &lab, &compiled));
    // Nothing on the lab is 10.9.9.9: the kernel drops every packet at its first point.
    let none = TraceOptions {
        host: (pcap_filter::compile(&format!("{word} and host 10.9.9.9")).unwrap()).host,
        ..compiled.clone()
    };
    let by_none = by_flags
        .is_ok()
        .then(|| trace::run_on(backend, &lab, &none));
    lab.teardown().unwrap();
    let by_flags = by_flags?;
    let (by_expr, by_none) = (by_expr.unwrap().unwrap(), by_none.unwrap().unwrap());
    assert_eq!(by_flags.timelines.len(), 6);
    assert_eq!(by_expr.timelines.len(), 6);
    assert_eq!(selected(&by_flags.timelines), selected(&by_expr.timelines));
    let number = if proto == Proto::Udp { 17 } else { 6 };
    for t in &by_expr.timelines {
        assert_eq!(t.headers.proto, number, "{t:?}");
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
    Ok(())
}
