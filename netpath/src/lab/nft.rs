//! netpath's own nftables table in the node namespace, shaped like Docker's bridge NAT
//! (the rules are on [`NatSpec::ruleset`]).
//!
//! Applied with the `nftables` crate (`nft -j -f -`) from a thread inside the node
//! namespace: the `nft` child inherits that thread's namespace.

use std::borrow::Cow;
use std::collections::HashSet;
use std::net::{Ipv4Addr, SocketAddrV4};

use anyhow::{Result, anyhow};
use nftables::batch::Batch;
use nftables::expr::{
    Expression, Fib, FibFlag, FibResult, Meta, MetaKey, NamedExpression, Payload, PayloadField,
    Prefix,
};
use nftables::helper::NftablesError;
use nftables::schema::{Chain, NfListObject, Nftables, Rule, Table};
use nftables::stmt::{JumpTarget, Match, NAT, Operator, Statement};
use nftables::types::{NfChainPolicy, NfChainType, NfFamily, NfHook};

/// What the NAT rules refer to.
#[derive(Clone, Debug)]
pub struct NatSpec {
    pub run_id: String,
    pub bridge: String,
    pub subnet: (Ipv4Addr, u8),
    /// Port published on every local address of the node.
    pub published_port: u16,
    /// Where the published port goes (the server container); `None` for a network with no
    /// server container (egress, gateway), which gets Docker's outbound NAT only.
    pub target: Option<SocketAddrV4>,
}

const DOCKER_CHAIN: &str = "np-docker";

impl NatSpec {
    pub fn table_name(&self) -> String {
        format!("netpath_{}", self.run_id)
    }

    /// The ruleset as an nftables JSON document: the rules Docker installs for a bridge
    /// network, in a table of netpath's:
    ///
    /// ```text
    /// table ip netpath_<id> {
    ///   chain postrouting { type nat hook postrouting priority srcnat;
    ///     ip saddr <subnet> oifname != "<bridge>" masquerade                 # outbound NAT
    ///     ip saddr <srv> ip daddr <srv> tcp dport <port> masquerade }        # hairpin (*)
    ///   chain prerouting  { type nat hook prerouting priority dstnat;
    ///     fib daddr type local jump np-docker }
    ///   chain output      { type nat hook output priority dstnat;
    ///     ip daddr != 127.0.0.0/8 fib daddr type local jump np-docker }
    ///   chain np-docker   { iifname != "<bridge>" tcp dport <pub> dnat to <srv>:<port>    (*)
    ///                       iifname != "<bridge>" udp dport <pub> dnat to <srv>:<port> }  (*)
    /// }
    /// ```
    ///
    /// (*) only with a server container to publish (not for egress or gateway).
    pub fn ruleset(&self) -> Nftables<'static> {
        let table: Cow<'static, str> = self.table_name().into();
        let mut b = Batch::new();
        b.add(NfListObject::Table(Table {
            family: NfFamily::IP,
            name: table.clone(),
            handle: None,
        }));
        for c in chains(&table) {
            b.add(c);
        }
        let rules = self.masquerade_rules().into_iter().chain(self.dnat_rules());
        for (chain, expr) in rules {
            b.add(NfListObject::Rule(Rule {
                family: NfFamily::IP,
                table: table.clone(),
                chain: chain.into(),
                expr: expr.into(),
                handle: None,
                index: None,
                comment: None,
            }));
        }
        b.to_nftables()
    }

    /// Outbound NAT of the subnet, and the hairpin masquerade of the server reaching itself.
    fn masquerade_rules(&self) -> Vec<(&'static str, Vec<Statement<'static>>)> {
        let (net, plen) = self.subnet;
        let mut rules = vec![(
            "postrouting",
            vec![
                m(field("ip", "saddr"), Operator::EQ, prefix(net, plen)),
                m(
                    meta(MetaKey::Oifname),
                    Operator::NEQ,
                    Expression::String(self.bridge.clone().into()),
                ),
                Statement::Masquerade(None),
            ],
        )];
        if let Some(t) = self.target {
            rules.push((
                "postrouting",
                vec![
                    m(field("ip", "saddr"), Operator::EQ, ip(*t.ip())),
                    m(field("ip", "daddr"), Operator::EQ, ip(*t.ip())),
                    m(
                        field("tcp", "dport"),
                        Operator::EQ,
                        Expression::Number(u32::from(t.port())),
                    ),
                    Statement::Masquerade(None),
                ],
            ));
        }
        rules
    }

    /// The published port: local destinations (from outside, and from the node itself
    /// except loopback) jump to the chain that DNATs it to the server.
    fn dnat_rules(&self) -> Vec<(&'static str, Vec<Statement<'static>>)> {
        let local = || {
            m(
                fib_daddr_type(),
                Operator::EQ,
                Expression::String("local".into()),
            )
        };
        let mut rules = vec![
            ("prerouting", vec![local(), jump(DOCKER_CHAIN)]),
            (
                "output",
                vec![
                    m(
                        field("ip", "daddr"),
                        Operator::NEQ,
                        prefix(Ipv4Addr::new(127, 0, 0, 0), 8),
                    ),
                    local(),
                    jump(DOCKER_CHAIN),
                ],
            ),
        ];
        // Published for TCP and UDP alike (`-p P:P -p P:P/udp`), so `--proto udp` crosses the
        // same DNAT.
        for (l4, t) in ["tcp", "udp"]
            .into_iter()
            .filter_map(|l4| Some((l4, self.target?)))
        {
            rules.push((
                DOCKER_CHAIN,
                vec![
                    m(
                        meta(MetaKey::Iifname),
                        Operator::NEQ,
                        Expression::String(self.bridge.clone().into()),
                    ),
                    m(
                        field(l4, "dport"),
                        Operator::EQ,
                        Expression::Number(u32::from(self.published_port)),
                    ),
                    Statement::DNAT(Some(NAT {
                        addr: Some(ip(*t.ip())),
                        family: None,
                        port: Some(Expression::Number(u32::from(t.port()))),
                        flags: None,
                    })),
                ],
            ));
        }
        rules
    }
}

/// The NAT base chains (like iptables' nat table) and netpath's `np-docker` chain.
fn chains(table: &str) -> Vec<NfListObject<'static>> {
    let chain = |name: &'static str, base: Option<(NfHook, i32)>| {
        NfListObject::Chain(Chain {
            family: NfFamily::IP,
            table: table.to_string().into(),
            name: name.into(),
            newname: None,
            handle: None,
            _type: base.map(|_| NfChainType::NAT),
            hook: base.map(|b| b.0),
            prio: base.map(|b| b.1),
            dev: None,
            policy: base.map(|_| NfChainPolicy::Accept),
        })
    };
    vec![
        chain("postrouting", Some((NfHook::Postrouting, 100))),
        chain("prerouting", Some((NfHook::Prerouting, -100))),
        chain("output", Some((NfHook::Output, -100))),
        chain(DOCKER_CHAIN, None),
    ]
}

pub(crate) fn m(
    left: Expression<'static>,
    op: Operator,
    right: Expression<'static>,
) -> Statement<'static> {
    Statement::Match(Match { left, right, op })
}

pub(crate) fn field(proto: &'static str, f: &'static str) -> Expression<'static> {
    Expression::Named(NamedExpression::Payload(Payload::PayloadField(
        PayloadField {
            protocol: proto.into(),
            field: f.into(),
        },
    )))
}

fn meta(key: MetaKey) -> Expression<'static> {
    Expression::Named(NamedExpression::Meta(Meta { key }))
}

fn ip(a: Ipv4Addr) -> Expression<'static> {
    Expression::String(a.to_string().into())
}

fn prefix(a: Ipv4Addr, len: u8) -> Expression<'static> {
    Expression::Named(NamedExpression::Prefix(Prefix {
        addr: Box::new(ip(a)),
        len: u32::from(len),
    }))
}

fn fib_daddr_type() -> Expression<'static> {
    Expression::Named(NamedExpression::Fib(Fib {
        result: FibResult::Type,
        flags: HashSet::from([FibFlag::Daddr]),
    }))
}

fn jump(target: &'static str) -> Statement<'static> {
    Statement::Jump(JumpTarget {
        target: target.into(),
    })
}

/// Install the rules. Call from a thread inside the node namespace.
pub fn apply_docker_nat(spec: &NatSpec) -> Result<()> {
    let rs = spec.ruleset();
    nftables::helper::apply_ruleset(&rs).map_err(|e| nft_error(e, "applying the NAT table"))
}

/// `nft -j list table ip NAME` in the calling thread's namespace, as JSON text.
pub fn list_table(name: &str) -> Result<String> {
    let args = ["list", "table", "ip", name];
    nftables::helper::get_current_ruleset_raw(nftables::helper::DEFAULT_NFT, &args)
        .map_err(|e| nft_error(e, "listing the NAT table"))
}

pub(crate) fn nft_error(e: NftablesError, what: &str) -> anyhow::Error {
    match e {
        NftablesError::NftExecution { program, inner }
            if inner.kind() == std::io::ErrorKind::NotFound =>
        {
            anyhow!(
                "{what}: {} not found; install nftables (apt-get install nftables)",
                program.to_string_lossy()
            )
        }
        NftablesError::NftFailed { stderr, .. } => {
            anyhow!("{what}: nft failed: {}", stderr.trim())
        }
        other => anyhow!("{what}: {other}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ruleset_json_shape() {
        let spec = NatSpec {
            run_id: "abc123".into(),
            bridge: "npabc123br".into(),
            subnet: (Ipv4Addr::new(10, 213, 5, 0), 24),
            published_port: 18080,
            target: Some(SocketAddrV4::new(Ipv4Addr::new(10, 213, 5, 3), 11111)),
        };
        let j = serde_json::to_string(&spec.ruleset()).unwrap();
        assert!(j.contains("netpath_abc123"), "{j}");
        assert!(j.contains("masquerade"), "{j}");
        assert!(j.contains("dnat"), "{j}");
        assert!(j.contains("10.213.5.3"), "{j}");
        // Without a server container: the outbound masquerade only.
        let j = serde_json::to_string(
            &NatSpec {
                target: None,
                ..spec
            }
            .ruleset(),
        )
        .unwrap();
        assert_eq!(j.matches("masquerade").count(), 1, "{j}");
        assert!(!j.contains("dnat") && !j.contains("10.213.5.3"), "{j}");
    }
}
