//! Overload: the traced path driven hard (tiny messages, a timeline for every packet, far more
//! than the 1 MiB ring holds at once). Nothing may be lost silently: every record the kernel
//! says it submitted reaches user space or is counted as discarded, and every journey that
//! completed is either such a record or counted as lost by the kernel. The memory the
//! consumer holds is bounded, and Ctrl-C still ends such a run.
//!
//!     sudo -E cargo test -p netpath --test overload -- --test-threads=1

use std::process::{Command, Stdio};
use std::time::Duration;

use netpath::{
    driver::Driver,
    measure::compare::{self},
};

mod common;
use common::leftovers::snapshot;
use common::need_root;

/// Round trips: each is two journeys and two timelines, far more than the 1 MiB ring holds.
const N: u64 = 40_000;
/// Most timelines the consumer keeps in memory (netpath/src/tracer/samples.rs).
const MAX_KEPT: usize = 1 << 20;

#[test]
fn lost_equals_what_the_kernel_failed_to_submit() {
    let _g = need_root();
    let mut opts = common::one_traced_run(Driver::Bridge, N, 100);
    opts.rr.req_size = 1;
    opts.rr.resp_size = 1;
    opts.rr.timeout = Duration::from_secs(120);
    opts.tracer.sample_every = 1;
    opts.keep_timelines = usize::MAX;
    let mut tracer = common::load_tracer(&opts.tracer);
    let r = compare::run_driver(&mut tracer, Driver::Bridge, &opts).expect("run");
    let c = |k: &str| r.lost[k];
    println!("{:?}; timelines received {}", r.lost, r.timelines.len());
    let got = r.timelines.len() as u64;
    // Nothing lost silently: every record the kernel submitted (`samples`) was received, or
    // dropped by the consumer's memory bound and counted (user-side discards are added to
    // `ringbuf_lost`, beside the kernel's own failed submits).
    assert!(got <= c("samples"), "{:?}", r.lost);
    assert!(c("samples") - got <= c("ringbuf_lost"), "{:?}", r.lost);
    // Every completed journey (one timeline each at --sample-every 1) is a record submitted
    // or one the kernel counted as lost.
    assert!(
        c("samples") + c("ringbuf_lost") >= c("completed"),
        "completed journeys neither received nor counted lost: {:?}",
        r.lost
    );
    // Bounded: the consumer keeps at most MAX_KEPT records.
    assert!(got as usize <= MAX_KEPT, "{got} records kept");
}

/// SIGINT in the middle of an overloaded traced run ends it, with everything removed.
#[test]
fn ctrl_c_ends_an_overloaded_run() {
    let _g = need_root();
    let before = snapshot();
    let mut c = Command::new(env!("CARGO_BIN_EXE_netpath"))
        .args([
            "compare",
            "-d",
            "bridge",
            "--no-untraced",
            "--sample-every",
            "1",
        ])
        .args(["--req-size", "1", "--resp-size", "1", "-n", "1000000"])
        .args(common::LATENCY_ONLY)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_secs(4));
    assert!(
        c.try_wait().unwrap().is_none(),
        "the run ended before the signal"
    );
    // SAFETY: our own unreaped child.
    unsafe { libc::kill(c.id() as libc::pid_t, libc::SIGINT) };
    let st = common::exit_within(&mut c, Duration::from_secs(60));
    assert_eq!(st.code(), Some(130), "{st}");
    std::thread::sleep(Duration::from_secs(1));
    let ch = common::leftovers::changes(&before, &snapshot());
    assert!(ch.is_empty(), "{ch:?}");
}
