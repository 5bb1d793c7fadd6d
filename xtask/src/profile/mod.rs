//! `cargo xtask profile`: what netpath's kernel programs spend their time on. `netpath bench`
//! says how much (bpf_stats, ns per round trip); this says on what: a CPU profile of one traced
//! run (`perf record -a -g`, cpu-clock), each sample whose stack holds a tracepoint's BPF
//! dispatch split by its innermost frame into the dispatch itself, the programs' own code,
//! clock reads, kernel memory reads, map helpers and the rest, per program.
//!
//! Then the source lines the programs' own code spent it on (`lines.rs`). The scheduler
//! programs run with interrupts off, where a cpu-clock sample cannot land: they are missing
//! here (their cost is in bench's kernel cost).

mod lines;

use std::{collections::BTreeMap, path::Path, process::Command, time::Duration};

use anyhow::Context as _;
use clap::Args;

use crate::{cmd, paths, setup};

#[derive(Args, Debug)]
pub struct ProfileArgs {
    /// The lab driver of the traced run.
    #[arg(short, long, default_value = "bridge")]
    pub driver: String,
    /// Round trips of the traced run.
    #[arg(short = 'n', long, default_value_t = 40_000)]
    pub requests: u64,
    /// How the receivers wait (`netpath compare --wait`).
    #[arg(long, default_value = "block")]
    pub wait: String,
    /// Samples per second and CPU.
    #[arg(long, default_value_t = 10_000)]
    pub freq: u64,
    /// Source lines of the programs' code to list, the busiest first.
    #[arg(long, default_value_t = 30)]
    pub lines: usize,
}

/// Where a sample inside a tracepoint's BPF dispatch was, by its innermost frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Part {
    /// `bpf_trace_runN` and what it calls around the program (RCU, migration, recursion check).
    Dispatch,
    /// The JIT-compiled code of a netpath program or its subprograms.
    Code,
    /// `bpf_ktime_get_ns` down to the clock source.
    Clock,
    /// `bpf_probe_read_kernel`: reading kernel structs at BTF offsets.
    KernelRead,
    /// Map and ring-buffer helpers that are not inlined (hash maps, ring buffer).
    Maps,
    Other,
}

pub const PARTS: [Part; 6] = [
    Part::Dispatch,
    Part::Code,
    Part::Clock,
    Part::KernelRead,
    Part::Maps,
    Part::Other,
];

impl Part {
    fn of(leaf: &str) -> Part {
        let any = |names: &[&str]| names.iter().any(|n| leaf.starts_with(n));
        if leaf.starts_with("bpf_prog_") {
            Part::Code
        } else if any(&["bpf_trace_run", "__bpf_trace_", "__rcu_read", "migrate_"]) {
            Part::Dispatch
        } else if any(&["read_tsc", "ktime_get", "bpf_ktime_get"]) {
            Part::Clock
        } else if any(&["copy_from_kernel_nofault", "bpf_probe_read_kernel"]) {
            Part::KernelRead
        } else if any(&[
            "htab_",
            "__htab",
            "lookup_nulls",
            "bpf_map_",
            "bpf_ringbuf",
            "__bpf_ringbuf",
        ]) {
            Part::Maps
        } else {
            Part::Other
        }
    }

    fn name(self) -> &'static str {
        match self {
            Part::Dispatch => "dispatch",
            Part::Code => "program code",
            Part::Clock => "clock reads",
            Part::KernelRead => "kernel reads",
            Part::Maps => "map helpers",
            Part::Other => "other",
        }
    }
}

/// Samples inside BPF dispatch, per program (`(dispatch)` before a program was entered) and
/// part, and the count of all samples read.
#[derive(Debug, Default)]
pub struct Profile {
    pub samples: u64,
    pub by_prog: BTreeMap<String, BTreeMap<Part, u64>>,
    /// The address of every sample in a program's own code.
    pub code_ips: Vec<u64>,
}

impl Profile {
    /// Reads `perf script` output: a header line per sample, then its frames innermost first,
    /// one per line (`<address> <symbol>+<offset> (<object>)`), a blank line between samples.
    pub fn parse(script: &str) -> Profile {
        let mut p = Profile::default();
        for sample in script.split("\n\n") {
            let lines: Vec<Vec<&str>> = sample
                .trim()
                .lines()
                .skip(1)
                .map(|l| l.split_whitespace().collect())
                .collect();
            let frames: Vec<&str> = lines
                .iter()
                .filter_map(|l| l.get(1))
                .map(|s| s.split('+').next().unwrap_or(s))
                .collect();
            if frames.is_empty() {
                continue;
            }
            p.samples += 1;
            let Some(run) = frames.iter().position(|f| f.starts_with("bpf_trace_run")) else {
                continue;
            };
            // The outermost program frame below the dispatch: the program, not a subprogram.
            let prog = frames[..run]
                .iter()
                .rev()
                .find(|f| f.starts_with("bpf_prog_"))
                .map_or("(dispatch)".to_string(), |f| prog_name(f));
            let part = Part::of(frames[0]);
            *p.by_prog.entry(prog).or_default().entry(part).or_default() += 1;
            if part == Part::Code
                && let Some(ip) = lines[0]
                    .first()
                    .and_then(|a| u64::from_str_radix(a, 16).ok())
            {
                p.code_ips.push(ip);
            }
        }
        p
    }

    pub fn part_total(&self, part: Part) -> u64 {
        self.by_prog.values().filter_map(|m| m.get(&part)).sum()
    }

    pub fn bpf_total(&self) -> u64 {
        self.by_prog.values().flat_map(|m| m.values()).sum()
    }
}

/// `bpf_prog_<tag>_<name>` → `<name>`.
fn prog_name(sym: &str) -> String {
    let rest = sym.trim_start_matches("bpf_prog_");
    rest.split_once('_').map_or(rest, |(_, n)| n).to_string()
}

pub fn run(args: &ProfileArgs) -> anyhow::Result<()> {
    setup::run(&setup::SetupArgs {
        profile: true,
        ..Default::default()
    })?;
    let netpath = paths::release_netpath()?;
    let dir = paths::target_dir(&paths::workspace_root())?.join("profile");
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let data = dir.join("perf.data");
    let (freq, n) = (args.freq.to_string(), args.requests.to_string());
    let mut record = Command::new("perf");
    record
        .args(["record", "-a", "-g", "-e", "cpu-clock", "-F", &freq, "-o"])
        .arg(&data)
        .arg("--")
        .arg(&netpath)
        .args(["compare", "-d", &args.driver, "--rounds", "1", "-n", &n])
        .args(["--bulk", "0", "--burst", "0", "--wait", &args.wait])
        // A given run cost skips the calibration, whose attached runs would land in the profile.
        .env("NETPATH_RUN_COST", "50");
    println!("$ {}", cmd::display(&record));
    let mut child = record.spawn().context("running perf record")?;
    // The programs' line tables, taken while they are loaded.
    let mut lines = lines::Lines::default();
    while child.try_wait()?.is_none() {
        lines.add_loaded();
        std::thread::sleep(Duration::from_millis(500));
    }
    let status = child.wait()?;
    anyhow::ensure!(status.success(), "perf record failed: {status}");
    lines.seal();
    let profile = Profile::parse(&script(&data)?);
    print!("{}", report(&profile, args));
    print!("{}", line_report(&profile, &lines, args.lines));
    Ok(())
}

/// The source lines the programs' own code samples fell on, the busiest first.
fn line_report(p: &Profile, lines: &lines::Lines, top: usize) -> String {
    let mut by_line: BTreeMap<&lines::Line, u64> = BTreeMap::new();
    let mut unknown = 0;
    for ip in &p.code_ips {
        match lines.at(*ip) {
            Some(l) => *by_line.entry(l).or_default() += 1,
            None => unknown += 1,
        }
    }
    let total = p.code_ips.len().max(1) as f64;
    let mut rows: Vec<_> = by_line.into_iter().collect();
    rows.sort_by_key(|(_, n)| std::cmp::Reverse(*n));
    let mut t = table(&["line", "source", "samples", "share"], 2);
    for (l, n) in rows.into_iter().take(top) {
        t.add_row(vec![
            format!("{}:{}", l.file, l.number),
            l.text.chars().take(80).collect(),
            n.to_string(),
            format!("{:.1}%", 100.0 * n as f64 / total),
        ]);
    }
    format!(
        "\nprogram code by source line ({} samples, {unknown} at no known line):\n{}\n",
        p.code_ips.len(),
        trimmed(&t)
    )
}

fn script(data: &Path) -> anyhow::Result<String> {
    let out = Command::new("perf")
        .args(["script", "-i"])
        .arg(data)
        .output()
        .context("running perf script")?;
    anyhow::ensure!(out.status.success(), "perf script failed: {}", out.status);
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// The split of all programs' time, then per program, as ns per round trip (samples / rate /
/// round trips) and shares.
pub fn report(p: &Profile, args: &ProfileArgs) -> String {
    let bpf = p.bpf_total();
    let ns = |s: u64| s as f64 * 1e9 / args.freq as f64 / args.requests as f64;
    let pct = |s: u64, of: u64| 100.0 * s as f64 / of.max(1) as f64;
    let mut out = format!(
        "{} samples, {} inside BPF dispatch ({:.0} ns per round trip on {}, wait {})\n\n",
        p.samples,
        bpf,
        ns(bpf),
        args.driver,
        args.wait
    );
    let mut t = table(&["part", "samples", "share", "ns/RT"], 1);
    for part in PARTS {
        let s = p.part_total(part);
        t.add_row(vec![
            part.name().to_string(),
            s.to_string(),
            format!("{:.0}%", pct(s, bpf)),
            format!("{:.0}", ns(s)),
        ]);
    }
    out += &format!("{}\n\n", trimmed(&t));
    let mut header = vec!["program", "samples", "ns/RT"];
    header.extend(PARTS.iter().map(|p| p.name()));
    let mut t = table(&header, 1);
    let mut progs: Vec<_> = p.by_prog.iter().collect();
    progs.sort_by_key(|(_, m)| std::cmp::Reverse(m.values().sum::<u64>()));
    for (name, parts) in progs {
        let total: u64 = parts.values().sum();
        let mut row = vec![name.clone(), total.to_string(), format!("{:.0}", ns(total))];
        row.extend(
            PARTS
                .iter()
                .map(|part| format!("{:.0}%", pct(parts.get(part).copied().unwrap_or(0), total))),
        );
        t.add_row(row);
    }
    out += &format!("{}\n", trimmed(&t));
    out += "(the scheduler programs run with interrupts off, where cpu-clock cannot sample: see \
            `netpath bench`'s kernel cost for them)\n";
    out
}

/// The table's lines without trailing blanks.
fn trimmed(t: &comfy_table::Table) -> String {
    t.lines()
        .map(|l| l.trim_end().to_string())
        .collect::<Vec<_>>()
        .join("\n")
}

/// A borderless table: the first `left` columns (names) left-aligned, figures right-aligned.
fn table(header: &[&str], left: usize) -> comfy_table::Table {
    let mut t = comfy_table::Table::new();
    t.load_style(comfy_table::presets::NOTHING)
        .set_header(header.to_vec());
    for i in left..header.len() {
        if let Some(c) = t.column_mut(i) {
            c.set_cell_alignment(comfy_table::CellAlignment::Right);
        }
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;

    const SCRIPT: &str = "\
np-rr-cli 10 [000] 1.0: cpu-clock:
\tffff1 read_tsc+0x5 ([kernel.kallsyms])
\tffff2 ktime_get_mono_fast_ns+0x1 ([kernel.kallsyms])
\tffff3 bpf_prog_aa_{closure#0}+0x10 (bpf_prog_aa_{closure#0})
\tffff4 bpf_prog_bb_net_dev_queue+0x20 (bpf_prog_bb_net_dev_queue)
\tffff5 bpf_trace_run1+0x30 ([kernel.kallsyms])
\tffff6 __dev_queue_xmit+0x40 ([kernel.kallsyms])

np-rr-cli 10 [000] 1.1: cpu-clock:
\tffff3 bpf_prog_aa_{closure#0}+0x11 (bpf_prog_aa_{closure#0})
\tffff4 bpf_prog_bb_net_dev_queue+0x20 (bpf_prog_bb_net_dev_queue)
\tffff5 bpf_trace_run1+0x30 ([kernel.kallsyms])

np-rr-srv 11 [001] 1.2: cpu-clock:
\tffff5 bpf_trace_run3+0x31 ([kernel.kallsyms])
\tffff7 call_trace_sock_recv_length+0x3 ([kernel.kallsyms])

swapper 0 [001] 1.3: cpu-clock:
\tffff8 pv_native_safe_halt+0xb ([kernel.kallsyms])
";

    #[test]
    fn samples_split_by_program_and_innermost_frame() {
        let p = Profile::parse(SCRIPT);
        assert_eq!(p.samples, 4);
        assert_eq!(p.bpf_total(), 3);
        let q = &p.by_prog["net_dev_queue"];
        assert_eq!(q.get(&Part::Clock), Some(&1));
        assert_eq!(q.get(&Part::Code), Some(&1));
        assert_eq!(p.by_prog["(dispatch)"].get(&Part::Dispatch), Some(&1));
        assert_eq!(p.part_total(Part::KernelRead), 0);
        // The one sample in a program's own code, by its address.
        assert_eq!(p.code_ips, [0xffff3]);
    }

    #[test]
    fn report_gives_ns_per_round_trip() {
        let p = Profile::parse(SCRIPT);
        let args = ProfileArgs {
            driver: "bridge".into(),
            requests: 1000,
            wait: "block".into(),
            freq: 10_000,
            lines: 10,
        };
        // 3 samples at 10 kHz = 300 µs over 1000 round trips = 300 ns each.
        let r = report(&p, &args);
        assert!(
            r.starts_with("4 samples, 3 inside BPF dispatch (300 ns per round trip"),
            "{r}"
        );
        assert!(r.contains("net_dev_queue"), "{r}");
    }
}
