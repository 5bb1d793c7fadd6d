//! The output formats' writers, one file each, registered in `output.rs`'s `formats!`.

pub mod json;
pub mod text;
