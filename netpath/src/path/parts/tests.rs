use super::*;

/// An iptables-nft filter table (FORWARD jumping to DOCKER-USER) and a nat table, as
/// `nft -j list ruleset` prints them (trimmed to the fields read).
fn ruleset() -> Value {
    serde_json::json!({"nftables": [
        {"metainfo": {"version": "1.0.6"}},
        {"table": {"family": "ip", "name": "filter"}},
        {"chain": {"family": "ip", "table": "filter", "name": "FORWARD", "type": "filter",
                   "hook": "forward", "prio": 0, "policy": "accept"}},
        {"chain": {"family": "ip", "table": "filter", "name": "DOCKER-USER"}},
        {"chain": {"family": "ip6", "table": "filter", "name": "FORWARD", "type": "filter",
                   "hook": "forward", "prio": 0}},
        {"chain": {"family": "ip", "table": "nat", "name": "OUTPUT", "type": "nat",
                   "hook": "output", "prio": -100}},
        {"rule": {"family": "ip", "table": "filter", "chain": "FORWARD",
                  "expr": [{"jump": {"target": "DOCKER-USER"}}]}},
        {"rule": {"family": "ip", "table": "filter", "chain": "DOCKER-USER", "expr": [{"xt": null}]}},
        {"rule": {"family": "ip", "table": "filter", "chain": "DOCKER-USER", "expr": [{"xt": null}]}},
        {"rule": {"family": "ip6", "table": "filter", "chain": "FORWARD", "expr": []}},
    ]})
}

#[test]
fn base_chains_count_rules_through_jumps_and_skip_ipv6() {
    let c = base_chains(&ruleset());
    assert_eq!(c.len(), 2);
    let fwd = &c.iter().find(|(b, _)| b.hook == NfHook::Forward).unwrap().0;
    assert_eq!(
        (fwd.table.as_str(), fwd.chain.as_str(), fwd.prio),
        ("filter", "FORWARD", 0)
    );
    assert_eq!(fwd.rules, 3, "its own jump and DOCKER-USER's two");
    let reached = [ChainRules {
        chain: "DOCKER-USER".into(),
        rules: 2,
    }];
    assert_eq!(fwd.reached, reached);
    assert!(
        c.iter()
            .any(|(b, nat)| *nat && b.hook == NfHook::Output && b.prio == -100)
    );
}

#[test]
fn nat_brings_conntrack_and_boundaries_bracket_each_group() {
    let g = groups(&base_chains(&ruleset()));
    let out = &g[&NfHook::Output];
    let names: Vec<_> = out.iter().map(|g| g.name.as_str()).collect();
    assert_eq!(names, ["conntrack", "nat/OUTPUT"]);
    assert_eq!(boundary_prios(out), [-201, -150, -99]);
    assert_eq!(g[&NfHook::Prerouting][0].name, "conntrack");
    assert_eq!(boundary_prios(&g[&NfHook::Forward]), [-1, 1]);
}

#[test]
fn groups_one_apart_merge_and_links_stay_off_the_ends() {
    let g = |prio, name: &str| Group {
        prio,
        last: prio,
        name: name.into(),
        rules: 1,
        reached: Vec::new(),
        nat: false,
    };
    let merged = merge_adjacent(vec![g(-1, "a/x"), g(0, "b/y"), g(10, "c/z")]);
    assert_eq!(merged.len(), 2);
    assert_eq!((merged[0].name.as_str(), merged[0].rules), ("a/x+b/y", 2));
    assert_eq!(boundary_prios(&merged), [-2, 5, 11]);
    let far = [g(-2_000_000_000, "first"), g(2_000_000_000, "last")];
    assert_eq!(boundary_prios(&far), [-2_000_000_001, 0, 2_000_000_001]);
}
