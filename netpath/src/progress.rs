//! Progress of long runs as the engines report it: a bar per path, stepping through its
//! rounds. The engines (`measure`, `validate`) make a [`Bar`] and step it; how a bar shows is
//! the CLI's to say: it installs a [`Show`] maker (`render::progress`, indicatif on a
//! terminal) with [`install`]. Without one, or off a terminal, bars are silent. Here, below
//! the engines and the renderers, so that no engine imports a renderer.
use std::sync::RwLock;

/// One bar as shown.
pub trait Show: Send + Sync {
    /// The phase starting now.
    fn phase(&self, what: String);
    /// The phase just finished.
    fn done(&self);
    /// Removes the bar before the path's table is printed.
    fn finish(&self);
}

/// Makes a shown bar for a label and its number of steps.
pub type Maker = fn(&str, u64) -> Box<dyn Show>;

static MAKER: RwLock<Option<Maker>> = RwLock::new(None);

/// The CLI's bars for this process (`None`: silent).
pub fn install(maker: Option<Maker>) {
    if let Ok(mut m) = MAKER.write() {
        *m = maker;
    }
}

/// A path's bar: `steps` phases (its interleaved rounds).
pub struct Bar(Option<Box<dyn Show>>);

impl Bar {
    pub fn new(label: &str, steps: u64) -> Bar {
        let maker = MAKER.read().ok().and_then(|m| *m);
        Bar(maker.map(|m| m(label, steps)))
    }

    pub fn phase(&self, what: impl Into<String>) {
        if let Some(s) = &self.0 {
            s.phase(what.into());
        }
    }

    pub fn done(&self) {
        if let Some(s) = &self.0 {
            s.done();
        }
    }

    pub fn finish(&self) {
        if let Some(s) = &self.0 {
            s.finish();
        }
    }
}
