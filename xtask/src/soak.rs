//! `cargo xtask soak --minutes N`: runs `netpath compare` in a loop for N minutes and checks
//! that nothing grows after warm-up: each run's peak RSS, open fds and the BPF map memory it
//! holds (sampled while it runs), and the kernel objects left between runs (namespaces,
//! links, nft tables, BPF programs, maps and links). Prints one line per run and a summary;
//! exits non-zero if anything grew or a run failed.

use std::{
    path::PathBuf,
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use anyhow::{Context as _, bail};
use clap::Args;

use crate::{cmd, paths, setup};

#[derive(Args, Debug)]
pub struct SoakArgs {
    /// How long to keep running compare.
    #[arg(long, default_value_t = 30, value_parser = clap::value_parser!(u64).range(1..=1440))]
    pub minutes: u64,
    /// The netpath binary (default: build it in release mode).
    #[arg(long)]
    pub netpath: Option<PathBuf>,
    /// Hold an exclusive flock on this file during each run and its object count (so that
    /// other users of the machine's kernel objects, e.g. tests, do not run in between).
    #[arg(long)]
    pub lock: Option<PathBuf>,
    /// Runs that count as warm-up (their figures are the baseline).
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u64).range(1..=100))]
    pub warmup: u64,
    /// Arguments for each `netpath compare`.
    #[arg(
        trailing_var_arg = true,
        allow_hyphen_values = true,
        default_values_t = ["-d", "bridge,host", "-n", "5000", "--bulk", "1", "--burst-duration", "0.5"].map(String::from)
    )]
    pub args: Vec<String>,
}

/// One of a run's figures, by name.
type Figure = fn(&Sample) -> u64;

/// One run's figures.
#[derive(Clone, Copy, Debug, Default)]
struct Sample {
    peak_rss_kib: u64,
    peak_fds: u64,
    peak_map_bytes: u64,
    /// Kernel objects of any kind present after the run.
    objects_after: u64,
}

pub fn run(args: &SoakArgs) -> anyhow::Result<()> {
    setup::run(&setup::SetupArgs {
        soak: true,
        ..Default::default()
    })?;
    let exe = match &args.netpath {
        Some(p) => p.clone(),
        None => paths::release_netpath()?,
    };
    let deadline = Instant::now() + Duration::from_secs(args.minutes * 60);
    let start_objects = objects();
    println!(
        "soak: {} minutes of `{} compare {}`",
        args.minutes,
        exe.display(),
        args.args.join(" ")
    );
    println!("soak: kernel objects before: {start_objects}");
    let mut samples = Vec::new();
    while Instant::now() < deadline {
        let guard = args.lock.as_deref().map(Lock::take).transpose()?;
        let s = one_run(&exe, &args.args)?;
        drop(guard);
        println!(
            "run {:>3}: peak RSS {} KiB, peak fds {}, peak BPF map memory {} KiB, kernel objects after {}",
            samples.len() + 1,
            s.peak_rss_kib,
            s.peak_fds,
            s.peak_map_bytes / 1024,
            s.objects_after
        );
        samples.push(s);
    }
    summarize(&samples, args.warmup as usize, start_objects)
}

fn summarize(samples: &[Sample], warmup: usize, start_objects: u64) -> anyhow::Result<()> {
    if samples.len() <= warmup {
        bail!(
            "only {} runs: fewer than the warm-up ({warmup}); soak longer",
            samples.len()
        );
    }
    let (warm, rest) = samples.split_at(warmup);
    let max = |v: &[Sample], f: fn(&Sample) -> u64| v.iter().map(f).max().unwrap_or(0);
    let mut grew = Vec::new();
    // A fresh process per run: its peaks may wobble by allocator and scheduling noise, so
    // growth is a later run above the warm-up's highest by more than 10%.
    let figures: [(&str, Figure); 3] = [
        ("peak RSS KiB", |s| s.peak_rss_kib),
        ("peak fds", |s| s.peak_fds),
        ("peak BPF map bytes", |s| s.peak_map_bytes),
    ];
    for (name, f) in figures {
        let (w, r) = (max(warm, f), max(rest, f));
        println!(
            "soak: {name}: warm-up max {w}, later max {r}, last {}",
            f(samples.last().unwrap())
        );
        if r > w + w / 10 {
            grew.push(format!("{name} {w} → {r}"));
        }
    }
    let last = samples.last().unwrap().objects_after;
    println!("soak: kernel objects: before {start_objects}, after the last run {last}");
    if last > start_objects {
        grew.push(format!("kernel objects {start_objects} → {last}"));
    }
    println!("soak: {} runs", samples.len());
    if !grew.is_empty() {
        bail!("grew after warm-up: {}", grew.join(", "));
    }
    Ok(())
}

fn one_run(exe: &PathBuf, args: &[String]) -> anyhow::Result<Sample> {
    let mut child = Command::new(exe)
        .arg("compare")
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .spawn()
        .with_context(|| format!("cannot start {}", exe.display()))?;
    let pid = child.id();
    let mut s = Sample::default();
    while child.try_wait()?.is_none() {
        s.peak_rss_kib = s.peak_rss_kib.max(hwm_kib(pid));
        s.peak_fds = s.peak_fds.max(count_dir(&format!("/proc/{pid}/fd")));
        s.peak_map_bytes = s.peak_map_bytes.max(map_bytes_of(pid));
        std::thread::sleep(Duration::from_millis(250));
    }
    let st = child.wait()?;
    if !st.success() {
        bail!("netpath compare failed ({st})");
    }
    s.objects_after = objects();
    Ok(s)
}

fn count_dir(p: &str) -> u64 {
    std::fs::read_dir(p).map(|d| d.count() as u64).unwrap_or(0)
}

/// The process's RSS high-water mark (VmHWM), KiB; 0 once it is gone.
fn hwm_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|t| {
            t.lines()
                .find_map(|l| l.strip_prefix("VmHWM:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        })
        .unwrap_or(0)
}

/// Memory of the BPF maps `pid` holds open (`memlock` in the fdinfo of each map fd).
fn map_bytes_of(pid: u32) -> u64 {
    let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fdinfo")) else {
        return 0;
    };
    fds.flatten()
        .filter_map(|e| std::fs::read_to_string(e.path()).ok())
        .filter(|t| t.lines().any(|l| l.starts_with("map_id:")))
        .filter_map(|t| {
            t.lines()
                .find_map(|l| l.strip_prefix("memlock:"))
                .and_then(|v| v.trim().parse::<u64>().ok())
        })
        .sum()
}

/// netpath's kernel objects (namespaces, links and nft tables named `np…`) plus every BPF
/// program, map and link on the machine (between locked runs nobody else's are loaded).
fn objects() -> u64 {
    let lines = |c: &mut Command| cmd::probe(c).map(|o| o.lines().count() as u64).unwrap_or(0);
    let sh = |script: &str| lines(Command::new("sh").args(["-c", script]));
    count_dir("/run/netns")
        + sh("ip -o link show | awk -F': ' '{print $2}' | grep '^np'")
        + sh("nft list tables | grep ' np'")
        + sh("bpftool prog show | grep '^[0-9]*:'")
        + sh("bpftool map show | grep '^[0-9]*:'")
        + sh("bpftool link show | grep '^[0-9]*:'")
}

/// An flock held until drop.
struct Lock {
    _file: std::fs::File,
}

impl Lock {
    fn take(p: &std::path::Path) -> anyhow::Result<Lock> {
        use std::os::fd::AsRawFd as _;
        let f = std::fs::OpenOptions::new()
            .read(true)
            .open(p)
            .or_else(|_| std::fs::File::create(p))
            .with_context(|| format!("cannot open {}", p.display()))?;
        // SAFETY: flock on an fd we own; released when the file closes.
        if unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX) } != 0 {
            bail!("flock {}: {}", p.display(), std::io::Error::last_os_error());
        }
        Ok(Lock { _file: f })
    }
}
