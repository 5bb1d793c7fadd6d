//! `cargo xtask readme`: README's example output rendered again from its checked-in run
//! (`docs/data/readme-compare.json`) by the `readme` example; netpath's unit test
//! `readme_example_is_what_the_renderer_prints` fails until it is, after compare's text
//! changed.
use std::process::Command;

use crate::{cmd, paths};

pub fn run() -> anyhow::Result<()> {
    let root = paths::workspace_root();
    cmd::run(
        Command::new(env!("CARGO"))
            .current_dir(&root)
            .args(["run", "-q", "-p", "netpath", "--example", "readme", "--"])
            .arg(&root),
    )
}
