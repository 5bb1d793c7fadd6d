//! `--format text`: each result's own text.
use std::io::Write;

use anyhow::Result;

use super::Render;

pub fn write<T: Render>(w: &mut dyn Write, _backend: Option<&str>, r: &T) -> Result<()> {
    r.text(w)?;
    Ok(())
}
