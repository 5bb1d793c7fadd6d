//! Command entry points that turn flags into a run's options, run it, and render its result:
//! the top of the house (they import `render` and the commands; nothing but `main.rs` imports
//! them), so a command's result type and its renderer never import each other.
pub mod args;
pub mod bounds;
pub mod tune;
