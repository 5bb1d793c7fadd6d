//! Progress of long runs on a terminal (indicatif): one bar per driver, stepping through its
//! interleaved rounds. Off unless the command turned it on (never in JSON mode) and stderr is
//! a terminal, so logs and pipes stay clean.
use std::io::IsTerminal as _;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use indicatif::{ProgressBar, ProgressStyle};

static ENABLED: AtomicBool = AtomicBool::new(false);

/// Turns bars on for this process when `wanted` and stderr is a terminal: the engines'
/// bars (`crate::progress`) are then these.
pub fn enable(wanted: bool) {
    let on = wanted && std::io::stderr().is_terminal();
    ENABLED.store(on, Ordering::SeqCst);
    crate::progress::install(on.then_some(shown as crate::progress::Maker));
}

fn shown(label: &str, steps: u64) -> Box<dyn crate::progress::Show> {
    Box::new(DriverBar::new(label, steps))
}

impl crate::progress::Show for DriverBar {
    fn phase(&self, what: String) {
        DriverBar::phase(self, what);
    }

    fn done(&self) {
        DriverBar::done(self);
    }

    fn finish(&self) {
        DriverBar::finish(self);
    }
}

pub fn enabled() -> bool {
    ENABLED.load(Ordering::SeqCst)
}

/// One driver's bar: `steps` phases (untraced rounds, bulk rounds, burst, traced run).
pub struct DriverBar(ProgressBar);

impl DriverBar {
    pub fn new(driver: &str, steps: u64) -> DriverBar {
        if !enabled() {
            return DriverBar(ProgressBar::hidden());
        }
        let b = ProgressBar::new(steps);
        b.set_style(
            ProgressStyle::with_template("{prefix:>18} [{bar:30}] {pos}/{len} {msg} {elapsed}")
                .unwrap_or_else(|_| ProgressStyle::default_bar())
                .progress_chars("=> "),
        );
        b.set_prefix(driver.to_string());
        b.enable_steady_tick(Duration::from_millis(200));
        DriverBar(b)
    }

    /// The phase starting now.
    pub fn phase(&self, what: impl Into<String>) {
        self.0.set_message(what.into());
    }

    /// The phase just finished.
    pub fn done(&self) {
        self.0.inc(1);
    }

    /// Removes the bar before the driver's table is printed.
    pub fn finish(&self) {
        self.0.finish_and_clear();
    }
}
