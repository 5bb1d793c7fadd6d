//! Where the netfilter parts of a path are: the base chains each of its namespaces has on each
//! IPv4 hook, read from the live ruleset (`nft -j list ruleset`, which shows iptables-nft's
//! tables too), grouped by priority, with a boundary before each group and after the last.
//! A packet meets the boundaries of a hook in priority order, so the time from one to the next
//! is the group between them: a part.
//!
//! Conntrack has no chain in the ruleset; a namespace with a `nat` chain has it (NAT needs it),
//! at its fixed priority (-200) on PREROUTING and OUTPUT, so it gets a part of its own there.
//! Hooks of other kernel users (defrag, SELinux, IPVS) are not listed and fall inside the
//! part around them.
use std::collections::{BTreeMap, BTreeSet};

use anyhow::{Context as _, Result};
use netpath_common::NF_BOUNDS;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::NetPath;
use crate::sys::netns::Netns;

/// The IPv4 netfilter hooks, as their `NF_INET_*` numbers.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "UPPERCASE")]
pub enum NfHook {
    Prerouting = 0,
    Input = 1,
    Forward = 2,
    Output = 3,
    Postrouting = 4,
    /// Not a netfilter hook: a device's transmit qdisc (`dev_queue` to `start_xmit`), a part
    /// of `--parts` too. Never linked.
    Qdisc = 5,
}

impl NfHook {
    fn parse(s: &str) -> Option<NfHook> {
        Some(match s {
            "prerouting" => NfHook::Prerouting,
            "input" => NfHook::Input,
            "forward" => NfHook::Forward,
            "output" => NfHook::Output,
            "postrouting" => NfHook::Postrouting,
            _ => return None,
        })
    }

    pub fn name(self) -> &'static str {
        match self {
            NfHook::Prerouting => "PREROUTING",
            NfHook::Input => "INPUT",
            NfHook::Forward => "FORWARD",
            NfHook::Output => "OUTPUT",
            NfHook::Postrouting => "POSTROUTING",
            NfHook::Qdisc => "qdisc",
        }
    }
}

/// `NF_IP_PRI_CONNTRACK`.
const CONNTRACK_PRIO: i32 = -200;

/// A base chain as the ruleset lists it, with the rules it runs (its own and those of the
/// regular chains it jumps or goes to).
#[derive(Clone, Debug, PartialEq)]
pub struct BaseChain {
    pub table: String,
    pub chain: String,
    pub hook: NfHook,
    pub prio: i32,
    pub rules: usize,
    /// The regular chains it reaches through jumps and gotos, each with its own rules.
    pub reached: Vec<ChainRules>,
}

/// A regular chain a part's base chain reaches, and the rules it holds itself.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ChainRules {
    pub chain: String,
    pub rules: usize,
}

/// One part: the chains of one priority group on one hook of one namespace.
#[derive(Clone, Debug, Serialize, Deserialize, schemars::JsonSchema)]
pub struct PartPlace {
    /// `table/chain` (several chains at one priority joined with `+`), or `conntrack`.
    pub name: String,
    pub netns: String,
    pub hook: NfHook,
    /// The boundaries' priorities: the part runs every hook entry between them.
    pub prio_from: i32,
    pub prio_to: i32,
    /// Rules the part's chains hold, counted through jumps and gotos.
    pub rules: usize,
    /// The regular chains its base chains reach (`DOCKER-USER`, …): inside the part, not
    /// timed apart from it.
    #[serde(default)]
    pub reached: Vec<ChainRules>,
    /// A qdisc part's device (empty for a netfilter part).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub device: String,
}

/// A program's place: boundary `k` on `hook` at `priority`.
#[derive(Clone, Copy, Debug)]
pub struct Boundary {
    pub k: usize,
    pub hook: NfHook,
    pub priority: i32,
}

/// The boundaries of a path and the part each one starts (`None`: the last of its hook).
#[derive(Default)]
pub struct Placement {
    pub bounds: Vec<(Netns, Boundary)>,
    pub parts: BTreeMap<usize, PartPlace>,
    /// Parts left out: more than `NF_BOUNDS` boundaries.
    pub left_out: usize,
    /// The parts that hold a `nat` chain (by boundary).
    pub nat: BTreeSet<usize>,
    /// The root qdisc of each device of the path: the qdisc parts' names.
    pub qdiscs: Vec<super::qdisc::Qdisc>,
}

/// The namespaces a path's packets cross: those it holds, its node's, and netpath's own where
/// one of its devices is (a Docker bridge's `docker0` and host-side veths, whose FORWARD and
/// `DOCKER-USER` are the host's). A device in a namespace netpath can reach by none of these
/// is left out.
pub fn namespaces(path: &NetPath) -> Result<Vec<Netns>> {
    let mut out = path.namespaces();
    out.extend(path.node_ns.clone());
    let own = crate::sys::netns::current_inum()?;
    if path.devices.iter().any(|d| d.netns_inum == own) {
        let name = (path.devices.iter())
            .find(|d| d.netns_inum == own)
            .map_or("host".to_string(), |d| d.netns.clone());
        out.push(Netns::at(&name, std::path::Path::new("/proc/self/ns/net"))?);
    }
    let mut seen = BTreeSet::new();
    out.retain(|n| seen.insert(n.inum));
    Ok(out)
}

/// The parts of `path`: its namespaces' boundaries placed, and its devices' qdiscs read.
pub fn of_path(path: &NetPath) -> Result<Placement> {
    let namespaces = namespaces(path)?;
    let mut out = place(&namespaces)?;
    out.qdiscs = super::qdisc::read(path, &namespaces)?;
    Ok(out)
}

/// Reads each namespace's ruleset and places the boundaries.
pub fn place(namespaces: &[Netns]) -> Result<Placement> {
    let mut out = Placement::default();
    for ns in namespaces {
        let json = ns
            .run(|| {
                let args = ["list", "ruleset"];
                nftables::helper::get_current_ruleset_raw(nftables::helper::DEFAULT_NFT, &args)
                    .map_err(|e| anyhow::anyhow!("nft -j list ruleset: {e}"))
            })
            .with_context(|| format!("the netfilter ruleset of {}", ns.name))?;
        let chains = base_chains(&serde_json::from_str(&json)?);
        for (hook, groups) in groups(&chains) {
            add_hook(&mut out, ns, hook, &groups);
        }
    }
    Ok(out)
}

/// Adds one hook's boundaries and parts, unless they would pass `NF_BOUNDS`.
fn add_hook(out: &mut Placement, ns: &Netns, hook: NfHook, groups: &[Group]) {
    let prios = boundary_prios(groups);
    let k0 = out.bounds.len();
    if k0 + prios.len() > NF_BOUNDS {
        out.left_out += groups.len();
        return;
    }
    for (i, &priority) in prios.iter().enumerate() {
        let k = k0 + i;
        out.bounds
            .push((ns.clone(), Boundary { k, hook, priority }));
        if let Some(g) = groups.get(i) {
            let part = PartPlace {
                name: g.name.clone(),
                netns: ns.name.clone(),
                hook,
                prio_from: priority,
                prio_to: prios[i + 1],
                rules: g.rules,
                reached: g.reached.clone(),
                device: String::new(),
            };
            out.parts.insert(k, part);
            if g.nat {
                out.nat.insert(k);
            }
        }
    }
}

/// Chains of one priority on one hook (of a few adjacent ones, once merged).
#[derive(Clone, Debug, PartialEq)]
struct Group {
    prio: i32,
    /// The highest priority in the group (`prio` until groups merge).
    last: i32,
    name: String,
    rules: usize,
    reached: Vec<ChainRules>,
    /// A `nat` chain is in it (what the chain probes time as NAT's whole hook entry).
    nat: bool,
}

/// Per hook, the groups in priority order; conntrack added where a `nat` chain needs it.
fn groups(chains: &[(BaseChain, bool)]) -> BTreeMap<NfHook, Vec<Group>> {
    let mut by: BTreeMap<NfHook, BTreeMap<i32, Group>> = BTreeMap::new();
    let mut add = |hook, prio, name: &str, rules, reached: &[ChainRules], nat: bool| {
        let g = by.entry(hook).or_default().entry(prio).or_insert(Group {
            prio,
            last: prio,
            name: String::new(),
            rules: 0,
            reached: Vec::new(),
            nat: false,
        });
        g.nat |= nat;
        g.reached.extend_from_slice(reached);
        if !g.name.is_empty() {
            g.name.push('+');
        }
        g.name.push_str(name);
        g.rules += rules;
    };
    for (c, nat) in chains {
        let name = format!("{}/{}", c.table, c.chain);
        add(c.hook, c.prio, &name, c.rules, &c.reached, *nat);
    }
    if chains.iter().any(|(_, nat)| *nat) {
        for hook in [NfHook::Prerouting, NfHook::Output] {
            add(hook, CONNTRACK_PRIO, "conntrack", 0, &[], false);
        }
    }
    by.into_iter()
        .map(|(h, g)| (h, merge_adjacent(g.into_values().collect())))
        .collect()
}

/// Groups one priority apart have no room for a boundary between them: one part.
fn merge_adjacent(groups: Vec<Group>) -> Vec<Group> {
    let mut out: Vec<Group> = Vec::new();
    for g in groups {
        match out.last_mut() {
            Some(last) if g.prio as i64 - (last.last as i64) < 2 => {
                last.name = format!("{}+{}", last.name, g.name);
                last.rules += g.rules;
                last.reached.extend(g.reached);
                last.last = g.last;
                last.nat |= g.nat;
            }
            _ => out.push(g),
        }
    }
    out
}

/// One boundary before each group (midway from the previous one) and one after the last.
/// The kernel refuses a link at `i32::MIN` or `i32::MAX`, so a chain there is bracketed on
/// one side only (conntrack's confirm, at `i32::MAX`, is not placed).
fn boundary_prios(groups: &[Group]) -> Vec<i32> {
    let mut out = Vec::with_capacity(groups.len() + 1);
    let mut prev: Option<i32> = None;
    for g in groups {
        out.push(match prev {
            None => g.prio.saturating_sub(1).max(i32::MIN + 1),
            Some(p) => ((p as i64 + g.prio as i64) / 2) as i32,
        });
        prev = Some(g.last);
    }
    if let Some(p) = prev {
        out.push(p.saturating_add(1).min(i32::MAX - 1));
    }
    out
}

/// The IPv4 base chains (`ip` and `inet` tables) of a ruleset, each with whether it is a
/// `nat` chain; rules counted through jumps and gotos into regular chains.
pub fn base_chains(ruleset: &Value) -> Vec<(BaseChain, bool)> {
    let objects = ruleset["nftables"].as_array().cloned().unwrap_or_default();
    let ipv4 = |o: &Value| matches!(o["family"].as_str(), Some("ip" | "inet"));
    let mut rules: BTreeMap<(String, String), (usize, Vec<String>)> = BTreeMap::new();
    for r in objects
        .iter()
        .filter_map(|o| o.get("rule"))
        .filter(|r| ipv4(r))
    {
        let key = (str_of(r, "table"), str_of(r, "chain"));
        let e = rules.entry(key).or_default();
        e.0 += 1;
        e.1.extend(jumps(&r["expr"]));
    }
    // The base chain's own rules, and the chains it reaches in the order first reached.
    let count = |table: &str, chain: &str| -> (usize, Vec<ChainRules>) {
        let own = |c: &str| rules.get(&(table.to_string(), c.to_string()));
        let mut seen = BTreeSet::from([chain.to_string()]);
        let mut todo: Vec<String> = own(chain).map(|e| e.1.clone()).unwrap_or_default();
        todo.reverse();
        let mut reached = Vec::new();
        while let Some(c) = todo.pop() {
            if !seen.insert(c.clone()) {
                continue;
            }
            let (n, to) = own(&c).cloned().unwrap_or_default();
            reached.push(ChainRules { chain: c, rules: n });
            todo.extend(to.into_iter().rev());
        }
        let n = own(chain).map_or(0, |e| e.0);
        (n + reached.iter().map(|c| c.rules).sum::<usize>(), reached)
    };
    let chains = objects
        .iter()
        .filter_map(|o| o.get("chain"))
        .filter(|c| ipv4(c));
    chains
        .filter_map(|c| {
            let hook = NfHook::parse(c["hook"].as_str()?)?;
            let (table, chain) = (str_of(c, "table"), str_of(c, "name"));
            let (rules, reached) = count(&table, &chain);
            let b = BaseChain {
                rules,
                reached,
                prio: c["prio"].as_i64()? as i32,
                hook,
                table,
                chain,
            };
            Some((b, c["type"].as_str() == Some("nat")))
        })
        .collect()
}

fn str_of(v: &Value, key: &str) -> String {
    v[key].as_str().unwrap_or_default().to_string()
}

/// Chains a rule's statements jump or go to.
fn jumps(expr: &Value) -> Vec<String> {
    let mut out = Vec::new();
    for s in expr.as_array().into_iter().flatten() {
        for verb in ["jump", "goto"] {
            if let Some(t) = s[verb]["target"].as_str() {
                out.push(t.to_string());
            }
        }
    }
    out
}

#[cfg(test)]
mod tests;
