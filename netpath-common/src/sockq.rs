//! Passively traced journeys waiting at their socket for the application's read (`SOCKQ`).
use crate::Flight;

/// Entries of the per-socket table of journeys waiting for the application's read
/// (`SOCKQ`; a power of two).
pub const SOCK_SLOTS: u32 = 1024;
/// Journeys one socket holds at once, waiting for the application's read (a power of two).
pub const SOCK_DEPTH: u32 = 4;

/// A passively traced journey whose data TCP queued on a socket (`sk_data_ready`): it waits
/// there for the application's receive to consume the data up to `end_seq`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct Parked {
    pub flight: Flight,
    /// `tcp_sock.rcv_nxt` right after the data was queued: the journey's data has been read
    /// once the socket's `copied_seq` reaches it.
    pub end_seq: u32,
    pub _pad: u32,
}

/// One entry of `SOCKQ`: a socket (0: free) and the journeys parked on it, a ring of
/// `SOCK_DEPTH` from `head` (oldest) to `tail`. Only the socket's own hooks touch a held
/// entry, and the socket lock orders them (TCP queues data and its reader consumes it each
/// with the socket owned), so the ring needs no atomics; the tag is claimed and released
/// with compare-and-swap, as the flight table's.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct SockSlot {
    pub sk: u64,
    /// Last time a journey was parked or read here: an entry left alone longer than
    /// `max_gap_ns` is taken over (its socket was closed or never read).
    pub last_ts: u64,
    pub head: u32,
    pub tail: u32,
    pub parked: [Parked; SOCK_DEPTH as usize],
}

/// Key of a parked journey's timeline in `TIMELINES` (its skb may be freed and reused while it
/// waits): slot and ring index, below any kernel address, so never an skb's.
#[inline(always)]
pub fn parked_key(slot: u32, idx: u32) -> u64 {
    (slot as u64) << 32 | idx as u64
}
