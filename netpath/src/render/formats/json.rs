//! `--format json`: the result behind the versioned header, one pretty-printed document.
use std::io::Write;

use anyhow::Result;

use super::Render;

pub fn write<T: Render>(w: &mut dyn Write, backend: Option<&str>, r: &T) -> Result<()> {
    writeln!(
        w,
        "{}",
        crate::record::header::to_json(T::KIND, backend, r)?
    )?;
    Ok(())
}
