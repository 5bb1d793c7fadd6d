#![no_std]

// Lets the loader crate build-depend on the eBPF crate so cargo tracks its changes.
