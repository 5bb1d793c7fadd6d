//! netpath's kernel programs: one ELF, one module per probe family (`probes/<family>.rs`).
//! Every family reports points to `path`, the single state machine that turns points into hops.
#![no_std]
#![no_main]
// BPF atomic instructions through the intrinsics (`atomic.rs`); the target's spec offers no
// read-modify-write atomics in `core::sync::atomic`.
#![allow(internal_features)]
#![feature(core_intrinsics)]

mod atomic;
mod config;
mod dgram;
mod flights;
mod icmp;
mod journey;
mod kernel;
mod maps;
mod nfmarks;
mod own;
mod path;
mod probes;
mod qdisc;
mod relay;
mod sched;
mod sockq;
mod state;
mod tids;
mod timeline;

#[cfg(not(test))]
#[panic_handler]
fn panic(_info: &core::panic::PanicInfo) -> ! {
    loop {}
}

#[unsafe(link_section = "license")]
#[unsafe(no_mangle)]
static LICENSE: [u8; 4] = *b"GPL\0";
