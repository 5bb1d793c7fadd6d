//! `validate --rules`' table: `np_val_<run id>`, one filter base chain on the chosen hook of
//! one lab namespace, and the rules no packet of the path matches that go in and out of it.
//! Applied with the `nftables` crate (`nft -j -f -`) from a thread inside that namespace.
use std::borrow::Cow;
use std::net::Ipv4Addr;

use anyhow::{Context as _, Result};
use nftables::batch::Batch;
use nftables::expr::Expression;
use nftables::schema::{Chain as NftChain, FlushObject, NfCmd, NfListObject, Rule, Table};
use nftables::stmt::{Counter, Operator, Statement};
use nftables::types::{NfChainPolicy, NfChainType, NfFamily, NfHook as NftHook};

use serde::Serialize;

use crate::lab::nft::{field, m, nft_error};
use crate::path::{NetPath, parts::NfHook};
use crate::sys::netns::Netns;

/// Where the rules go.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, clap::ValueEnum, schemars::JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum Chain {
    /// The client namespace's OUTPUT: requests, in `sender-stack`.
    ClientOutput,
    /// The server namespace's INPUT: requests, in `receiver-stack`.
    ServerInput,
    /// The node namespace's FORWARD: both directions, in `bridge` (bridged packets reach
    /// it only with br_netfilter's `bridge-nf-call-iptables` on in that namespace).
    NodeForward,
}

impl Chain {
    /// As `--chain` spells it.
    pub fn name(self) -> &'static str {
        match self {
            Chain::ClientOutput => "client-output",
            Chain::ServerInput => "server-input",
            Chain::NodeForward => "node-forward",
        }
    }

    pub fn hook(self) -> NfHook {
        match self {
            Chain::ClientOutput => NfHook::Output,
            Chain::ServerInput => NfHook::Input,
            Chain::NodeForward => NfHook::Forward,
        }
    }

    fn nft_hook(self) -> NftHook {
        match self {
            Chain::ClientOutput => NftHook::Output,
            Chain::ServerInput => NftHook::Input,
            Chain::NodeForward => NftHook::Forward,
        }
    }

    /// The directions whose packets cross the chain and the hop its part must lie in.
    pub fn expect(self) -> (&'static [&'static str], &'static str) {
        match self {
            Chain::ClientOutput => (&["request"], "sender-stack"),
            Chain::ServerInput => (&["request"], "receiver-stack"),
            Chain::NodeForward => (&["request", "response"], "bridge"),
        }
    }

    /// The lab namespace the chain goes in: the lab's own (deleted at teardown), never the
    /// host's; None with the reason this lab has no such case.
    pub(super) fn netns(self, path: &NetPath) -> std::result::Result<Netns, String> {
        match self {
            Chain::ClientOutput => Ok(path.client_ns.clone()),
            Chain::ServerInput => Ok(path.server_ns.clone()),
            Chain::NodeForward => {
                let Some(node) = path.node_ns.clone() else {
                    return Err(format!("{} has no node namespace", path.driver));
                };
                let bridged = path
                    .devices
                    .iter()
                    .any(|d| d.netns == node.name && d.kind == netpath_common::DevKind::BridgePort);
                if bridged && !br_netfilter_on(&node) {
                    return Err(format!(
                        "{}'s packets are bridged in {} and br_netfilter does not pass them to \
                         the IP hooks there (net.bridge.bridge-nf-call-iptables is not 1: \
                         modprobe br_netfilter)",
                        path.driver, node.name
                    ));
                }
                Ok(node)
            }
        }
    }
}

/// Whether bridged IPv4 packets in `ns` traverse the IP hooks (the sysctl is per namespace
/// and exists only while br_netfilter is loaded).
fn br_netfilter_on(ns: &Netns) -> bool {
    ns.run(|| crate::sys::netns::read_sysctl("net.bridge.bridge-nf-call-iptables"))
        .is_ok_and(|v| v.trim() == "1")
}

/// The table, its chain and the namespace they are in.
pub(super) struct Place {
    pub ns: Netns,
    pub table: String,
    pub chain: Chain,
}

impl Place {
    fn chain_name(&self) -> &'static str {
        match self.chain {
            Chain::ClientOutput => "output",
            Chain::ServerInput => "input",
            Chain::NodeForward => "forward",
        }
    }

    pub(super) fn part(&self) -> String {
        format!("{}/{}", self.table, self.chain_name())
    }

    fn nft_chain(&self) -> NftChain<'static> {
        NftChain {
            family: NfFamily::IP,
            table: Cow::Owned(self.table.clone()),
            name: self.chain_name().into(),
            newname: None,
            handle: None,
            _type: Some(NfChainType::Filter),
            hook: Some(self.chain.nft_hook()),
            // filter's priority: apart from the lab's NAT chains (dstnat −100, srcnat 100),
            // so the part is this chain alone.
            prio: Some(0),
            dev: None,
            policy: Some(NfChainPolicy::Accept),
        }
    }

    fn nft_table(&self) -> NfListObject<'static> {
        NfListObject::Table(Table {
            family: NfFamily::IP,
            name: Cow::Owned(self.table.clone()),
            handle: None,
        })
    }

    fn apply(&self, b: Batch<'static>, what: &str) -> Result<()> {
        let doc = b.to_nftables();
        self.ns
            .run(|| nftables::helper::apply_ruleset(&doc).map_err(|e| nft_error(e, what)))
            .with_context(|| format!("{what} in {}", self.ns.name))
    }

    pub(super) fn create(&self) -> Result<()> {
        let mut b = Batch::new();
        b.add(self.nft_table());
        b.add(NfListObject::Chain(self.nft_chain()));
        self.apply(b, "adding netpath's validation table")
    }

    /// The chain emptied, then `n` rules added: one `nft` transaction.
    pub(super) fn set_rules(&self, n: usize) -> Result<()> {
        let mut b = Batch::new();
        b.add_cmd(NfCmd::Flush(FlushObject::Chain(self.nft_chain())));
        for i in 0..n {
            b.add(NfListObject::Rule(Rule {
                family: NfFamily::IP,
                table: Cow::Owned(self.table.clone()),
                chain: self.chain_name().into(),
                expr: rule(i).into(),
                handle: None,
                index: None,
                comment: None,
            }));
        }
        self.apply(b, "setting the validation rules")
    }

    pub(super) fn delete(&self) -> Result<()> {
        let mut b = Batch::new();
        b.delete(self.nft_table());
        self.apply(b, "deleting netpath's validation table")
    }
}

/// Rule `i`: `ip daddr 192.0.2.<1..254> tcp dport <1..> counter`, each one different, none
/// matching (TEST-NET-1 is documentation only). The address is compared first, so every rule
/// costs the packet one payload load and compare.
fn rule(i: usize) -> Vec<Statement<'static>> {
    let addr = Ipv4Addr::new(192, 0, 2, (1 + i % 254) as u8);
    vec![
        m(
            field("ip", "daddr"),
            Operator::EQ,
            Expression::String(addr.to_string().into()),
        ),
        m(
            field("tcp", "dport"),
            Operator::EQ,
            Expression::Number((1 + i / 254) as u32),
        ),
        Statement::Counter(Counter::Anonymous(None)),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rules_differ_and_match_nothing_on_a_path() {
        let json = |i| serde_json::to_string(&rule(i)).unwrap();
        assert!(json(0).contains("192.0.2.1") && json(0).contains("counter"));
        assert!(json(253).contains("192.0.2.254"), "{}", json(253));
        // Past 254 addresses the port changes instead: no two rules alike.
        assert!(json(254).contains("192.0.2.1") && json(254).contains("\"right\":2"));
        assert_ne!(json(1), json(255));
    }
}
