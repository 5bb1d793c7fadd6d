//! netpath: where the microseconds go when containers talk.
//!
//! The binary is a thin CLI over this library so integration tests drive the same code.
//! Layers, top to bottom (a file imports its own layer and those below; `xtask/src/layers.rs`
//! holds this table and `cargo xtask circles` checks it):
//! `cli` and `serve` (the commands, the exporter) → `render` (how results are shown) → the
//! engines (`measure` for compare/diff, `trace`, `tune`, `validate`, `bench`; their result
//! types beside them) → `record` (what a run produced) → `probe` (the eBPF side) → `runtime`
//! (containers netpath did not start) → `docker` (the Engine and the Docker lab) → `harness`
//! (traffic) and `lab` (the netns lab) → `path` (a path's devices and ends) → `driver` → `sys`
//! (namespaces, netlink, BTF, /proc, PM QoS, affinity) → `options`, `choice` and `progress`
//! (what every layer names; engines report progress through the hook the CLI installs).

pub mod bench;
mod choice;
pub mod cli;
pub mod docker;
pub mod driver;
pub mod harness;
pub mod lab;
pub mod measure;
pub mod options;
pub mod path;
pub mod probe;
pub mod progress;
pub mod record;
pub mod render;
pub mod runtime;
pub mod serve;
pub mod sys;
pub mod trace;
pub mod tune;
pub mod validate;

/// An error and its sources on one line.
pub fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        s.push_str(": ");
        s.push_str(&c.to_string());
        cur = c.source();
    }
    s
}

/// What a panicking thread said, for the error that replaces the panic.
pub fn panic_msg(p: &Box<dyn std::any::Any + Send>) -> String {
    if let Some(s) = p.downcast_ref::<&str>() {
        s.to_string()
    } else if let Some(s) = p.downcast_ref::<String>() {
        s.clone()
    } else {
        "unknown panic".into()
    }
}
