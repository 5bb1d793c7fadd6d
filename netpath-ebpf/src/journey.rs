//! Where journeys start and end in the traced threads: the send that starts one (and closes
//! the server's turnaround, or continues a relayed journey) and the receive that completes it.
use aya_ebpf::helpers::bpf_get_current_pid_tgid;
use netpath_common::{
    CLIENT_GAP, DevKey, Dir, Hop, OWN_COUNT_SHIFT, OWN_SEND, OWN_TURN, OwnSnap, Point, ROLE_RELAY,
    ROLE_SERVER, RelayHold, TidState, counter,
};

use crate::{
    flights, kernel,
    maps::*,
    own::{Done, stamp},
    relay,
    state::{advance, close_hop, complete, current_tid, record},
    tids::{adopt_relay_thread, maybe_traced, state, traced},
    timeline::emit_timeline,
};

/// A traced thread starts sending on socket `sk` (`tcp_sendmsg_locked`): the socket is kept,
/// so only its skbs start journeys; in trace mode (every packet sampled) its destination is
/// kept too, so a NAT rewrite before the first device shows in the timeline.
#[inline(always)]
pub fn on_send_enter_sk(sk: u64) -> Done {
    send_enter(true, sk)
}

/// A traced thread starts sending (syscall tracepoint: no socket); closes the server's
/// turnaround.
#[inline(always)]
pub fn on_send_enter() -> Done {
    send_enter(true, 0)
}

/// `count_unmatched`: a relay send without a journey is a lost second leg, except for
/// splice(2) entries, most of which are not sends (the socket → pipe half, EAGAIN retries).
#[inline(always)]
fn send_enter(count_unmatched: bool, sk: u64) -> Done {
    // One helper call for both ids: the relay check below wants the process's.
    let id = aya_ebpf::helpers::bpf_get_current_pid_tgid();
    let tid = id as u32;
    let (ts, st) = if maybe_traced(tid) {
        // The point's clock before the hash lookup: what follows is netpath's own time.
        let st = stamp();
        match state(tid) {
            Some(ts) => (ts, st),
            None => return Ok(None),
        }
    } else {
        match adopt_relay_thread(tid, (id >> 32) as u32) {
            Some(ts) => (ts, stamp()),
            None => return Ok(None),
        }
    };
    // tcp_sendmsg_locked fires once per skb filled; the first one starts the send.
    if ts.send_ts != 0 {
        return Ok((ts.own_bits & OWN_SEND != 0).then_some(st.t));
    }
    if sk != 0 {
        ts.sock = sk;
        if kernel::sample_every() == 1
            && let Ok((a, p)) = kernel::sk_dest(sk)
        {
            ts.dst_addr = a;
            ts.dst_port = p as u32;
        }
    }
    if ts.role == ROLE_RELAY {
        relay_send(ts, st.t, &st.own, count_unmatched);
        return Ok(Some(st.t));
    }
    if ts.turn_ts != 0 {
        let own = (ts.own_bits & OWN_TURN != 0).then(|| ts.turn_snap.until(&st.own));
        let (dir, hop) = if ts.role == ROLE_SERVER {
            (Dir::Turnaround, Hop::OneWay)
        } else {
            CLIENT_GAP
        };
        record(dir as u32, hop as u32, st.t.wrapping_sub(ts.turn_ts), own);
        ts.turn_ts = 0;
    }
    ts.send_ts = st.t;
    ts.send_snap = st.own;
    Ok(own_send(ts).then_some(st.t))
}

/// Whether the journey this send starts has its own time measured (one send in `own_every`,
/// counted per thread): decided here, so that only then does the send pay the second clock
/// read for its tail, which lies in that journey's first hop; `path::start` gives the journey
/// the same answer.
#[inline(always)]
fn own_send(ts: &mut TidState) -> bool {
    let n = ts.own_bits >> OWN_COUNT_SHIFT;
    let own = crate::own::measured(n as u64);
    let next = (n.wrapping_add(1) & (u32::MAX >> OWN_COUNT_SHIFT)) << OWN_COUNT_SHIFT;
    ts.own_bits = next | (ts.own_bits & OWN_TURN) | if own { OWN_SEND } else { 0 };
    own
}

/// A relay thread starts a send: only sends that carry a journey the relay received are
/// followed, from the receive that returned it or the wakeup of a splicing relay's socket.
#[inline(always)]
fn relay_send(ts: &mut TidState, t: u64, own: &OwnSnap, count_unmatched: bool) {
    let tgid = (bpf_get_current_pid_tgid() >> 32) as u32;
    let hold = match unsafe { RELAY.get(tgid) } {
        Some(h) => {
            let h = *h;
            let _ = RELAY.remove(tgid);
            h
        }
        None => match relay::take(t) {
            Some(h) => h,
            None => {
                if count_unmatched {
                    bump(counter::RELAY_UNMATCHED);
                }
                return;
            }
        },
    };
    if t.wrapping_sub(hold.recv_ts) > kernel::max_gap_ns() {
        bump(counter::STALE);
        return;
    }
    // The proxy hop: the relay has the message (receive returned, or its socket was woken
    // when it splices) → it starts sending it on the other connection.
    let proxy_own = hold.snap.until(own);
    record(
        hold.dir,
        Hop::Proxy as u32,
        t - hold.recv_ts,
        Some(proxy_own),
    );
    ts.origin_ts = hold.origin_ts;
    ts.origin_dir = hold.dir;
    ts.send_ts = t;
    ts.send_snap = *own;
}

/// splice(2) entry (syscall-bounded kernels): for a relay thread holding a journey, the start
/// of its send; ignored for everyone else (relay threads not yet known are adopted by
/// `send_enter`).
#[inline(always)]
pub fn on_relay_splice() -> Done {
    match traced(current_tid()) {
        Some(ts) if ts.role != ROLE_RELAY => Ok(None),
        _ => send_enter(false, 0),
    }
}

#[inline(always)]
pub fn on_send_exit() -> Done {
    if let Some(ts) = traced(current_tid()) {
        ts.send_ts = 0;
    }
    Ok(None)
}

/// A traced thread's receive on socket `sk` (0: not known, syscall tracepoints) returns `ret`
/// bytes: completes the journey. A relay's tail is always measured: the proxy hop runs from
/// it to the relay's send; the server's when the journey's own time is (its turnaround's).
#[inline(always)]
pub fn on_recv_exit(ret: i64, sk: u64) -> Done {
    // Errors, EOF and EAGAIN first: no lookup at all.
    if ret <= 0 {
        return Ok(None);
    }
    let tid = current_tid();
    if !maybe_traced(tid) {
        return Ok(None);
    }
    // The point's clock before the hash lookup: what follows is netpath's own time.
    let mut st = stamp();
    let t0 = st.t;
    let Some(ts) = state(tid) else {
        return Ok(None);
    };
    // A datagram socket's thread sends on the socket it receives on: its own skbs start
    // journeys from then on (`path::own_skb`).
    if kernel::dgram() && sk != 0 && ts.sock == 0 {
        ts.sock = sk;
    }
    let (mut skb, mut generation) = (ts.pending_skb, ts.pending_gen);
    if skb == 0 && kernel::dgram() && sk != 0 {
        (skb, generation) = crate::dgram::received_on(sk);
    }
    if skb == 0 {
        bump(counter::RECV_UNMATCHED);
        return Ok(Some(t0));
    }
    ts.pending_skb = 0;
    let fp = match flights::get(skb) {
        Some(f) if unsafe { (*f).first_ts } == generation => f,
        _ => {
            bump(counter::RECV_UNMATCHED);
            return Ok(Some(t0));
        }
    };
    // The socket's wakeup may have been traced on another CPU after this receive read the
    // clock (a datagram taken off the queue at once): never close a hop before it opened.
    let t = st.t.max(unsafe { (*fp).last_ts });
    st.t = t;
    advance(fp, skb, Point::RecvExit as u16, 0, DevKey::default(), &st);
    let f = unsafe { &*fp };
    close_hop(f, t);
    if ts.role == ROLE_RELAY {
        // The journey goes on when the relay sends it: hand it over, do not complete it.
        let hold = RelayHold {
            origin_ts: f.first_ts,
            recv_ts: t,
            snap: st.own,
            dir: f.dir as u32,
            _pad: 0,
        };
        let tgid = (bpf_get_current_pid_tgid() >> 32) as u32;
        let _ = RELAY.insert(tgid, hold, 0);
        if f.sampled() {
            emit_timeline(skb, f, t);
        }
        flights::release(skb);
        return Ok(Some(t0));
    }
    let own = f.own();
    complete(skb, f, t);
    // What the receive opens (the server's turnaround, the client's gap) has its own time
    // measured when this journey's was: then this receive's tail, its first, is measured too.
    ts.own_bits = (ts.own_bits & !OWN_TURN) | if own { OWN_TURN } else { 0 };
    if ts.role != ROLE_SERVER {
        // The client's receive ends its round trip: its tail is in no hop but in the client's
        // gap (`CLIENT_GAP`), kept on the journeys whose own time is measured.
        if !own {
            return Ok(None);
        }
        ts.turn_ts = t;
        ts.turn_snap = st.own;
        return Ok(Some(t0));
    }
    ts.turn_ts = t;
    ts.turn_snap = st.own;
    Ok(own.then_some(t0))
}
