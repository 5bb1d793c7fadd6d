//! Chain probes: `--parts` where the kernel has no netfilter programs (before 6.4) but has
//! kprobes. A kprobe on `nft_do_chain(struct nft_pktinfo *pkt, void *priv)` (priv: the
//! `struct nft_chain *`) and a kretprobe on its return time each base chain's evaluation of a
//! followed packet; the time goes to the part the loader placed that chain in (looked up by
//! namespace, hook, table and chain name in `NFT_CHAIN_PARTS`), in the same `NF_PARTS`
//! histograms the boundary programs fill. Conntrack (`nf_conntrack_in`) and NAT
//! (`nf_nat_inet_fn`, which runs the NAT chains only for a new connection) are timed the same
//! way as whole hook entries. Unlike the boundaries, this times those functions only: any
//! other hook entry of the group (defrag, another kernel user) is not in it.
//!
//! nf_tables' struct offsets are not the vmlinux ones: the loader reads them from the module's
//! BTF (`LoadConfig::nft`).
use aya_ebpf::{
    helpers::{bpf_ktime_get_ns, bpf_probe_read_kernel, bpf_probe_read_kernel_str_bytes},
    macros::{kprobe, kretprobe, map},
    maps::{HashMap, PerCpuArray},
    programs::{ProbeContext, RetProbeContext},
};
use netpath_common::{NF_BOUNDS, NftChainKey, config::NFT_NAME_BYTES};

use super::netfilter::{add, followed, keep};
use crate::config::conf;

/// A base chain of the placement → the boundary `k` its part starts at (userspace fills it
/// when it links the parts).
#[map]
static NFT_CHAIN_PARTS: HashMap<NftChainKey, u32> =
    HashMap::with_max_entries(NF_BOUNDS as u32 * 4, 0);

/// Per CPU and probed function (`CHAIN`, `CONNTRACK`, `NAT`): the call under way,
/// `[state, skb, k, t]`. A kretprobe has no arguments, so the call it closes is the one its
/// CPU opened of that function.
#[map]
static NFT_CALL: PerCpuArray<[u64; 4]> = PerCpuArray::with_max_entries(3, 0);

/// The probed functions. Conntrack and NAT are hook entries of their own, not chains: they
/// are looked up by a key whose table name starts with `0xff` (never in a UTF-8 name) and
/// their slot number. `nf_nat_inet_fn` runs the NAT chains of a new connection inside it:
/// those calls are left to it (NAT's part is the whole entry, as the boundaries time it).
const CHAIN: u32 = 0;
const CONNTRACK: u32 = 1;
const NAT: u32 = 2;

/// `NFT_CALL` states: no call; a call not timed (not followed, not placed); a followed call
/// being timed; a call that began inside another of the same function (nested, or an exit
/// was missed): the next exit drops the slot rather than guess which call it ends.
const FREE: u64 = 0;
const BUSY: u64 = 1;
const TIMED: u64 = 2;
const NESTED: u64 = 3;

// nft_do_chain(struct nft_pktinfo *pkt, void *priv): priv is the chain.
#[kprobe]
pub fn kp_nft_chain_in(ctx: ProbeContext) -> u32 {
    let pkt = ctx.arg::<u64>(0).unwrap_or(0);
    let chain = ctx.arg::<u64>(1).unwrap_or(0);
    if !inside_nat() {
        let skb = read(pkt, conf!(nft.pkt_skb)).unwrap_or(0);
        let state = read(pkt, conf!(nft.pkt_state)).unwrap_or(0);
        let _ = try_enter(CHAIN, skb, state, chain);
    }
    0
}

#[kretprobe]
pub fn kp_nft_chain_out(_ctx: RetProbeContext) -> u32 {
    let _ = try_exit(CHAIN);
    0
}

// nf_conntrack_in(struct sk_buff *skb, const struct nf_hook_state *state)
#[kprobe]
pub fn kp_nf_ct_in(ctx: ProbeContext) -> u32 {
    let skb = ctx.arg::<u64>(0).unwrap_or(0);
    let state = ctx.arg::<u64>(1).unwrap_or(0);
    let _ = try_enter(CONNTRACK, skb, state, 0);
    0
}

#[kretprobe]
pub fn kp_nf_ct_out(_ctx: RetProbeContext) -> u32 {
    let _ = try_exit(CONNTRACK);
    0
}

// nf_nat_inet_fn(void *priv, struct sk_buff *skb, const struct nf_hook_state *state)
#[kprobe]
pub fn kp_nf_nat_in(ctx: ProbeContext) -> u32 {
    let skb = ctx.arg::<u64>(1).unwrap_or(0);
    let state = ctx.arg::<u64>(2).unwrap_or(0);
    let _ = try_enter(NAT, skb, state, 0);
    0
}

#[kretprobe]
pub fn kp_nf_nat_out(_ctx: RetProbeContext) -> u32 {
    let _ = try_exit(NAT);
    0
}

/// Whether this CPU is inside `nf_nat_inet_fn` (its chain calls belong to NAT's part).
#[inline(always)]
fn inside_nat() -> bool {
    NFT_CALL
        .get_ptr(NAT)
        .is_some_and(|s| unsafe { (*s)[0] } != FREE)
}

#[inline(always)]
fn try_enter(i: u32, skb: u64, state: u64, chain: u64) -> Option<()> {
    let t = unsafe { bpf_ktime_get_ns() };
    let slot = unsafe { &mut *NFT_CALL.get_ptr_mut(i)? };
    if slot[0] != FREE {
        slot[0] = NESTED;
        return None;
    }
    slot[0] = BUSY;
    let (_, _, mark) = followed(skb)?;
    let k = part_of(i, state, chain)? as u64;
    keep(mark, skb, k, t);
    *slot = [TIMED, skb, k, t];
    Some(())
}

#[inline(always)]
fn try_exit(i: u32) -> Option<()> {
    let t = unsafe { bpf_ktime_get_ns() };
    let slot = unsafe { &mut *NFT_CALL.get_ptr_mut(i)? };
    let [state, skb, k, t0] = *slot;
    slot[0] = FREE;
    if state != TIMED {
        return None;
    }
    let (dir, at, mark) = followed(skb)?;
    // The part ends where the next boundary would have been: `annotate` pairs k with k + 1.
    keep(mark, skb, k + 1, t);
    add(k, dir, at, t.wrapping_sub(t0))
}

/// The placed part of a call of function `i` on hook `state` (`nf_hook_state *`): a chain's
/// by its namespace, hook and names as the kernel holds them, conntrack's or NAT's by
/// namespace and hook.
#[inline(always)]
fn part_of(i: u32, state: u64, chain: u64) -> Option<u32> {
    let hook: u8 = read(state, conf!(nft.state_hook))?;
    let net: u64 = read(state, conf!(nft.state_net))?;
    let mut key = NftChainKey {
        netns: read(net, conf!(offsets.net_ns_inum))?,
        hook: hook as u32,
        table: [0; NFT_NAME_BYTES],
        chain: [0; NFT_NAME_BYTES],
    };
    if i == CHAIN {
        let name: u64 = read(chain, conf!(nft.chain_name))?;
        unsafe { bpf_probe_read_kernel_str_bytes(name as *const u8, &mut key.chain) }.ok()?;
        let table: u64 = read(chain, conf!(nft.chain_table))?;
        let tname: u64 = read(table, conf!(nft.table_name))?;
        unsafe { bpf_probe_read_kernel_str_bytes(tname as *const u8, &mut key.table) }.ok()?;
    } else {
        key.table[0] = 0xff;
        key.table[1] = i as u8;
    }
    unsafe { NFT_CHAIN_PARTS.get(key) }.copied()
}

#[inline(always)]
fn read<T>(base: u64, off: u32) -> Option<T> {
    if base == 0 {
        return None;
    }
    unsafe { bpf_probe_read_kernel((base + off as u64) as *const T) }.ok()
}
