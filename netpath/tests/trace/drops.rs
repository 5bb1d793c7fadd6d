//! Drops: a packet an nft rule drops in the node's bridge is reported with the kernel's
//! reason, its hop, direction and device, and counted once per drop.

use std::process::Command;

use netpath::{
    driver::Driver,
    lab,
    measure::compare::{self},
    probe::tracer::Tracer,
};

use super::common;

#[test]
fn a_dropped_packet_is_reported_with_reason_and_hop() {
    let _g = common::need_root();
    let backend = common::backend();
    let lab = lab::build(Driver::Bridge).unwrap();
    // Drop every 4th request segment in the node's bridge forward hook (nft bridge family):
    // TCP retransmits it, so the run completes, and each drop is one kfree_skb with a reason.
    let node = lab.node_ns.clone().unwrap();
    let port = lab.server_bind.port();
    let table = format!(
        "table bridge npdrop{id} {{\n chain npfwd {{\n  type filter hook forward priority 0;\n  tcp dport {port} meta length > 200 numgen inc mod 4 == 0 drop\n }}\n}}\n",
        id = lab.run_id
    );
    node.run(|| {
        use std::io::Write;
        let mut c = Command::new("nft")
            .args(["-f", "-"])
            .stdin(std::process::Stdio::piped())
            .spawn()?;
        c.stdin.take().unwrap().write_all(table.as_bytes())?;
        anyhow::ensure!(c.wait()?.success(), "nft rejected the drop rule");
        Ok(())
    })
    .unwrap();
    let opts = common::one_traced_run(Driver::Bridge, 12, 0);
    let mut tracer = Tracer::load(backend, &opts.tracer).unwrap();
    let r = compare::measure(&mut tracer, &lab, &opts);
    lab.teardown().unwrap();
    let r = r.unwrap();
    assert!(r.lost["dropped"] >= 1, "{:?}", r.lost);
    let d = &r.drops[0];
    assert_eq!(d.reason_name, "NETFILTER_DROP", "{:?}", r.drops);
    assert_eq!(d.hop, "bridge", "{:?}", r.drops);
    assert_eq!(d.dir, "request");
    assert!(d.device.contains("-node"), "{:?}", r.drops);
    assert_eq!(
        r.drops.iter().map(|d| d.count).sum::<u64>(),
        r.lost["dropped"]
    );
}
