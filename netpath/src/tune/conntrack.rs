//! `--knob conntrack`: notrack rules for the path's traffic in netpath's own nft table on the
//! node, or the default (every packet through conntrack, which the table's NAT chains turn on
//! in that namespace). Two chains at the `raw` priority (before conntrack looks at a packet)
//! match the lab server's port both ways, in prerouting and in output; restoring deletes
//! them. Read back: the table's notrack rules, and the node's `nf_conntrack_count` (connections
//! conntrack holds there: with notrack, the path's connection is not among them).

use std::borrow::Cow;

use anyhow::{Context, Result};
use nftables::batch::Batch;
use nftables::expr::Expression;
use nftables::schema::{Chain, NfListObject, Rule};
use nftables::stmt::{Operator, Statement};
use nftables::types::{NfChainPolicy, NfChainType, NfFamily, NfHook};

use super::readback::ReadBack;
use crate::lab::LAB_PORT;
use crate::lab::nft::{field, m, nft_error};
use crate::path::NetPath;
use crate::sys::netns::Netns;

/// `raw` priority of nftables (NF_IP_PRI_RAW): before conntrack (-200).
const RAW: i32 = -300;
const CHAINS: [(&str, NfHook); 2] = [
    ("np-notrack-pre", NfHook::Prerouting),
    ("np-notrack-out", NfHook::Output),
];

/// The node's namespace and netpath's table there.
pub fn node_table(path: &NetPath) -> Result<(Netns, String)> {
    let ns = path
        .node_ns
        .clone()
        .context("this lab has no node namespace")?;
    let table = path
        .nft_table
        .clone()
        .context("this lab has no nft table of netpath's")?;
    Ok((ns, table))
}

fn chain(table: &str, name: &'static str, hook: NfHook) -> NfListObject<'static> {
    NfListObject::Chain(Chain {
        family: NfFamily::IP,
        table: Cow::Owned(table.to_string()),
        name: name.into(),
        newname: None,
        handle: None,
        _type: Some(NfChainType::Filter),
        hook: Some(hook),
        prio: Some(RAW),
        dev: None,
        policy: Some(NfChainPolicy::Accept),
    })
}

/// Adds the notrack chains (call on a thread inside the node namespace).
fn add(table: &str) -> Result<()> {
    let mut b = Batch::new();
    for (name, hook) in CHAINS {
        b.add(chain(table, name, hook));
        for dir in ["dport", "sport"] {
            b.add(NfListObject::Rule(Rule {
                family: NfFamily::IP,
                table: Cow::Owned(table.to_string()),
                chain: name.into(),
                expr: vec![
                    m(
                        field("tcp", dir),
                        Operator::EQ,
                        Expression::Number(u32::from(LAB_PORT)),
                    ),
                    Statement::Notrack,
                ]
                .into(),
                handle: None,
                index: None,
                comment: None,
            }));
        }
    }
    // nftables 0.6 writes the notrack statement as the string "notrack"; nft's JSON parser
    // wants it as an object, `{"notrack": null}`.
    let mut v = serde_json::to_value(b.to_nftables())?;
    fix_notrack(&mut v);
    let none: [&str; 0] = [];
    nftables::helper::apply_ruleset_raw(&v.to_string(), nftables::helper::DEFAULT_NFT, none)
        .map(|_| ())
        .map_err(|e| nft_error(e, "adding the notrack chains"))
}

fn fix_notrack(v: &mut serde_json::Value) {
    match v {
        serde_json::Value::String(s) if s == "notrack" => {
            *v = serde_json::json!({ "notrack": null });
        }
        serde_json::Value::Array(a) => a.iter_mut().for_each(fix_notrack),
        serde_json::Value::Object(o) => o.values_mut().for_each(fix_notrack),
        _ => {}
    }
}

/// Deletes them again.
fn delete(table: &str) -> Result<()> {
    let mut b = Batch::new();
    for (name, hook) in CHAINS {
        b.delete(chain(table, name, hook));
    }
    nftables::helper::apply_ruleset(&b.to_nftables())
        .map_err(|e| nft_error(e, "deleting the notrack chains"))
}

/// The table's notrack rules and the node's conntrack count.
pub fn read(ns: &Netns, table: &str) -> Result<Vec<ReadBack>> {
    let t = table.to_string();
    let (rules, count) = ns
        .run(move || {
            let listing = crate::lab::nft::list_table(&t)?;
            let count = crate::sys::netns::read_sysctl("net.netfilter.nf_conntrack_count")
                .unwrap_or_else(|_| "unknown".into());
            Ok((listing.matches("\"notrack\"").count(), count))
        })
        .with_context(|| format!("reading netpath's table in {}", ns.name))?;
    let rb = |what: &str, value: String| ReadBack {
        netns: ns.name.clone(),
        device: table.to_string(),
        what: what.to_string(),
        value,
    };
    Ok(vec![
        rb("notrack rules", rules.to_string()),
        rb("nf_conntrack_count", count),
    ])
}

/// Sets `track` (true: the default, nothing to add; false: the notrack chains); returns the
/// read-back before and after, and whether there is something to restore.
pub fn apply(path: &NetPath, track: bool) -> Result<(Vec<ReadBack>, Vec<ReadBack>, bool)> {
    let (ns, table) = node_table(path)?;
    let before = read(&ns, &table)?;
    if !track {
        let t = table.clone();
        ns.run(move || add(&t))
            .with_context(|| format!("in {}", ns.name))?;
    }
    let after = read(&ns, &table)?;
    let want = if track { "0" } else { "4" };
    if after[0].value != want {
        let _ = restore(path, !track);
        anyhow::bail!("set conntrack, but the kernel shows {}", after[0].line());
    }
    Ok((before, after, !track))
}

/// Removes the notrack chains when `added`; reads back.
pub fn restore(path: &NetPath, added: bool) -> Result<Vec<ReadBack>> {
    let (ns, table) = node_table(path)?;
    if added {
        let t = table.clone();
        ns.run(move || delete(&t))
            .with_context(|| format!("in {}", ns.name))?;
    }
    read(&ns, &table)
}
