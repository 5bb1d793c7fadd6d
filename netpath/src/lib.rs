//! netpath: where the microseconds go when containers talk.
//!
//! The binary is a thin CLI over this library so integration tests drive the same code.

pub mod harness;
pub mod lab;
