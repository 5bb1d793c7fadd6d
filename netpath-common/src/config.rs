//! The kernel programs' load-time settings: one `#[repr(C)]` struct, the `CONFIG` global of the
//! eBPF object, which the loader sets with one `override_global` before load (the counterpart
//! of libbpf's `const volatile` globals). Struct offsets in it come from BTF at run time.
use crate::KernelOffsets;

/// Symbol of the `LoadConfig` global in the eBPF object.
pub const GLOBAL: &str = "CONFIG";

/// `LoadConfig::filter.on` bits: which of the `trace` filters apply.
pub const F_PORT: u32 = 1;
pub const F_ADDR: u32 = 2;
pub const F_PROTO: u32 = 4;
pub const F_NETNS: u32 = 8;
pub const F_IFINDEX: u32 = 16;

/// `LoadConfig::xmit` bit: `start_xmit` is a point of the timelines (`trace`: detail).
pub const XMIT_POINT: u32 = 1;
/// `LoadConfig::xmit` bit: time each transmit's qdisc, `dev_queue` to `start_xmit`, into
/// `QDISC_PARTS` (`--parts`). Alone, `start_xmit` does only that: no point, no hop moved.
pub const XMIT_QDISC: u32 = 2;

/// Kernel-side packet filter of `netpath trace`, checked when a packet is first seen.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FilterConfig {
    /// Bit set of the filters that apply (`F_*`).
    pub on: u32,
    /// Port (network byte order, in the low 16 bits) matched against source or destination.
    pub port: u32,
    /// A second port that also passes the port filter (0: none): the container side of a
    /// published port, so both legs of a relayed journey are followed; only for packets whose
    /// other end is `addr2` (the proxy's or the NAT's side, the container network's gateway),
    /// so another client of the container's own port is not.
    pub port2: u32,
    pub addr2: u32,
    /// IPv4 address (network byte order) matched against source or destination.
    pub addr: u32,
    pub proto: u32,
    /// Netns inode and ifindex of the device where the packet is first seen.
    pub netns: u32,
    pub ifindex: u32,
}

/// Everything the programs read that is fixed at load.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LoadConfig {
    /// A tracked skb not seen for this long is stale (its address was reused or it was lost).
    pub max_gap_ns: u64,
    /// Kernel struct field offsets, read from BTF by the loader.
    pub offsets: KernelOffsets,
    /// Record one sampled timeline every N started packets (0: none, 1: all).
    pub sample_every: u32,
    /// Slots of the flight table in use, minus one (a power of two minus one, at most
    /// `FLIGHT_SLOTS - 1`): a test sets it tiny to force collisions.
    pub flight_mask: u32,
    /// Follow any packet first seen on a watched device (filters apply), not only traced sends.
    pub trace_any: u32,
    /// The kernel has no `sock:sk_data_ready`: relays continue from the last receive pass.
    pub ready_fallback: u32,
    pub filter: FilterConfig,
    /// Measure netpath's own time along one journey in N (`OwnCpu`: a run count per program,
    /// and on those journeys a second clock read per point). 0: not at all.
    pub own_every: u32,
    /// What `net_dev_start_xmit` does, when it is attached (`XMIT_*` bits).
    pub xmit: u32,
    /// nf_tables struct offsets for the chain probes (`--parts` without netfilter links).
    pub nft: NftOffsets,
}

/// Offsets into nf_tables' structs (module BTF, or vmlinux where it is built in), read by the
/// loader when the chain probes may be used (`--parts` on a kernel without netfilter
/// programs); all 0 otherwise, and the probes are then never attached.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NftOffsets {
    /// `nft_pktinfo.skb`, `nft_pktinfo.state`.
    pub pkt_skb: u32,
    pub pkt_state: u32,
    /// `nf_hook_state.hook` (a u8: `NF_INET_*`), `nf_hook_state.net`.
    pub state_hook: u32,
    pub state_net: u32,
    /// `nft_chain.name` (a `char *`), `nft_chain.table`, `nft_table.name` (a `char *`).
    pub chain_name: u32,
    pub chain_table: u32,
    pub table_name: u32,
    /// Explicit padding to a multiple of 8.
    pub _pad: u32,
}

/// Bytes of a table's or chain's name the chain probes compare (with its NUL: longer names
/// are cut to `NFT_NAME_BYTES - 1` on both sides).
pub const NFT_NAME_BYTES: usize = 32;

/// Key of `NFT_CHAIN_PARTS`: a base chain by namespace, hook and names, as the chain probe
/// reads them in the kernel and userspace writes them from the placement (names cut and
/// NUL-filled alike).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NftChainKey {
    pub netns: u32,
    pub hook: u32,
    pub table: [u8; NFT_NAME_BYTES],
    pub chain: [u8; NFT_NAME_BYTES],
}

impl KernelOffsets {
    /// Every offset 0 (what the object holds before the loader fills it in).
    pub const ZERO: KernelOffsets = KernelOffsets {
        sk_daddr: 0,
        sk_dport: 0,
        skb_dev: 0,
        skb_head: 0,
        skb_network_header: 0,
        skb_transport_header: 0,
        dev_ifindex: 0,
        dev_nd_net: 0,
        net_ns_inum: 0,
        sk_rcvq_tail: 0,
        skb_sk: 0,
        task_pid: 0,
        sk_rcv_saddr: 0,
        sk_num: 0,
        tcp_rcv_nxt: 0,
        tcp_copied_seq: 0,
    };
}

impl LoadConfig {
    /// The settings compiled into the object; the loader starts from these.
    pub const DEFAULT: LoadConfig = LoadConfig {
        max_gap_ns: 100_000_000,
        offsets: KernelOffsets::ZERO,
        sample_every: 64,
        flight_mask: crate::FLIGHT_SLOTS - 1,
        trace_any: 0,
        ready_fallback: 0,
        filter: FilterConfig {
            on: 0,
            port: 0,
            port2: 0,
            addr2: 0,
            addr: 0,
            proto: 0,
            netns: 0,
            ifindex: 0,
        },
        own_every: 8,
        xmit: 0,
        nft: NftOffsets {
            pkt_skb: 0,
            pkt_state: 0,
            state_hook: 0,
            state_net: 0,
            chain_name: 0,
            chain_table: 0,
            table_name: 0,
            _pad: 0,
        },
    };
}

impl Default for LoadConfig {
    fn default() -> Self {
        LoadConfig::DEFAULT
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use core::mem::{offset_of, size_of};

    /// Every field starts where the one before it ends and the struct ends with its last
    /// field: no byte of it is implicit padding the two sides could disagree on.
    #[test]
    fn load_config_has_no_implicit_padding() {
        assert_eq!(size_of::<KernelOffsets>(), 16 * 4);
        assert_eq!(size_of::<FilterConfig>(), 8 * 4);
        assert_eq!(offset_of!(LoadConfig, max_gap_ns), 0);
        assert_eq!(offset_of!(LoadConfig, offsets), 8);
        assert_eq!(offset_of!(LoadConfig, sample_every), 8 + 64);
        assert_eq!(offset_of!(LoadConfig, flight_mask), 76);
        assert_eq!(offset_of!(LoadConfig, trace_any), 80);
        assert_eq!(offset_of!(LoadConfig, ready_fallback), 84);
        assert_eq!(offset_of!(LoadConfig, filter), 88);
        assert_eq!(offset_of!(LoadConfig, own_every), 88 + 32);
        assert_eq!(offset_of!(LoadConfig, xmit), 124);
        assert_eq!(offset_of!(LoadConfig, nft), 128);
        assert_eq!(size_of::<NftOffsets>(), 8 * 4);
        assert_eq!(size_of::<LoadConfig>(), 160);
        assert_eq!(offset_of!(NftChainKey, table), 8);
        assert_eq!(size_of::<NftChainKey>(), 8 + 2 * NFT_NAME_BYTES);
    }

    #[test]
    fn the_default_matches_the_loader_defaults() {
        let c = LoadConfig::default();
        assert_eq!(c.flight_mask + 1, crate::FLIGHT_SLOTS);
        assert!(c.flight_mask.wrapping_add(1).is_power_of_two());
        assert_eq!(c.offsets, KernelOffsets::default());
    }
}
