//! netpath: where the microseconds go when containers talk.
//!
//! The binary is a thin CLI over this library so integration tests drive the same code.
//! Layers, top to bottom: `cli` (each command's flags and run) → the command engines
//! (`measure` for compare/diff, `tune`, `bench`, `trace`, `serve`, `validate`) → `record`
//! (what a run produced) and `render` (how it is shown) → `harness` (traffic), `probe` (the
//! eBPF side), `lab`/`docker`/`runtime`/`path` (the paths measured) → `sys` (namespaces,
//! netlink, BTF, /proc).

pub mod bench;
mod choice;
pub mod cli;
pub mod docker;
pub mod driver;
pub mod harness;
pub mod lab;
pub mod measure;
pub mod path;
pub mod probe;
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
