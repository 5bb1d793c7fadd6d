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
    let mut tracer = common::load_tracer(&opts.tracer());
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
            // Function probes time the chains instead where the backend has them.
            assert_eq!(
                common::backend(),
                netpath::probe::backend::Backend::Tracepoint,
                "refused with function probes: {e:#}"
            );
            assert!(
                format!("{e:#}").contains("--backend kprobe"),
                "says what works: {e:#}"
            );
            eprintln!("no netfilter programs on {release}, refused as it should be: {e:#}");
            return;
        }
        r => r.expect("run"),
    };
    let links = !r.parts_via.starts_with("function probes");
    assert_eq!(
        links,
        r.parts_via.starts_with("netfilter links"),
        "{}",
        r.parts_via
    );
    eprintln!("parts measured by {}", r.parts_via);
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

/// `rules` non-matching rules in a base chain of a table of the test's own, at priority `prio`
/// on `hook`, in namespace `ns` (`nft` run from a thread inside it: the VM's busybox `ip` has
/// no `netns exec`).
fn add_chain(ns: &netpath::sys::netns::Netns, table: &str, hook: &str, prio: i32, rules: usize) {
    let mut script =
        format!("table ip {table} {{\n chain c {{ type filter hook {hook} priority {prio};\n");
    for i in 0..rules {
        // 192.0.2.0/24 (TEST-NET-1) is never on the path: no rule matches.
        script += &format!("  ip daddr 192.0.2.{} counter\n", i % 250 + 1);
    }
    script += " }\n}\n";
    let ok = ns
        .run(|| {
            let mut child = std::process::Command::new("nft")
                .args(["-f", "-"])
                .stdin(std::process::Stdio::piped())
                .spawn()?;
            use std::io::Write as _;
            child.stdin.take().unwrap().write_all(script.as_bytes())?;
            Ok(child.wait()?.success())
        })
        .unwrap();
    assert!(ok, "nft -f in {}", ns.name);
}

/// Tables of a user's own on the bridge path (no NAT, so no conntrack): rules in the client's
/// OUTPUT are a part of the request's `sender-stack`, rules in the server's INPUT a part of
/// its `receiver-stack`, each with its rule count, crossed by every request.
#[test]
fn parts_find_a_users_own_chains_in_the_hops_they_lie_in() {
    let _g = common::need_root();
    let before = netpath::lab::list_netpath_netns().unwrap();
    let lab = netpath::lab::build(Driver::Bridge).unwrap();
    add_chain(&lab.client_ns, "nptest_out", "output", 7, 40);
    add_chain(&lab.server_ns, "nptest_in", "input", -3, 25);
    let mut opts = common::one_traced_run(Driver::Bridge, 200, 20);
    opts.parts = true;
    opts.tracer.sample_every = 3;
    let mut tracer = common::load_tracer(&opts.tracer());
    let r = compare::measure(&mut tracer, &lab, &opts);
    lab.teardown().unwrap();
    let r = match r {
        Err(e) if format!("{e:#}").contains("need kernel 6.4 or later") => {
            eprintln!("no netfilter programs on this kernel, refused as the other test checks");
            return;
        }
        r => r.expect("run"),
    };
    let requests = r.one_way["request"].count;
    let find = |name: &str| {
        let p: Vec<_> = r.parts.iter().filter(|p| p.name == name).collect();
        assert_eq!(p.len(), 1, "{name} once, request only: {:#?}", r.parts);
        p[0].clone()
    };
    let out = find("nptest_out/c");
    assert_eq!(
        (out.hook, out.rules, out.dir.as_str()),
        (NfHook::Output, 40, "request")
    );
    assert_eq!((out.prio_from, out.prio_to), (6, 8));
    assert_eq!(
        (out.hop.as_str(), out.after.as_str()),
        ("sender-stack", "send")
    );
    assert!(out.netns.ends_with("-cli"), "{out:?}");
    let inp = find("nptest_in/c");
    assert_eq!(
        (inp.hook, inp.rules, inp.dir.as_str()),
        (NfHook::Input, 25, "request")
    );
    assert_eq!(inp.hop, "receiver-stack", "{inp:?}");
    assert!(inp.netns.ends_with("-srv"), "{inp:?}");
    for p in [&out, &inp] {
        assert!(
            p.packets >= requests && p.packets <= r.lost["started"],
            "{p:?}"
        );
    }
    // The node's NAT table is crossed by bridged packets only where br_netfilter hands them
    // to the IP hooks (loaded with Docker): inside the bridge hop, then.
    let nf = |p: &&netpath::record::parts::PartRow| p.hook != NfHook::Qdisc;
    for p in r
        .parts
        .iter()
        .filter(nf)
        .filter(|p| !p.name.starts_with("nptest_"))
    {
        assert!(p.netns.ends_with("-node") && p.hop == "bridge", "{p:?}");
    }
    drop(tracer);
    assert_eq!(common::leftovers(&before), Vec::<String>::new());
}

/// `trace --parts` on a lab of `driver`, six timelines; none where the kernel has no
/// netfilter programs (the first test checks that refusal).
fn trace_with_parts(driver: Driver) -> Option<netpath::trace::TraceOutput> {
    let opts = netpath::trace::TraceOptions {
        driver,
        count: 6,
        proto: None,
        host: None,
        port: None,
        netns: None,
        iface: None,
        parts: true,
    };
    match netpath::trace::run(common::backend(), &opts) {
        Err(e) if format!("{e:#}").contains("need kernel 6.4 or later") => {
            eprintln!("no netfilter programs on this kernel, refused as the first test checks");
            None
        }
        r => Some(r.unwrap()),
    }
}

/// `trace --parts` on egress: the node's conntrack and NAT chains show in each timeline, in
/// hook order, inside the segment of `points` that holds them and in the hop that segment is.
#[test]
fn trace_timelines_show_parts_inside_their_hops() {
    let _g = common::need_root();
    let before = netpath::lab::list_netpath_netns().unwrap();
    let Some(out) = trace_with_parts(Driver::Egress) else {
        return;
    };
    assert_eq!(out.timelines.len(), 6);
    for t in &out.timelines {
        let names: Vec<&str> = t.parts.iter().map(|p| p.name.as_str()).collect();
        // Request and response both cross the node's PREROUTING (conntrack, then the NAT
        // table's chain) and its POSTROUTING.
        let pre: Vec<&str> = (t.parts.iter())
            .filter(|p| p.hook == NfHook::Prerouting)
            .map(|p| p.name.as_str())
            .collect();
        assert_eq!(pre.len(), 2, "{names:?}");
        assert_eq!(pre[0], "conntrack", "{names:?}");
        assert!(
            names.iter().any(|n| n.ends_with("/postrouting")),
            "{names:?}"
        );
        let mut last = 0.0;
        for p in t.parts.iter().filter(|p| p.hook != NfHook::Qdisc) {
            assert!(
                p.at_us + 1e-6 >= last && p.us > 0.0,
                "in order: {:#?}",
                t.parts
            );
            last = p.at_us + p.us;
            assert!(last <= t.total_us, "{p:?} in {}", t.total_us);
            // Function probes (kprobe, fentry) see the NAT rewrite inside the NAT chain: its
            // point names a `nat` segment there.
            let hops = ["bridge", "forward", "nat"];
            assert!(hops.contains(&p.hop.as_str()), "{p:?}");
        }
        assert!(
            !t.points.iter().any(|p| p.point == "nf_boundary"),
            "marks stay out"
        );
        // Each transmit (`dev_queue`, then `start_xmit` on its device) is a qdisc part of that
        // device, named from netlink: the lab's links keep their default, noqueue.
        let xmits: Vec<_> = (t.points.windows(2))
            .filter(|w| w[0].point == "dev_queue" && w[1].point == "start_xmit")
            .filter(|w| w[0].device == w[1].device)
            .map(|w| (w[0].device.clone(), w[1].since_prev_us))
            .collect();
        let qdiscs: Vec<_> = (t.parts.iter())
            .filter(|p| p.hook == NfHook::Qdisc)
            .map(|p| (p.device.clone(), p.us))
            .collect();
        assert!(xmits.len() >= 2, "{:#?}", t.points);
        assert_eq!(qdiscs, xmits, "{:#?}", t.parts);
        for p in t.parts.iter().filter(|p| p.hook == NfHook::Qdisc) {
            assert_eq!(p.name, "noqueue", "{p:?}");
        }
    }
    assert_eq!(common::leftovers(&before), Vec::<String>::new());
}

/// `trace --parts` on published-nat: the client on the node sends through the node's OUTPUT
/// (conntrack, then the DNAT chain) and POSTROUTING before its first device; those parts are
/// in each request's timeline, in `sender-stack`, before that device's `dev_queue`.
#[test]
fn trace_timelines_show_the_senders_own_parts() {
    let _g = common::need_root();
    let Some(out) = trace_with_parts(Driver::PublishedNat) else {
        return;
    };
    let requests: Vec<_> = out
        .timelines
        .iter()
        .filter(|t| t.dir == "request")
        .collect();
    assert!(!requests.is_empty());
    for t in requests {
        let out_parts: Vec<_> = (t.parts.iter())
            .filter(|p| p.hook == NfHook::Output)
            .collect();
        let names: Vec<&str> = out_parts.iter().map(|p| p.name.as_str()).collect();
        assert_eq!(names.len(), 2, "{:#?}", t.parts);
        assert_eq!(names[0], "conntrack");
        assert!(names[1].ends_with("/output"), "{names:?}");
        // Up to the first device (function probes add points before it: nf_nat_manip).
        let dev = (t.points.iter().position(|p| p.point == "dev_queue"))
            .unwrap_or_else(|| panic!("no dev_queue: {:?}", t.points));
        let first_dev: f64 = t.points[..=dev].iter().map(|p| p.since_prev_us).sum();
        for p in &out_parts {
            assert_eq!(p.hop, "sender-stack", "{p:?}");
            assert!(
                p.at_us + p.us <= first_dev + 1e-6,
                "{p:?} before {first_dev}"
            );
        }
    }
}

/// overlay with netem on its underlay (`compare --underlay-delay`): each transmit's qdisc is a
/// part, named from netlink; the underlay's is netem, in the `underlay` hop, and holds every
/// packet at least the delay (netem never sends one early), in both directions.
#[test]
fn qdisc_parts_name_netem_on_the_underlay_and_hold_its_delay() {
    let _g = common::need_root();
    let before = netpath::lab::list_netpath_netns().unwrap();
    let delay = std::time::Duration::from_micros(300);
    let wire = netpath::lab::netem::WireDelay {
        delay,
        jitter: std::time::Duration::ZERO,
    };
    if let Err(e) = netpath::lab::netem::check_netem(&wire) {
        // The host kernel of these machines has no sch_netem; the VM kernels run this test.
        eprintln!("skipped: {e:#}");
        return;
    }
    let mut opts = common::one_traced_run(Driver::Overlay, 100, 10);
    opts.parts = true;
    opts.underlay = Some(wire);
    let mut tracer = common::load_tracer(&opts.tracer());
    let r = match compare::run_driver(&mut tracer, Driver::Overlay, &opts) {
        Err(e) if format!("{e:#}").contains("need kernel 6.4 or later") => {
            eprintln!("no netfilter programs on this kernel, refused as the first test checks");
            return;
        }
        r => r.expect("run"),
    };
    drop(tracer);
    let qdiscs: Vec<_> = (r.parts.iter())
        .filter(|p| p.hook == NfHook::Qdisc)
        .collect();
    for dir in ["request", "response"] {
        let netem: Vec<_> = (qdiscs.iter())
            .filter(|p| p.dir == dir && p.name == "netem")
            .collect();
        assert_eq!(netem.len(), 1, "{dir}: {qdiscs:#?}");
        let p = netem[0];
        assert_eq!(p.hop, "underlay", "{p:?}");
        assert!(p.device.starts_with("np"), "{p:?}");
        assert!(p.packets >= r.one_way[dir].count, "{p:?}");
        let held = delay.as_secs_f64() * 1e6;
        // The mean is exact; a percentile is read within its bucket (1/16 of its value wide).
        assert!(
            p.per_packet_us >= held && p.p50_us >= held * 15.0 / 16.0,
            "{p:?}"
        );
        // The other transmits of that direction: the lab's own links, no qdisc added.
        let others = (qdiscs.iter()).filter(|q| q.dir == dir && q.name != "netem");
        assert!(others.clone().count() >= 1, "{qdiscs:#?}");
        for q in others {
            assert_eq!(q.name, "noqueue", "{q:?}");
        }
    }
    assert_eq!(common::leftovers(&before), Vec::<String>::new());
}

/// A qdisc put on the client's link (pfifo: built into every kernel with qdiscs) names the
/// request's first transmit part; the server's link keeps its default (noqueue) for the
/// response's, and the node's bridge ports theirs.
#[test]
fn qdisc_parts_name_the_qdisc_each_link_has() {
    let _g = common::need_root();
    let before = netpath::lab::list_netpath_netns().unwrap();
    let lab = netpath::lab::build(Driver::Bridge).unwrap();
    let eth0 = (lab.devices.iter())
        .find(|d| d.netns == lab.client_ns.name && d.kind == netpath_common::DevKind::Veth)
        .expect("the client's veth")
        .clone();
    (lab.client_ns)
        .run(|| netpath::sys::nl::Nl::new()?.replace_root_qdisc(eth0.ifindex, "pfifo"))
        .unwrap();
    let mut opts = common::one_traced_run(Driver::Bridge, 100, 10);
    opts.parts = true;
    let mut tracer = common::load_tracer(&opts.tracer());
    let r = compare::measure(&mut tracer, &lab, &opts);
    let (client_ns, server_ns) = (lab.client_ns.name.clone(), lab.server_ns.name.clone());
    lab.teardown().unwrap();
    let r = match r {
        Err(e) if format!("{e:#}").contains("need kernel 6.4 or later") => {
            eprintln!("no netfilter programs on this kernel, refused as the first test checks");
            return;
        }
        r => r.expect("run"),
    };
    drop(tracer);
    let q = |dir: &str| -> Vec<(String, String, String)> {
        (r.parts.iter())
            .filter(|p| p.hook == NfHook::Qdisc && p.dir == dir)
            .map(|p| (p.device.clone(), p.netns.clone(), p.name.clone()))
            .collect()
    };
    let (req, resp) = (q("request"), q("response"));
    let on = |v: &[(String, String, String)], ns: &str| {
        (v.iter())
            .filter(|(_, n, _)| n == ns)
            .map(|(_, _, k)| k.clone())
            .collect::<Vec<_>>()
    };
    assert_eq!(on(&req, &client_ns), ["pfifo"], "{req:?}");
    assert_eq!(on(&resp, &server_ns), ["noqueue"], "{resp:?}");
    // Each direction's other transmit: the node's bridge port toward the receiver.
    for v in [&req, &resp] {
        assert_eq!(v.len(), 2, "{v:?}");
        assert!(
            v.iter()
                .any(|(_, n, k)| n.ends_with("-node") && k == "noqueue"),
            "{v:?}"
        );
    }
    for p in r.parts.iter().filter(|p| p.hook == NfHook::Qdisc) {
        assert!(p.packets >= r.one_way[p.dir.as_str()].count, "{p:?}");
        assert_eq!(p.hop, "veth", "{p:?}");
    }
    assert_eq!(common::leftovers(&before), Vec::<String>::new());
}

/// A namespace of the path removed while its boundaries are linked (a container stopped in
/// the middle of a run): the teardown goes through, closing the links leaves none on the
/// machine, and the same tracer links and measures the parts of the next path.
#[test]
fn parts_outlive_a_namespace_removed_while_linked() {
    let _g = common::need_root();
    let before = netpath::lab::list_netpath_netns().unwrap();
    let links_before = netfilter_links();
    let mut opts = common::one_traced_run(Driver::Bridge, 100, 10);
    opts.parts = true;
    let mut tracer = common::load_tracer(&opts.tracer());
    let lab = netpath::lab::build(Driver::Bridge).unwrap();
    // Boundaries in the client's namespace too, which the teardown removes.
    add_chain(&lab.client_ns, "nptest_out", "output", 7, 5);
    let placement = netpath::path::parts::of_path(&lab).unwrap();
    let client = &lab.client_ns.name;
    assert!(placement.bounds.iter().any(|(ns, _)| &ns.name == client));
    match tracer.link_parts(&placement) {
        Err(e) if format!("{e:#}").contains("need kernel 6.4 or later") => {
            lab.teardown().unwrap();
            eprintln!("no netfilter programs on this kernel, refused as the first test checks");
            return;
        }
        r => r.expect("link"),
    }
    // Function probes (no netfilter links on this kernel) link nothing in the namespaces.
    let linked = match tracer.parts_via() {
        Some(v) if v.starts_with("netfilter links") => placement.bounds.len(),
        _ => 0,
    };
    assert_eq!(
        netfilter_links(),
        links_before + linked,
        "one link a boundary"
    );
    lab.teardown()
        .expect("teardown with boundaries linked in its namespaces");
    assert_eq!(
        common::leftovers(&before),
        Vec::<String>::new(),
        "namespaces gone"
    );
    tracer.unlink_parts();
    assert_eq!(netfilter_links(), links_before, "links closed");
    let lab = netpath::lab::build(Driver::Bridge).unwrap();
    // A chain of the test's own: the node's chains are crossed by bridged packets only where
    // br_netfilter is loaded (with Docker), which the VMs are not.
    add_chain(&lab.client_ns, "nptest_out", "output", 7, 5);
    let r = compare::measure(&mut tracer, &lab, &opts);
    lab.teardown().unwrap();
    let r = r.expect("the next run");
    assert!(
        r.parts.iter().any(|p| p.name == "nptest_out/c"),
        "{:#?}",
        r.parts
    );
    drop(tracer);
    assert_eq!(netfilter_links(), links_before);
    assert_eq!(common::leftovers(&before), Vec::<String>::new());
}
