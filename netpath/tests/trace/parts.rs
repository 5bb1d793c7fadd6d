//! Netfilter parts (`--parts`): boundary programs linked around the base chains of the path's
//! namespaces time each table's chains and conntrack on the followed packets.

use netpath::{driver::Driver, measure::compare, path::parts::NfHook};

use super::common;

/// Netfilter links on the machine (a link is gone when netpath closes its descriptor).
fn netfilter_links() -> usize {
    aya::programs::loaded_links()
        .filter_map(Result::ok)
        .filter(|l| matches!(l.link_type(), Ok(aya::programs::links::LinkType::Netfilter)))
        .count()
}

/// published-nat: the node namespace's NAT table has a `nat` chain on PREROUTING, so each
/// response crosses conntrack and that chain there, in this order, and each is a part.
#[test]
fn parts_time_conntrack_and_the_nat_chain_of_published_nat() {
    let _g = common::need_root();
    let before = netpath::lab::list_netpath_netns().unwrap();
    let links_before = netfilter_links();
    let mut opts = common::one_traced_run(Driver::PublishedNat, 200, 20);
    opts.parts = true;
    let mut tracer = common::load_tracer(&opts.tracer);
    let r = match compare::run_driver(&mut tracer, Driver::PublishedNat, &opts) {
        Err(e) if format!("{e:#}").contains("need kernel 6.4 or later") => {
            let release = nix::sys::utsname::uname().unwrap();
            let release = release.release().to_string_lossy().into_owned();
            let v: Vec<u32> = (release.split(['.', '-']).take(2))
                .map(|n| n.parse().unwrap())
                .collect();
            assert!(
                v < vec![6, 4],
                "refused on {release}, which has them: {e:#}"
            );
            eprintln!("no netfilter programs on {release}, refused as it should be: {e:#}");
            return;
        }
        r => r.expect("run"),
    };
    let responses = r.one_way["response"].count;
    let pre: Vec<_> = (r.parts.iter())
        .filter(|p| p.dir == "response" && p.hook == NfHook::Prerouting)
        .collect();
    let names: Vec<_> = pre.iter().map(|p| p.name.as_str()).collect();
    assert_eq!(names.len(), 2, "{:#?}", r.parts);
    assert_eq!(names[0], "conntrack", "{names:?}");
    assert!(names[1].ends_with("/prerouting"), "{names:?}");
    assert!(
        pre[0].prio_to <= -200 || pre[0].prio_from < -200,
        "{:?}",
        pre[0]
    );
    assert!(
        pre[1].rules > 0 && pre[0].prio_to == pre[1].prio_from,
        "{pre:#?}"
    );
    for p in &pre {
        assert!(p.netns.ends_with("-node"), "{p:?}");
        // Every response crossed the node's PREROUTING once; nothing else is counted.
        assert!(
            p.packets >= responses && p.packets <= r.lost["started"],
            "{p:?}"
        );
        assert!(p.per_packet_us > 0.0 && p.p50_us <= p.p99_us, "{p:?}");
    }
    drop(tracer);
    assert_eq!(
        netfilter_links(),
        links_before,
        "a netfilter link left behind"
    );
    assert_eq!(common::leftovers(&before), Vec::<String>::new());
}
