//! The header every JSON output starts with: what produced it, where, when, and on which
//! clock, so a saved result can be read (and compared) long after the run.
use std::sync::OnceLock;
use std::time::SystemTime;

use anyhow::Result;
use serde::{Deserialize, Serialize};

/// Bumped whenever a field of any output changes meaning or is removed (adding one is not a
/// new version). The schemas under `schemas/` describe this version; `docs/outputs.md` lists
/// what each version changed.
pub const SCHEMA_VERSION: u32 = 2;

#[derive(Clone, Debug, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Header {
    pub schema_version: u32,
    /// Which output this is: compare, trace, doctor, bench, inspect.
    pub kind: String,
    pub netpath_version: String,
    /// `uname -r` of the machine that ran it.
    pub kernel: String,
    pub hostname: String,
    /// The probe backend used (None for outputs that load no programs).
    pub backend: Option<String>,
    pub command_line: Vec<String>,
    /// When the command started, UTC, RFC 3339.
    pub started_utc: String,
    pub clock: Clock,
    /// The machine when the command started: a latency means little without it.
    pub machine: MachineState,
}

/// Kernel timestamps (bpf_ktime_get_ns) are CLOCK_MONOTONIC; add the offset to get UTC.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Clock {
    pub monotonic_ns: u64,
    pub realtime_ns: u64,
    /// realtime − monotonic, read back to back: UTC ns = monotonic ns + this.
    pub monotonic_to_utc_offset_ns: i64,
}

#[derive(Clone, Debug, Serialize, Deserialize, schemars::JsonSchema)]
pub struct MachineState {
    pub online_cpus: usize,
    /// `/proc/loadavg`'s 1, 5 and 15 minute figures.
    pub loadavg: [f64; 3],
    /// Runnable threads at that moment (the fourth field's numerator), this one included.
    pub runnable: u32,
    pub mem_available_kib: u64,
}

struct Start {
    utc: SystemTime,
    clock: Clock,
    machine: MachineState,
}

static START: OnceLock<Start> = OnceLock::new();

/// Marks the command's start: its time, clock offset and machine state are taken here, before
/// the run itself loads the machine.
pub fn mark_start() {
    START.get_or_init(|| Start {
        utc: SystemTime::now(),
        clock: read_clock(),
        machine: machine_state(),
    });
}

fn clock_ns(id: nix::time::ClockId) -> u64 {
    nix::time::clock_gettime(id)
        .map(|t| t.tv_sec() as u64 * 1_000_000_000 + t.tv_nsec() as u64)
        .unwrap_or(0)
}

pub fn read_clock() -> Clock {
    use nix::time::ClockId;
    // The narrower of two bracketing reads gives the offset to within a few hundred ns.
    let m0 = clock_ns(ClockId::CLOCK_MONOTONIC);
    let r = clock_ns(ClockId::CLOCK_REALTIME);
    let m1 = clock_ns(ClockId::CLOCK_MONOTONIC);
    let m = m0 + (m1 - m0) / 2;
    Clock {
        monotonic_ns: m,
        realtime_ns: r,
        monotonic_to_utc_offset_ns: r as i64 - m as i64,
    }
}

pub fn machine_state() -> MachineState {
    use procfs::Current;
    let load = procfs::LoadAverage::current().ok();
    let mem_available_kib = procfs::Meminfo::current()
        .ok()
        .and_then(|m| m.mem_available)
        .map_or(0, |b| b / 1024);
    MachineState {
        online_cpus: std::thread::available_parallelism().map_or(0, |n| n.get()),
        loadavg: load
            .as_ref()
            .map_or([0.0; 3], |l| [l.one, l.five, l.fifteen].map(hundredths)),
        runnable: load.map_or(0, |l| l.cur),
        mem_available_kib,
    }
}

/// A load figure as the kernel prints it (two decimals), without the f32's binary noise.
fn hundredths(x: f32) -> f64 {
    (f64::from(x) * 100.0).round() / 100.0
}

impl Header {
    pub fn new(kind: &str, backend: Option<&str>) -> Header {
        mark_start();
        let start = START.get().expect("marked above");
        let uts = nix::sys::utsname::uname().ok();
        let uname = |f: fn(&nix::sys::utsname::UtsName) -> &std::ffi::OsStr| {
            uts.as_ref()
                .map(|u| f(u).to_string_lossy().into_owned())
                .unwrap_or_default()
        };
        Header {
            schema_version: SCHEMA_VERSION,
            kind: kind.to_string(),
            netpath_version: env!("CARGO_PKG_VERSION").to_string(),
            kernel: uname(|u| u.release()),
            hostname: uname(|u| u.nodename()),
            backend: backend.map(str::to_string),
            command_line: std::env::args().collect(),
            started_utc: humantime::format_rfc3339_micros(start.utc).to_string(),
            clock: start.clock,
            machine: start.machine.clone(),
        }
    }
}

/// One output: the header first, then the command's own fields beside it.
#[derive(Serialize)]
pub struct Versioned<'a, T: Serialize> {
    pub header: Header,
    #[serde(flatten)]
    pub body: &'a T,
}

/// The pretty JSON of `body` (an object) with its header in front.
pub fn to_json<T: Serialize>(kind: &str, backend: Option<&str>, body: &T) -> Result<String> {
    let v = Versioned {
        header: Header::new(kind, backend),
        body,
    };
    Ok(serde_json::to_string_pretty(&v)?)
}

/// `to_json`'s value, for renderers that read it back (the HTML report of a live run).
pub fn to_value<T: Serialize>(
    kind: &str,
    backend: Option<&str>,
    body: &T,
) -> Result<serde_json::Value> {
    let v = Versioned {
        header: Header::new(kind, backend),
        body,
    };
    Ok(serde_json::to_value(&v)?)
}
