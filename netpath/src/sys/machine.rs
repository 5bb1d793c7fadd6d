//! The machine's state around a result, and where the measured threads actually ran.
//!
//! A receiver's wakeup on an idle vCPU costs tens of µs and depends on the idle states the
//! CPU may enter, on the governor, on the hypervisor (steal) and on whatever else runs; every
//! figure netpath prints carries these so two results can be told apart by their conditions.
//! Placement is observed, not assumed: the kernel programs stamp every point of a sampled
//! timeline with the CPU it ran on.

use std::collections::BTreeMap;

use netpath_common::{MAX_POINTS, Point, SkbState};
use serde::Serialize;

use crate::options::{Cpus, Pin, WaitMode};

/// Aggregate CPU times from the first line of `/proc/stat`, in ticks.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CpuTimes {
    pub busy: u64,
    pub idle: u64,
    pub steal: u64,
}

impl CpuTimes {
    /// From `/proc/stat`'s `cpu` line: user nice system irq softirq busy, idle iowait idle,
    /// steal (guest times are inside user).
    pub fn of(c: &procfs::CpuTime) -> CpuTimes {
        let o = |v: Option<u64>| v.unwrap_or(0);
        CpuTimes {
            busy: c.user + c.nice + c.system + o(c.irq) + o(c.softirq),
            idle: c.idle + o(c.iowait),
            steal: o(c.steal),
        }
    }

    pub fn now() -> CpuTimes {
        use procfs::CurrentSI;
        procfs::KernelStats::current()
            .map(|s| CpuTimes::of(&s.total))
            .unwrap_or_default()
    }
}

/// `/proc/loadavg`'s 1, 5 and 15 minute figures, as it prints them.
pub fn loadavg() -> String {
    use procfs::Current;
    procfs::LoadAverage::current()
        .map(|l| format!("{:.2} {:.2} {:.2}", l.one, l.five, l.fifteen))
        .unwrap_or_default()
}

/// The machine's idle and scheduling configuration, and what happened on it during a run.
#[derive(Clone, Debug, Default, Serialize, serde::Deserialize, schemars::JsonSchema)]
pub struct MachineState {
    /// `/sys/devices/system/cpu/cpuidle/current_driver` ("none": no cpuidle driver).
    #[serde(default)]
    pub cpuidle_driver: String,
    #[serde(default)]
    pub cpuidle_governor: String,
    /// Deepest idle state CPU 0 may enter, with its exit latency ("none" if only polling).
    #[serde(default)]
    pub deepest_idle_state: String,
    /// `idle=`, `nohz`, `nohz_full=`, `isolcpus=` … from the kernel command line.
    #[serde(default)]
    pub cmdline: Vec<String>,
    #[serde(default)]
    pub cpus_online: usize,
    /// Share of all CPUs' time stolen by the hypervisor during the run, %.
    #[serde(default)]
    pub steal_pct: f64,
    /// Share of all CPUs' time busy (user, system, irq, softirq) during the run, %.
    #[serde(default)]
    pub busy_pct: f64,
    /// `/proc/loadavg` (1, 5, 15 min) at the end.
    #[serde(default)]
    pub loadavg: String,
    #[serde(default)]
    pub wait: WaitMode,
    #[serde(default)]
    pub cpus: Cpus,
    #[serde(default)]
    pub pin: Pin,
    /// Whether netpath kept the CPUs out of idle states during the run (`--idle`).
    #[serde(default)]
    pub idle: crate::sys::pmqos::Idle,
    /// The machine's CPU latency limit at the end, µs, every process's requests together
    /// (2000000000: nobody asks; 0 while netpath or another holds CPUs awake).
    pub cpu_latency_limit_us: Option<i32>,
}

fn read(p: &str) -> Option<String> {
    std::fs::read_to_string(p)
        .ok()
        .map(|s| s.trim().to_string())
}

fn deepest_idle_state() -> String {
    let base = "/sys/devices/system/cpu/cpu0/cpuidle";
    let mut best = None;
    for i in 0..16 {
        let Some(name) = read(&format!("{base}/state{i}/name")) else {
            break;
        };
        if read(&format!("{base}/state{i}/disable")).as_deref() == Some("1") {
            continue;
        }
        let lat = read(&format!("{base}/state{i}/latency")).unwrap_or_default();
        best = Some(format!("{name} ({lat} µs exit)"));
    }
    best.unwrap_or_else(|| "none".into())
}

/// The kernel command-line words that decide how CPUs idle and tick.
pub fn idle_words(cmdline: &str) -> Vec<String> {
    cmdline
        .split_whitespace()
        .filter(|w| {
            [
                "idle=",
                "nohz",
                "isolcpus=",
                "intel_idle.",
                "processor.max_cstate",
                "cpuidle.",
            ]
            .iter()
            .any(|p| w.starts_with(p))
        })
        .map(String::from)
        .collect()
}

impl MachineState {
    /// The configuration now and the CPU times since `start`.
    pub fn since(start: CpuTimes, wait: WaitMode, cpus: Cpus, pin: Pin) -> MachineState {
        let end = CpuTimes::now();
        let busy = end.busy.saturating_sub(start.busy) as f64;
        let idle = end.idle.saturating_sub(start.idle) as f64;
        let steal = end.steal.saturating_sub(start.steal) as f64;
        let total = (busy + idle + steal).max(1.0);
        MachineState {
            cpuidle_driver: read("/sys/devices/system/cpu/cpuidle/current_driver")
                .unwrap_or_else(|| "none".into()),
            cpuidle_governor: read("/sys/devices/system/cpu/cpuidle/current_governor")
                .or_else(|| read("/sys/devices/system/cpu/cpuidle/current_governor_ro"))
                .unwrap_or_else(|| "none".into()),
            deepest_idle_state: deepest_idle_state(),
            cmdline: idle_words(&read("/proc/cmdline").unwrap_or_default()),
            cpus_online: super::runmode::allowed_cpus().map(|c| c.len()).unwrap_or(0),
            steal_pct: 100.0 * steal / total,
            busy_pct: 100.0 * busy / total,
            loadavg: loadavg(),
            wait,
            cpus,
            pin,
            idle: if crate::sys::pmqos::held() {
                crate::sys::pmqos::Idle::Poll
            } else {
                crate::sys::pmqos::Idle::Deep
            },
            cpu_latency_limit_us: crate::sys::pmqos::current_limit_us(),
        }
    }

    pub fn line(&self) -> String {
        format!(
            "machine: cpuidle {}/{}, deepest idle state {}, cmdline [{}], {} CPUs, {}; during the run busy {:.0}%, steal {:.1}%, load {}",
            self.cpuidle_driver,
            self.cpuidle_governor,
            self.deepest_idle_state,
            self.cmdline.join(" "),
            self.cpus_online,
            self.idle.describe(),
            self.busy_pct,
            self.steal_pct,
            self.loadavg
        )
    }
}

/// Where the client, the server and the NET_RX softirq ran, from the CPU of each point of the
/// sampled timelines, and how many wakeups (socket woken → receive returns) crossed CPUs.
#[derive(
    Clone, Debug, Default, PartialEq, Eq, Serialize, serde::Deserialize, schemars::JsonSchema,
)]
pub struct Placement {
    /// Sampled journeys counted.
    pub samples: u64,
    /// CPU → points: the client's sends (request) and receive returns (response).
    pub client: BTreeMap<u16, u64>,
    /// CPU → points: the server's receive returns (request) and sends (response).
    pub server: BTreeMap<u16, u64>,
    /// CPU → receive passes (`netif_receive_skb`, run in the NET_RX softirq).
    pub softirq: BTreeMap<u16, u64>,
    pub wakeups: u64,
    /// Wakeups whose receive returned on another CPU than the one that woke the socket.
    pub cross_cpu_wakeups: u64,
}

impl Placement {
    pub fn of(samples: &[SkbState]) -> Placement {
        let mut p = Placement::default();
        for s in samples {
            let pts = &s.points[..(s.npoints as usize).min(MAX_POINTS)];
            let at = |pt: Point| pts.iter().find(|x| x.point == pt as u16).map(|x| x.cpu);
            let (send, recv) = (at(Point::SendEnter), at(Point::RecvExit));
            let (sender, receiver) = match s.dir {
                0 => (&mut p.client, &mut p.server),
                1 => (&mut p.server, &mut p.client),
                _ => continue,
            };
            p.samples += 1;
            if let Some(c) = send {
                *sender.entry(c).or_default() += 1;
            }
            if let Some(c) = recv {
                *receiver.entry(c).or_default() += 1;
            }
            for x in pts.iter().filter(|x| x.point == Point::NetifReceive as u16) {
                *p.softirq.entry(x.cpu).or_default() += 1;
            }
            let ready = pts
                .iter()
                .rev()
                .find(|x| x.point == Point::SockReady as u16)
                .map(|x| x.cpu);
            if let (Some(r), Some(c)) = (ready, recv) {
                p.wakeups += 1;
                p.cross_cpu_wakeups += u64::from(r != c);
            }
        }
        p
    }

    pub fn line(&self) -> String {
        let cpus = |m: &BTreeMap<u16, u64>| {
            if m.is_empty() {
                return "unseen".to_string();
            }
            m.iter()
                .map(|(c, n)| format!("cpu{c}×{n}"))
                .collect::<Vec<_>>()
                .join(" ")
        };
        format!(
            "ran on ({} sampled journeys): client {}, server {}, NET_RX softirq {}; wakeups {}, {} crossed CPUs",
            self.samples,
            cpus(&self.client),
            cpus(&self.server),
            cpus(&self.softirq),
            self.wakeups,
            self.cross_cpu_wakeups
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_proc_stat() {
        use procfs::FromReadSI;
        let stat = "cpu  10 1 5 100 2 1 1 3 0 0\ncpu0 10 1 5 100 2 1 1 3 0 0\n\
                    ctxt 7\nbtime 1700000000\nprocesses 9\nprocs_running 1\nprocs_blocked 0\n";
        let s =
            procfs::KernelStats::from_read(stat.as_bytes(), procfs::current_system_info()).unwrap();
        let t = CpuTimes::of(&s.total);
        assert_eq!(
            t,
            CpuTimes {
                busy: 18,
                idle: 102,
                steal: 3
            }
        );
    }

    #[test]
    fn keeps_the_idle_words_of_the_cmdline() {
        let w = idle_words("BOOT_IMAGE=/vmlinuz root=/dev/vda1 idle=poll nohz=off quiet");
        assert_eq!(w, vec!["idle=poll", "nohz=off"]);
    }
}
