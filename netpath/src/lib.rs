//! netpath: where the microseconds go when containers talk.
//!
//! The binary is a thin CLI over this library so integration tests drive the same code.

pub mod ab;
pub mod backend;
pub mod bench;
pub mod bounds;
pub mod btf;
pub mod cli;
pub mod compare;
pub mod compare_args;
pub mod delta;
pub mod diff;
pub mod docker;
pub mod doctor;
pub mod driver;
pub mod harness;
pub mod lab;
pub mod machine;
pub mod netns;
pub mod nl;
pub mod path;
pub mod progress;
pub mod proxy;
pub mod render;
pub mod report;
pub mod rounds;
pub mod runtime;
pub mod serve;
pub mod stability;
pub mod trace;
pub mod tracer;
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

/// Tracepoint attach needs tracefs (event ids live there). Mount it if nobody has: mounting
/// tracefs at its standard place changes nothing else on the machine.
pub fn ensure_tracefs() {
    let dir = std::path::Path::new("/sys/kernel/tracing");
    if dir.join("events").exists()
        || std::path::Path::new("/sys/kernel/debug/tracing/events").exists()
    {
        return;
    }
    if let Err(e) = nix::mount::mount(
        Some("tracefs"),
        dir,
        Some("tracefs"),
        nix::mount::MsFlags::empty(),
        None::<&str>,
    ) {
        log::warn!("could not mount tracefs at {}: {e}", dir.display());
    }
}
