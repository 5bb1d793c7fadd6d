//! Progress of long runs on a terminal (indicatif): one bar per driver, stepping through its
//! interleaved rounds. Off unless the command turned it on (never in JSON mode) and stderr is
//! a terminal, so logs and pipes stay clean. The engines make their bars through
//! `crate::progress`; [`enable`] installs these as theirs, or none.
use std::io::IsTerminal as _;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressStyle};

/// Turns bars on for this process when `wanted` and stderr is a terminal.
pub fn enable(wanted: bool) {
    let on = wanted && std::io::stderr().is_terminal();
    crate::progress::install(on.then_some(shown as crate::progress::Maker));
}

fn shown(label: &str, steps: u64) -> Box<dyn crate::progress::Show> {
    Box::new(DriverBar::new(label, steps))
}

/// One driver's bar: `steps` phases (untraced rounds, bulk rounds, burst, traced run).
struct DriverBar(ProgressBar);

impl DriverBar {
    fn new(driver: &str, steps: u64) -> DriverBar {
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
}

impl crate::progress::Show for DriverBar {
    fn phase(&self, what: String) {
        self.0.set_message(what);
    }

    fn done(&self) {
        self.0.inc(1);
    }

    /// Removes the bar before the driver's table is printed.
    fn finish(&self) {
        self.0.finish_and_clear();
    }
}
