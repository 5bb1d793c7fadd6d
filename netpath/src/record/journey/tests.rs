use super::*;
use crate::record::TimelineHop;

/// A bridge request as the kernel records it: (point, hop, cpu, ns since the previous point);
/// `runs` softirq runs counted, its second pass on `second_cpu`.
pub(crate) fn bridge(runs: u16, second_cpu: u16) -> Timeline {
    let p = |point: &'static str, hop: &'static str, cpu: u16, ns: u64| TimelineHop {
        point,
        device: String::new(),
        kind: "",
        netns: 1,
        hop,
        since_prev_us: ns as f64 / 1000.0,
        cpu,
    };
    Timeline {
        dir: "request",
        tuple: String::new(),
        start_ns: 1_000_000,
        tid: 7,
        headers: Default::default(),
        translated: None,
        total_us: 0.0,
        rx_passes: 2,
        softirq_runs: runs,
        points: vec![
            p("send", "sender-stack", 0, 0),
            p("dev_queue", "sender-stack", 0, 3000),
            p("start_xmit", "veth", 0, 100),
            p("netif_rx", "veth", 0, 110),
            p(PASS, "backlog", 0, 640),
            p("dev_queue", "bridge", 0, 100),
            p("start_xmit", "veth", 0, 50),
            p("netif_rx", "veth", 0, 60),
            p(PASS, "backlog", second_cpu, 300),
            p("sk_data_ready", "receiver-stack", second_cpu, 2000),
            p("sched_waking", "wakeup", second_cpu, 400),
            p("sched_switch", "idle-exit", 1, 20000),
            p("copy_to_user", "recv-copy", 1, 900),
            p("recv_return", "recv-return", 1, 300),
        ],
        nf_marks: Vec::new(),
        parts: Vec::new(),
    }
}

#[test]
fn segments_merge_a_hops_crossings_on_one_cpu() {
    let s = segments(&bridge(1, 0));
    let names: Vec<&str> = s.iter().map(|s| s.hop.as_str()).collect();
    assert_eq!(
        names,
        [
            "sender-stack",
            "veth",
            "backlog",
            "bridge",
            "veth",
            "backlog",
            "receiver-stack",
            "wakeup",
            "idle-exit",
            "recv-copy",
            "recv-return"
        ]
    );
    // The first veth: dev_queue (at 1_003_000) to netif_rx, 210 ns.
    assert_eq!((s[1].start_ns, s[1].end_ns), (1_003_000, 1_003_210));
    assert_eq!((s[1].first, s[1].last), (2, 3));
    assert_eq!(s[8].cpu, 1);
    // Back to back: each segment starts where the one before it ended.
    assert!(s.windows(2).all(|w| w[0].end_ns == w[1].start_ns));
}

#[test]
fn hop_line_sums_each_hop_in_microseconds() {
    assert_eq!(
        hop_line(&bridge(1, 0)),
        "sender-stack 3.00 µs | veth 0.21 | backlog 0.64 | bridge 0.10 | veth 0.11 | \
         backlog 0.30 | receiver-stack 2.00 | wakeup 0.40 | idle-exit 20.00 | recv-copy 0.90 | \
         recv-return 0.30"
    );
}

#[test]
fn two_passes_in_one_run_on_one_cpu() {
    let r = softirq_runs(&bridge(1, 0));
    assert_eq!(r.len(), 1, "{r:?}");
    assert_eq!(r[0].passes, [4, 8]);
    // From the first pass to the wakeup, the last point in softirq on CPU 0.
    assert_eq!(r[0].start_ns, 1_003_850);
    assert_eq!(r[0].end_ns, 1_003_850 + 100 + 50 + 60 + 300 + 2000 + 400);
}

#[test]
fn the_kernels_count_splits_a_run_no_point_divides() {
    let r = softirq_runs(&bridge(2, 0));
    assert_eq!(r.len(), 2, "{r:?}");
    assert_eq!(
        (r[0].passes.as_slice(), r[1].passes.as_slice()),
        (&[4][..], &[8][..])
    );
    // The first run ends at the second backlog's start, its netif_rx.
    assert_eq!(r[0].end_ns, 1_003_850 + 100 + 50 + 60);
}

#[test]
fn a_pass_on_another_cpu_is_another_run() {
    let r = softirq_runs(&bridge(2, 1));
    assert_eq!(r.len(), 2);
    assert_eq!((r[0].cpu, r[1].cpu), (0, 1));
}
