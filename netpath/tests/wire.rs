//! Privileged tests of the emulated cross-node wire (`compare --underlay-delay`): netem on the
//! overlay lab's underlay links and the egress lab's uplink, in the real kernel. On a kernel
//! with netem (the VM kernels) the delay must land in the `underlay` (`uplink`) hop and
//! nowhere else; on one without (the host here)
//! the command must refuse in one line and leave nothing behind. Run as root.
mod common;
use std::{collections::BTreeMap, path::Path, process::Command, time::Duration};

use netpath::{
    driver::Driver,
    lab::{
        self,
        netem::{self, WireDelay},
    },
    measure::compare::{self},
    record::DriverReport,
};

/// The emulated wire: well above anything the lab's own hops take (tens of µs, even under
/// qemu's emulation), so its effect cannot hide in their noise.
const DELAY: Duration = Duration::from_millis(3);
const N: u64 = 200;
/// What the tests that need netem say on a kernel without it.
const NO_NETEM: &str = "skipped: this kernel has no netem (CONFIG_NET_SCH_NETEM), so no delay \
    can be emulated here; `cargo xtask vm-test` runs this test on the VM kernels, which have it, \
    and `underlay_delay_on_the_command_line` checks the refusal here";

/// Whether this kernel has netem, asked without netpath: loaded (the VM loads it at boot),
/// built in or as a module file, or said by the kernel's own config.
fn kernel_has_netem() -> bool {
    if Path::new("/sys/module/sch_netem").exists() {
        return true;
    }
    if let Ok(out) = Command::new("zcat").arg("/proc/config.gz").output()
        && out.status.success()
    {
        let config = String::from_utf8_lossy(&out.stdout);
        return config
            .lines()
            .any(|l| l == "CONFIG_NET_SCH_NETEM=y" || l == "CONFIG_NET_SCH_NETEM=m");
    }
    let release = nix::sys::utsname::uname().unwrap();
    let dir = Path::new("/lib/modules").join(release.release());
    let builtin = std::fs::read_to_string(dir.join("modules.builtin")).unwrap_or_default();
    builtin.contains("/sch_netem.ko")
        || std::fs::read_dir(dir.join("kernel/net/sched"))
            .into_iter()
            .flatten()
            .filter_map(|e| e.ok())
            .any(|e| e.file_name().to_string_lossy().starts_with("sch_netem.ko"))
}

/// Says why a test that needs netem did not run, past libtest's output capture (which takes
/// only `print!`/`eprint!`), so the skip shows in every run's output.
fn skipped() {
    use std::io::Write as _;
    let _ = writeln!(std::io::stderr(), "{NO_NETEM}");
}

/// The root namespace's links, sorted.
fn root_links() -> Vec<String> {
    let mut v: Vec<String> = common::root_links().into_iter().collect();
    v.sort();
    v
}

fn traced(driver: Driver, underlay: Option<WireDelay>) -> DriverReport {
    let mut opts = common::one_traced_run(driver, N, 20);
    opts.underlay = underlay;
    let mut tracer = common::load_tracer(&opts.tracer);
    compare::run_driver(&mut tracer, driver, &opts).expect("run")
}

/// Median crossing of each (direction, hop) (the mean of a few hundred crossings moves with a
/// single straggler on a loaded host: 5.5 ms for 3 ms of netem was seen), without the
/// scheduler's alternatives for a sleeping receiver (`idle-exit` when its CPU was idle,
/// `runqueue` when busy): which of them a run shows depends on the machine, not on the wire
/// (in 3 ms gaps the CPUs go idle).
fn hop_p50s(r: &DriverReport) -> BTreeMap<(&'static str, &'static str), f64> {
    r.hops
        .iter()
        .filter(|h| h.at.crossings > 0 && !["idle-exit", "runqueue"].contains(&h.at.hop))
        .map(|h| ((h.at.dir, h.at.hop), h.at.p50_us))
        .collect()
}

#[test]
fn underlay_delay_lands_in_the_underlay_hop_only() {
    delay_lands_in_the_wire_hop_only(Driver::Overlay, "underlay");
}

/// The egress uplink stands for the wire to another host: the same delay, in its `uplink` hop.
#[test]
fn underlay_delay_lands_in_the_egress_uplink_hop_only() {
    delay_lands_in_the_wire_hop_only(Driver::Egress, "uplink");
}

/// Traces `driver` without and then with netem on its wire links and checks that the delay
/// lands in `wire_hop` once per journey and in no other hop.
fn delay_lands_in_the_wire_hop_only(driver: Driver, wire_hop: &str) {
    let _g = common::need_root();
    if !kernel_has_netem() {
        return skipped();
    }
    let before = lab::list_netpath_netns().unwrap();
    let d_us = DELAY.as_secs_f64() * 1e6;
    let plain = traced(driver, None);
    let delayed = traced(
        driver,
        Some(WireDelay {
            delay: DELAY,
            jitter: Duration::ZERO,
        }),
    );
    let (p, d) = (hop_p50s(&plain), hop_p50s(&delayed));
    // The figures go past libtest's capture: they are this test's measurement.
    let mut table = format!(
        "{driver} ({}), mean µs per crossing, without → with netem {} ms on the {wire_hop}:\n",
        delayed.backend,
        DELAY.as_millis()
    );
    for (k, v) in &d {
        let was = p.get(k).copied().unwrap_or(f64::NAN);
        table += &format!("  {:<8} {:<14} {was:>8.1} → {v:>8.1}\n", k.0, k.1);
    }
    table += &format!(
        "  RTT mean {:.1} → {:.1}\n",
        plain.traced.mean_us, delayed.traced.mean_us
    );
    {
        use std::io::Write as _;
        let _ = std::io::stderr().write_all(table.as_bytes());
    }
    let wire = delayed.context.as_ref().and_then(|c| c.wire.clone());
    let wire = wire.expect("the run context names the emulated wire");
    assert!(wire.contains("netem delay 3 ms"), "{wire}");
    assert_eq!(wire.matches("np").count(), 2, "both wire ends: {wire}");
    assert!(plain.context.as_ref().unwrap().wire.is_none());
    // The same hops either way: the delay adds time, not segments.
    assert_eq!(
        p.keys().collect::<Vec<_>>(),
        d.keys().collect::<Vec<_>>(),
        "hop sets"
    );
    for dir in ["request", "response"] {
        let (before_us, after_us) = (p[&(dir, wire_hop)], d[&(dir, wire_hop)]);
        assert!(
            before_us < d_us / 10.0,
            "{dir} {wire_hop} without netem: {before_us} µs"
        );
        // netem never sends early; late by its timer (up to 1.15× seen under TCG), but not
        // twice: the delay is crossed once per journey, not on both ends.
        assert!(
            after_us >= 0.8 * d_us && after_us <= 1.7 * d_us,
            "{dir} {wire_hop} with {d_us} µs of netem: {after_us} µs (crossed once per journey)"
        );
    }
    for (k, after_us) in &d {
        if k.1 != wire_hop {
            assert!(
                after_us - p[k] < d_us / 2.0,
                "{k:?} grew from {} to {after_us} µs: the delay belongs to the {wire_hop}",
                p[k]
            );
        }
    }
    // Both directions cross the wire once: the round trip grows by about twice the delay.
    assert!(
        delayed.traced.mean_us - plain.traced.mean_us >= 1.6 * d_us,
        "RTT {} → {} µs",
        plain.traced.mean_us,
        delayed.traced.mean_us
    );
    assert_eq!(common::leftovers(&before), Vec::<String>::new());
}

#[test]
fn netem_sits_on_both_underlay_ends_and_goes_with_the_lab() {
    let _g = common::need_root();
    if !kernel_has_netem() {
        return skipped();
    }
    let links_before = root_links();
    let lab = lab::build(Driver::Overlay).unwrap();
    let wire = netem::delay_wire(
        &lab,
        &WireDelay {
            delay: DELAY,
            jitter: Duration::from_micros(100),
        },
    )
    .unwrap()
    .unwrap();
    assert!(wire.contains("jitter 100 µs"), "{wire}");
    let wire_links: Vec<String> = netem::wire_links(&lab)
        .iter()
        .map(|d| d.name.clone())
        .collect();
    assert_eq!(wire_links.len(), 2, "{wire_links:?}");
    for ns in lab.namespaces() {
        let roots: Vec<(String, Option<String>)> = ns
            .run(|| {
                let nl = netpath::sys::nl::Nl::new()?;
                nl.links()?
                    .into_iter()
                    .map(|l| Ok((l.name.clone(), nl.root_qdisc(l.ifindex)?)))
                    .collect()
            })
            .unwrap();
        for (name, root) in roots {
            let want_netem = wire_links.contains(&name);
            assert_eq!(
                root.as_deref() == Some("netem"),
                want_netem,
                "{name} in {}: root qdisc {root:?}",
                ns.name
            );
        }
    }
    // A lab without a wire (one node) is left as it is.
    let bridge = lab::build(Driver::Bridge).unwrap();
    let none = netem::delay_wire(
        &bridge,
        &WireDelay {
            delay: DELAY,
            jitter: Duration::ZERO,
        },
    );
    assert_eq!(none.unwrap(), None);
    bridge.teardown().unwrap();
    let id = lab.run_id.clone();
    lab.teardown().unwrap();
    assert!(lab::netns_of_run(&id).unwrap().is_empty());
    assert_eq!(root_links(), links_before, "nothing in the root netns");
}

/// With netem the command runs and the overlay row names its wire (the bridge row, one node,
/// has none). Without netem it says so in one line, exits non-zero and leaves no namespace or
/// link behind (it checks on a scratch namespace before building any lab).
#[test]
fn underlay_delay_on_the_command_line() {
    let _g = common::need_root();
    let before = lab::list_netpath_netns().unwrap();
    if kernel_has_netem() {
        let out = common::output_ok(
            Command::new(env!("CARGO_BIN_EXE_netpath"))
                .args(["compare", "-d", "bridge,overlay", "--underlay-delay", "2ms"])
                .args(["--underlay-jitter", "100us", "-n", "50", "--warmup", "5"])
                .args(["--no-untraced", "--json"])
                .args(common::LATENCY_ONLY),
        );
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        let wire = |i: usize| {
            v["drivers"][i]["context"]["wire"]
                .as_str()
                .map(str::to_owned)
        };
        assert_eq!(wire(0), None, "bridge is one node");
        let w = wire(1).expect("overlay's wire");
        assert!(w.contains("netem delay 2 ms jitter 100 µs"), "{w}");
        assert_eq!(common::leftovers(&before), Vec::<String>::new());
        return;
    }
    let links_before = root_links();
    let e = common::one_line_error(&[
        "compare",
        "-d",
        "bridge,overlay",
        "--underlay-delay",
        "50us",
        "-n",
        "10",
    ]);
    assert!(e.contains("netem") && e.contains("50 µs"), "{e}");
    assert_eq!(common::leftovers(&before), Vec::<String>::new());
    assert_eq!(root_links(), links_before);
}

#[test]
fn bad_underlay_input_gets_one_clear_line() {
    let _g = common::need_root();
    let before = lab::list_netpath_netns().unwrap();
    let e = common::one_line_error(&["compare", "-d", "overlay", "--underlay-delay", "fast"]);
    assert!(e.contains("fast") && e.contains("50us"), "{e}");
    let e = common::one_line_error(&["compare", "-d", "overlay", "--underlay-delay", "5s"]);
    assert!(e.contains("at most"), "{e}");
    let e = common::one_line_error(&["compare", "-d", "overlay", "--underlay-jitter", "1ms"]);
    assert!(e.contains("--underlay-delay"), "{e}");
    let e = common::one_line_error(&["compare", "-d", "bridge,host", "--underlay-delay", "1ms"]);
    assert!(
        e.contains("cross-node") && e.contains("bridge, host"),
        "{e}"
    );
    assert_eq!(common::leftovers(&before), Vec::<String>::new());
}
