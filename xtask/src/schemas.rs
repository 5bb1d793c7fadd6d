//! `cargo xtask schemas`: writes `schemas/*.json` from netpath's output types (the
//! `schemas` example, `netpath::render::schema`); netpath's unit test
//! `committed_schemas_equal_the_generated_ones` fails until they are rewritten after a type
//! changed.
use std::process::Command;

use crate::{cmd, paths};

pub fn run() -> anyhow::Result<()> {
    let root = paths::workspace_root();
    cmd::run(
        Command::new(env!("CARGO"))
            .current_dir(&root)
            .args(["run", "-q", "-p", "netpath", "--example", "schemas", "--"])
            .arg(root.join("schemas")),
    )
}
