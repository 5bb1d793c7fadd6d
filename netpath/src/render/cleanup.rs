//! `netpath cleanup`'s and `netpath image`'s results: what was removed, the image built.
use std::io::Write;

use serde::Serialize;

/// What `cleanup` removed (its JSON body: `removed`).
#[derive(Serialize, schemars::JsonSchema)]
pub struct CleanupOutput {
    /// Each object removed, as `kind name` (a namespace, a link, an nft table, a container…).
    pub removed: Vec<String>,
}

impl super::Render for CleanupOutput {
    const KIND: &'static str = "cleanup";
    fn text(&self, w: &mut dyn Write) -> std::io::Result<()> {
        if self.removed.is_empty() {
            return writeln!(w, "nothing of netpath's was left");
        }
        for r in &self.removed {
            writeln!(w, "removed {r}")?;
        }
        Ok(())
    }
    /// Nothing: with -q the exit status says whether all was removed.
    fn answer(&self, _w: &mut dyn Write) -> std::io::Result<()> {
        Ok(())
    }
}

/// The image `image` built (its JSON body: `tag`).
#[derive(Serialize, schemars::JsonSchema)]
pub struct ImageOutput {
    /// The image's tag, to give `docker run` or a DaemonSet.
    pub tag: String,
}

impl super::Render for ImageOutput {
    const KIND: &'static str = "image";
    fn text(&self, w: &mut dyn Write) -> std::io::Result<()> {
        writeln!(w, "{}", self.tag)
    }
}
