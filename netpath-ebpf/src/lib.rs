//! Empty on purpose: the programs are in `main.rs`; this lib only lets the loader crate
//! build-depend on the eBPF crate, so cargo tracks its changes.
#![no_std]
