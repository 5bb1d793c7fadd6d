//! Netfilter programs (`BPF_PROG_TYPE_NETFILTER`, kernel 6.4+): the loader links one at each
//! boundary it places around the base chains of a hook the path crosses (a table's chains,
//! conntrack). A hook runs its entries one after another on one CPU, so the time from one
//! boundary's stamp to the next one's, on the same packet, is the part between them.
//!
//! aya 0.14 knows no netfilter program type: these sit in `socket/…` sections, which aya parses
//! and never loads; `netpath/src/probe/tracer/netfilter.rs` loads them with the netfilter type itself.
//! Each boundary is its own program because a netfilter program cannot learn which link ran
//! it (no attach cookie): the boundary's number is a constant of its program.
use aya_ebpf::helpers::bpf_probe_read_kernel;
use netpath_common::{NF_BOUNDS, PART_AT_SEND, ROLE_RELAY, ROLE_SERVER, hist, part_at};

use crate::{
    flights,
    maps::*,
    state::current_tid,
    tids::{maybe_traced, state},
};

/// `struct bpf_nf_ctx`, the context the verifier lets a netfilter program read, at the
/// constant offsets it checks (`nf_is_valid_access`); the loader compares them with the
/// kernel's BTF before it loads these programs.
#[repr(C)]
#[allow(dead_code)] // `state` is never read, only the layout matters
struct NfCtx {
    state: u64,
    skb: u64,
}

/// `NF_ACCEPT`: a boundary only watches.
const ACCEPT: i32 = 1;

#[inline(always)]
fn stamp(ctx: *const NfCtx, k: u64) -> i32 {
    let _ = try_stamp(ctx, k);
    ACCEPT
}

#[inline(always)]
fn try_stamp(ctx: *const NfCtx, k: u64) -> Option<()> {
    let t = unsafe { aya_ebpf::helpers::bpf_ktime_get_ns() };
    // Read, not loaded: a load gives the verifier's typed skb pointer, which may not be hashed
    // (multiplied) into a flight slot; the read gives its address as a number.
    let skb: u64 = unsafe { bpf_probe_read_kernel(&raw const (*ctx).skb) }.ok()?;
    let last = NF_LAST.get_ptr_mut(0)?;
    let (prev_skb, prev_ts, prev_k) = unsafe { ((*last)[0], (*last)[1], (*last)[2]) };
    unsafe { *last = [skb, t, k] };
    let (dir, at, mark) = followed(skb)?;
    keep(mark, skb, k, t);
    if prev_skb != skb || prev_k >= NF_BOUNDS as u64 {
        return None;
    }
    add(prev_k, dir, at, t.wrapping_sub(prev_ts))
}

/// Keeps boundary `k`, crossed at `t`, in a sampled journey's record (or its pending send's).
#[inline(always)]
pub(crate) fn keep(mark: Mark, skb: u64, k: u64, t: u64) {
    if let Mark::Pending(tid, send_ts) = mark {
        crate::nfmarks::push(tid, send_ts, k, t);
    } else if mark == Mark::Sampled {
        crate::nfmarks::mark(skb, k, t);
    }
}

/// Adds `d` ns to the part that starts at boundary `k`, direction `dir`.
#[inline(always)]
pub(crate) fn add(k: u64, dir: u32, at: u64, d: u64) -> Option<()> {
    let h = NF_PARTS.get_ptr_mut(k as u32 * 2 + dir)?;
    let b = hist::bucket(d) as usize & (hist::HIST_SLOTS - 1);
    unsafe {
        (*h).sum_ns += d;
        (*h).at = at;
        (*h).buckets[b] += 1;
    }
    Some(())
}

/// How a boundary is kept in a sampled journey's record.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mark {
    /// Not sampled.
    No,
    /// In the record, now.
    Sampled,
    /// A send not yet at its first device (thread, send start): kept until its record begins.
    Pending(u32, u64),
}

/// Whether `skb` is a packet netpath follows: its direction, where it is (`PartHist::at`) and
/// how its boundaries are marked.
/// A send's skb is followed from its first device, so one still in the sending namespace's
/// stack is known by its thread: a traced thread with a send under way.
#[inline(always)]
pub(crate) fn followed(skb: u64) -> Option<(u32, u64, Mark)> {
    if let Some(f) = flights::get(skb) {
        let f = unsafe { &*f };
        let mark = if f.sampled() { Mark::Sampled } else { Mark::No };
        return Some((f.dir as u32 & 1, part_at(f.last_point, f.last_kind), mark));
    }
    let tid = current_tid();
    if !maybe_traced(tid) {
        return None;
    }
    let ts = state(tid)?;
    if ts.send_ts == 0 {
        return None;
    }
    let dir = match ts.role {
        ROLE_SERVER => 1,
        ROLE_RELAY => ts.origin_dir & 1,
        _ => 0,
    };
    Some((dir, PART_AT_SEND, Mark::Pending(tid, ts.send_ts)))
}

macro_rules! boundaries {
    ($($name:ident = $k:literal,)*) => {$(
        #[unsafe(no_mangle)]
        #[unsafe(link_section = concat!("socket/", stringify!($name)))]
        fn $name(ctx: *const core::ffi::c_void) -> i32 {
            stamp(ctx as *const NfCtx, $k)
        }
    )*};
}

boundaries! {
    np_nf_0 = 0, np_nf_1 = 1, np_nf_2 = 2, np_nf_3 = 3,
    np_nf_4 = 4, np_nf_5 = 5, np_nf_6 = 6, np_nf_7 = 7,
    np_nf_8 = 8, np_nf_9 = 9, np_nf_10 = 10, np_nf_11 = 11,
    np_nf_12 = 12, np_nf_13 = 13, np_nf_14 = 14, np_nf_15 = 15,
}
