//! The whole program around the tracer: `compare` with rounds, bulk and bursts leaves nothing
//! of netpath behind, `doctor` agrees with this kernel, bad input gets one clear line.

use netpath::{lab, probe::doctor};

use super::common;

#[test]
fn nothing_of_netpath_remains_after_compare() {
    let _g = common::need_root();
    let before = lab::list_netpath_netns().unwrap();
    let v = common::run_json(common::SMALL_COMPARE);
    let drivers = v["drivers"].as_array().unwrap();
    assert_eq!(drivers.len(), 2);
    for d in drivers {
        assert_eq!(d["untraced"]["count"], 300);
        assert_eq!(d["rounds"].as_array().unwrap().len(), 2);
        assert!(d["bulk"]["gbit_per_s"]["median"].as_f64().unwrap() > 0.0);
        let burst = d["burst"].as_array().unwrap();
        assert_eq!(burst.len(), 2, "rate and twice the rate");
        assert_eq!(burst[1]["rate"], 600.0);
        assert!(burst.iter().all(|b| b["completed"] == b["sent"]));
        assert!(d["context"]["client_mtu"].as_u64().unwrap() > 0);
    }
    assert_eq!(common::leftovers(&before), Vec::<String>::new());
}

#[test]
fn doctor_matches_this_kernel() {
    let _g = common::need_root();
    let caps = doctor::probe().unwrap();
    let ok = |n: &str| caps.checks.iter().find(|c| c.name == n).unwrap().ok;
    assert!(ok("tracepoint") && ok("raw_tracepoint") && ok("tc"));
    let kprobe_pmu = std::path::Path::new("/sys/bus/event_source/devices/kprobe").exists();
    assert_eq!(
        ok("kprobe"),
        kprobe_pmu,
        "kprobe check vs the kernel's kprobe PMU"
    );
    if !kprobe_pmu {
        let k = caps.checks.iter().find(|c| c.name == "kprobe").unwrap();
        assert!(k.detail.contains("without kprobes"), "{}", k.detail);
    }
}

#[test]
fn bad_input_gets_one_clear_line() {
    let _g = common::need_root();
    let before = lab::list_netpath_netns().unwrap();
    let e = common::one_line_error(&["compare", "--driver", "nosuch"]);
    assert!(e.contains("nosuch"), "{e}");
    let caps = doctor::probe().unwrap();
    if !caps.checks.iter().find(|c| c.name == "kprobe").unwrap().ok {
        let e = common::one_line_error(&["compare", "--backend", "kprobe", "-n", "10"]);
        assert!(e.contains("kprobe"), "{e}");
    }
    assert_eq!(common::leftovers(&before), Vec::<String>::new());
}
