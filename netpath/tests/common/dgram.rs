//! What every UDP and ICMP run must show, lab or Docker: journeys accounted for and hops in
//! their order.
use netpath::harness::Proto;
use netpath::measure::interleave::WAKEUP_PARTS;
use netpath::record::DriverReport;

/// ≥ 99% of the 2n journeys completed, and every one that did not is a loss the kernel
/// counted (nothing vanished: maps had room, drops carry their reason). The runs sample every
/// journey, more timelines than the ring holds: when both CPUs spin beside CI's other work,
/// its drain thread falls behind (2, then 79 of 2000 in CI), so a timeline either arrived or
/// was counted `ringbuf_lost`, and most arrive (the hop order is checked on them).
pub fn assert_accounted(r: &DriverReport, n: u64) {
    assert_eq!(r.lost["skb_map_full"], 0, "skb_map_full in {:?}", r.lost);
    assert!(
        r.lost["samples"] + r.lost["ringbuf_lost"] >= r.lost["completed"]
            && r.lost["samples"] * 2 >= r.lost["completed"],
        "timelines neither arrived nor counted lost, or fewer than half arrived: {:?}",
        r.lost
    );
    assert_eq!(
        r.drops.iter().map(|d| d.count).sum::<u64>(),
        r.lost["dropped"],
        "{:?}",
        r.drops
    );
    let completed = r.lost["completed"];
    let counted = super::counted_losses(&r.lost);
    assert!(r.lost["started"] <= 2 * n, "{:?}", r.lost);
    assert!(2 * n - completed <= counted, "uncounted loss: {:?}", r.lost);
    assert!(
        completed * 100 >= 2 * n * 99,
        "more than 1% lost: {:?}",
        r.lost
    );
    assert_eq!(r.traced.count, n);
    let done: u64 = ["request", "response"]
        .iter()
        .map(|d| r.one_way.get(*d).map_or(0, |o| o.count))
        .sum();
    assert_eq!(done, completed);
    assert!(
        r.attributed_us > 0.0 && r.attributed_us <= r.rtt_mean_us,
        "{r:#?}"
    );
}

/// Every sampled timeline's data-path hops are `want` (request, response), space-separated;
/// UDP timelines are datagrams to or from `port`. The order is the tracepoint backend's
/// (function probes add points inside hops: nat, ip_rcv).
pub fn assert_order(r: &DriverReport, name: &str, want: [&str; 2], port: u16) {
    if r.backend != "tracepoint" {
        return;
    }
    // The receiving thread's wakeup parts are left out: a datagram's copy is not always seen,
    // so its journey ends in the wakeup, or in receiver-stack when a spinning receiver took it
    // before the wakeup was traced.
    let odd = out_of_order(r, &want, &WAKEUP_PARTS);
    assert!(
        !r.timelines.is_empty() && odd.is_empty(),
        "{name}: {} of {} timelines out of order, want {want:?}: {:?}",
        odd.len(),
        r.timelines.len(),
        &odd[..odd.len().min(3)]
    );
    let port = port.to_string();
    assert!(
        r.proto != Proto::Udp || r.timelines.iter().all(|t| t.tuple.contains(&port)),
        "{:?}",
        r.timelines.iter().map(|t| &t.tuple).collect::<Vec<_>>()
    );
}

/// The timelines whose data-path hops (after the first point, those in `skip` left out,
/// repeats merged) are not `want` (request, response, space-separated): direction and hops.
pub fn out_of_order(
    r: &DriverReport,
    want: &[&str; 2],
    skip: &[&str],
) -> Vec<(&'static str, Vec<&'static str>)> {
    let mut odd = Vec::new();
    for t in &r.timelines {
        let mut hops: Vec<&str> = t
            .points
            .iter()
            .skip(1)
            .map(|p| p.hop)
            .filter(|h| !skip.contains(h))
            .collect();
        hops.dedup();
        let i = usize::from(t.dir == "response");
        if hops.join(" ") != want[i] {
            odd.push((t.dir, hops));
        }
    }
    odd
}
