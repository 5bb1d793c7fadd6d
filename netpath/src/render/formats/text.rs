//! `--format text`: each result's own text.
use std::io::Write;

use anyhow::Result;

use crate::render::Render;

pub fn write<T: Render>(w: &mut dyn Write, _backend: Option<&str>, r: &T) -> Result<()> {
    r.text(w)?;
    Ok(())
}
