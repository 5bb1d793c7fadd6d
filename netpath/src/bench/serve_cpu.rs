//! The serve-left-on section's CPU per request: what netpath takes against what the application
//! takes, over one benchmark run.
//!
//! - netpath's programs: their run time by the kernel's BPF statistics (`serve --prog-stats`,
//!   which holds a `BPF_ENABLE_STATS` fd), read from serve's own `/metrics` before and after;
//!   the hooks' dispatch is not in it (the statistics start inside the program). The
//!   statistics' own clock reads are: an empty program on each of the same hooks, counted the
//!   same way in a run of its own, gives that floor per run, which is taken out once a run
//!   (`less_floor`), as the bench's lab figures do.
//! - serve's process: every thread's run time (`/proc/<pid>/task/*/schedstat`, ns).
//! - the application: the server container's cgroup CPU (cgroup v1 `cpuacct.usage` or v2
//!   `cpu.stat`'s `usage_usec`).
//! - the machine's busy CPU: `/proc/stat`, all CPUs.
use std::io::{Read as _, Write as _};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context as _, Result, bail};
use serde::Serialize;

use crate::sys::machine::CpuTimes;

/// The metrics whose sums are netpath's program run time and runs (`render::prom`).
const RUN_SECONDS: &str = "netpath_bpf_program_run_seconds_total";
const RUNS: &str = "netpath_bpf_program_runs_total";

/// CPU per request of one run (or the median of the rounds'), ns.
#[derive(Clone, Debug, Default, PartialEq, Serialize, schemars::JsonSchema)]
pub struct CpuPerRequest {
    /// Program runs per request.
    pub runs: f64,
    /// netpath's kernel programs' run time (BPF statistics), ns per request.
    pub programs_ns: f64,
    /// The statistics' floor in it: the runs at an empty program's run time, ns per request.
    pub floor_ns: f64,
    /// The programs' own work: `programs_ns` less `floor_ns`.
    pub body_ns: f64,
    /// serve's process, all threads, ns per request.
    pub serve_ns: f64,
    /// The server container's cgroup CPU, ns per request.
    pub app_ns: f64,
    /// The machine's busy CPU (every CPU), ns per request.
    pub busy_ns: f64,
    /// netpath (the programs' own work + serve) over the machine's busy CPU, %.
    pub netpath_pct_of_busy: f64,
}

impl CpuPerRequest {
    /// Each field's median over the rounds (None without a round).
    pub fn median(rounds: &[CpuPerRequest]) -> Option<CpuPerRequest> {
        let m = |f: fn(&CpuPerRequest) -> f64| crate::sys::stats::median(rounds.iter().map(f));
        Some(CpuPerRequest {
            runs: m(|c| c.runs)?,
            programs_ns: m(|c| c.programs_ns)?,
            floor_ns: m(|c| c.floor_ns)?,
            body_ns: m(|c| c.body_ns)?,
            serve_ns: m(|c| c.serve_ns)?,
            app_ns: m(|c| c.app_ns)?,
            busy_ns: m(|c| c.busy_ns)?,
            netpath_pct_of_busy: m(|c| c.netpath_pct_of_busy)?,
        })
    }

    /// The programs' run time per run (an empty program's, in the floor's run).
    pub fn per_run_ns(&self) -> Option<f64> {
        (self.runs > 0.0).then(|| self.programs_ns / self.runs)
    }

    /// Takes the statistics' floor, `floor_per_run` ns a run, out of the programs' time.
    pub fn less_floor(&mut self, floor_per_run: f64) {
        self.floor_ns = self.runs * floor_per_run;
        self.body_ns = (self.programs_ns - self.floor_ns).max(0.0);
        self.netpath_pct_of_busy = share(self.body_ns + self.serve_ns, self.busy_ns);
    }
}

fn share(part: f64, whole: f64) -> f64 {
    if whole > 0.0 {
        part / whole * 100.0
    } else {
        0.0
    }
}

/// The counters at one instant.
pub struct Meter {
    programs_s: f64,
    runs: f64,
    serve_ns: u64,
    app_ns: u64,
    busy_ticks: u64,
}

impl Meter {
    /// Reads the counters of serve's process `pid`, the application's cgroup CPU file `cgroup`
    /// (`container_cpu_file`) and the machine now, and the programs' run time from serve's
    /// metrics at `addr` after `publish` (serve publishes the statistics every 100 ms: after a
    /// run, its last runs are published only then).
    pub fn read(addr: SocketAddr, pid: u32, cgroup: &Path, publish: Duration) -> Result<Meter> {
        let (serve_ns, app_ns, busy_ticks) = (process_ns(pid)?, cgroup_ns(cgroup)?, busy());
        std::thread::sleep(publish);
        let text = scrape(addr).context("scraping serve's /metrics")?;
        Ok(Meter {
            programs_s: metric_sum(&text, RUN_SECONDS)?,
            runs: metric_sum(&text, RUNS)?,
            serve_ns,
            app_ns,
            busy_ticks,
        })
    }

    /// What happened from `self` to `later`, per request of the `requests` made in between.
    pub fn per_request(&self, later: &Meter, requests: u64) -> CpuPerRequest {
        let n = requests.max(1) as f64;
        let programs = (later.programs_s - self.programs_s).max(0.0) * 1e9;
        let serve = later.serve_ns.saturating_sub(self.serve_ns) as f64;
        let app = later.app_ns.saturating_sub(self.app_ns) as f64;
        let busy = later.busy_ticks.saturating_sub(self.busy_ticks) as f64 * 1e9 / clk_tck();
        CpuPerRequest {
            runs: (later.runs - self.runs).max(0.0) / n,
            programs_ns: programs / n,
            floor_ns: 0.0,
            body_ns: programs / n,
            serve_ns: serve / n,
            app_ns: app / n,
            busy_ns: busy / n,
            netpath_pct_of_busy: share(programs + serve, busy),
        }
    }
}

/// serve's /metrics page, if it answers 200.
pub(super) fn scrape(addr: SocketAddr) -> Result<String> {
    let mut c = std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(1))?;
    c.set_read_timeout(Some(Duration::from_secs(5)))?;
    c.write_all(b"GET /metrics HTTP/1.0\r\nHost: localhost\r\n\r\n")?;
    let mut text = String::new();
    c.read_to_string(&mut text)?;
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    if head.get(9..12) != Some("200") {
        bail!(
            "serve's /metrics answered {}",
            head.lines().next().unwrap_or("")
        );
    }
    Ok(body.to_string())
}

fn busy() -> u64 {
    CpuTimes::now().busy
}

/// The sum of metric `name`'s series (every program's) in a Prometheus text exposition.
fn metric_sum(text: &str, name: &str) -> Result<f64> {
    let mut seen = false;
    let mut sum = 0.0;
    for line in text.lines() {
        let Some(rest) = line.strip_prefix(name) else {
            continue;
        };
        // `name{labels} value` or `name value`; not a longer name that starts the same.
        if !(rest.starts_with('{') || rest.starts_with(' ')) {
            continue;
        }
        if let Some(v) = rest.rsplit(' ').next().and_then(|v| v.parse::<f64>().ok()) {
            sum += v;
            seen = true;
        }
    }
    if !seen {
        bail!("serve's metrics have no {name} (is --prog-stats on?)");
    }
    Ok(sum)
}

/// Run time of every thread of `pid`, ns.
fn process_ns(pid: u32) -> Result<u64> {
    let p = procfs::process::Process::new(pid as i32)?;
    let mut ns = 0;
    for t in p.tasks()?.flatten() {
        ns += t.schedstat().map_or(0, |s| s.sum_exec_runtime);
    }
    Ok(ns)
}

/// The CPU accounting file of the cgroup `pid` runs in: v1's `cpuacct.usage` (ns), else v2's
/// `cpu.stat`.
pub fn container_cpu_file(pid: u32) -> Result<PathBuf> {
    let groups = procfs::process::Process::new(pid as i32)?.cgroups()?;
    for g in &groups {
        if g.controllers.iter().any(|c| c == "cpuacct") {
            let rel = g.pathname.trim_start_matches('/');
            for mount in ["cpu,cpuacct", "cpuacct", "cpuacct,cpu"] {
                let f = Path::new("/sys/fs/cgroup").join(mount).join(rel);
                if f.join("cpuacct.usage").exists() {
                    return Ok(f.join("cpuacct.usage"));
                }
            }
        }
    }
    for g in &groups {
        if g.hierarchy == 0 {
            let rel = g.pathname.trim_start_matches('/');
            for root in ["/sys/fs/cgroup", "/sys/fs/cgroup/unified"] {
                let f = Path::new(root).join(rel).join("cpu.stat");
                if f.exists() {
                    return Ok(f);
                }
            }
        }
    }
    bail!("no CPU accounting file for the cgroup of process {pid}")
}

/// A cgroup's CPU so far, ns.
fn cgroup_ns(file: &Path) -> Result<u64> {
    let text = std::fs::read_to_string(file).with_context(|| format!("{}", file.display()))?;
    if file.ends_with("cpuacct.usage") {
        return Ok(text.trim().parse()?);
    }
    let usec = (text.lines())
        .find_map(|l| l.strip_prefix("usage_usec "))
        .context("cpu.stat without usage_usec")?;
    Ok(usec.trim().parse::<u64>()? * 1000)
}

/// Clock ticks per second (`/proc`'s unit of CPU time).
pub(super) fn clk_tck() -> f64 {
    // SAFETY: sysconf has no preconditions.
    let t = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if t > 0 { t as f64 } else { 100.0 }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn program_seconds_sums_the_run_time_series_only() {
        let t = "# TYPE netpath_bpf_program_run_seconds_total counter\n\
                 netpath_bpf_program_run_seconds_total{program=\"a\"} 0.25\n\
                 netpath_bpf_program_run_seconds_total{program=\"b\"} 0.5\n\
                 netpath_bpf_program_runs_total{program=\"a\"} 99\n";
        assert_eq!(metric_sum(t, RUN_SECONDS).unwrap(), 0.75);
        assert_eq!(metric_sum(t, RUNS).unwrap(), 99.0);
        assert!(metric_sum("netpath_bpf_program_runs_total 3\n", RUN_SECONDS).is_err());
    }

    #[test]
    fn a_run_per_request_and_its_share() {
        let a = Meter {
            programs_s: 1.0,
            runs: 0.0,
            serve_ns: 100,
            app_ns: 1_000,
            busy_ticks: 10,
        };
        let b = Meter {
            programs_s: 1.000_001,
            runs: 20.0,
            serve_ns: 1_100,
            app_ns: 11_000,
            busy_ticks: 10 + clk_tck() as u64 / 100,
        };
        let c = a.per_request(&b, 10);
        assert!((c.programs_ns - 100.0).abs() < 1e-3, "{c:?}");
        assert_eq!((c.serve_ns, c.app_ns), (100.0, 1_000.0));
        assert!((c.busy_ns - 1e6).abs() < 1.0, "{c:?}");
        assert!((c.netpath_pct_of_busy - 0.02).abs() < 1e-6, "{c:?}");
        // Two runs a request at 30 ns of floor each: 60 of the 100 ns are the statistics'.
        let mut c = c;
        assert_eq!(c.runs, 2.0);
        assert!((c.per_run_ns().unwrap() - 50.0).abs() < 1e-3, "{c:?}");
        c.less_floor(30.0);
        assert!(
            (c.floor_ns - 60.0).abs() < 1e-9 && (c.body_ns - 40.0).abs() < 1e-3,
            "{c:?}"
        );
        assert!((c.netpath_pct_of_busy - 0.014).abs() < 1e-6, "{c:?}");
    }

    #[test]
    fn own_process_and_cgroup_are_readable() {
        let me = std::process::id();
        assert!(process_ns(me).unwrap() > 0);
        let f = container_cpu_file(me).unwrap();
        assert!(cgroup_ns(&f).unwrap() > 0, "{}", f.display());
    }
}
