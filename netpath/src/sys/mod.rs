//! The machine netpath runs on: network namespaces, netlink, BTF, docker-proxy processes,
//! CPU and machine state, tracefs.

pub mod btf;
pub mod machine;
pub mod netns;
pub mod nl;
pub mod pmqos;
pub mod proxy;
pub mod runmode;
pub mod stats;

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
