//! `cargo xtask test`: setup, build, clippy, rustfmt, unit tests, then netpath's tests as
//! root, one test binary at a time with `--test-threads=1` (they share kernel state:
//! network namespaces, attached programs, nftables).
//!
//! Ends with one line `N passed, M failed`, summed from the libtest result lines of every
//! test binary run. A step that fails without a libtest count of its own (clippy, fmt, a
//! test binary that does not compile or crashes) adds one to the failures, so `0 failed`
//! means everything passed. Later steps (a qemu kernel, real Docker networks) are more
//! calls into [`Report`] from [`run`].
//!
//! The last step runs the same privileged tests again inside qemu VMs on Debian's 6.1 and
//! 6.12 cloud kernels (see `vm/mod.rs`); `--no-vm` leaves it out.

use std::{
    io::{BufRead as _, BufReader},
    path::{Path, PathBuf},
    process::{Command, Stdio},
    time::Instant,
};

use anyhow::Context as _;
use cargo_metadata::{Message, TargetKind};
use clap::Args;

use crate::{cmd, counts::Counts, dockerd, paths::workspace_root, setup, vm};

/// The package whose tests need root and run one thread at a time.
const PRIVILEGED_PACKAGE: &str = "netpath";
/// The kernel-side crate: built for bpfel by netpath's build.rs, it has no host tests.
const EBPF_PACKAGE: &str = "netpath-ebpf";

#[derive(Args, Debug, Default)]
pub struct TestArgs {
    /// Skip the tests on the VM kernels, 6.1 and 6.12, under qemu (`cargo xtask vm-test`).
    #[arg(long)]
    pub no_vm: bool,
}

pub fn run(args: &TestArgs) -> anyhow::Result<()> {
    let start = Instant::now();
    step("setup");
    setup::run(&setup::SetupArgs {
        tests: true,
        vm: !args.no_vm,
        ..Default::default()
    })?;
    let setup_time = secs(start);

    let root = workspace_root();
    let cargo = |args: &[&str]| {
        let mut c = Command::new("cargo");
        c.args(args).current_dir(&root);
        c
    };
    // Host crates only: the eBPF crate is `no_std`/`no_main` for bpfel, built solely through
    // netpath's build.rs (aya-build, which this build runs) and linted for its own target.
    let host = |subcommand: &str, args: &[&str]| {
        let mut c = cargo(&[subcommand, "--workspace", "--exclude", EBPF_PACKAGE]);
        c.args(args);
        c
    };
    let mut report = Report::default();
    report
        .steps
        .push(format!("{:<7} setup ({setup_time})", "ok"));

    if report.check("build", &mut host("build", &["--all-targets"])) {
        // Clippy's wrapper gives netpath's build script a new hash; without the skip it would
        // build the eBPF object again from scratch, and clippy (eBPF) covers that crate.
        report.check(
            "clippy",
            host("clippy", &["--all-targets", "--", "-D", "warnings"]).env("AYA_BUILD_SKIP", "1"),
        );
        report.check(
            "clippy (eBPF)",
            &mut cargo(&[
                "+nightly",
                "clippy",
                "--package",
                EBPF_PACKAGE,
                "--target",
                "bpfel-unknown-none",
                "-Z",
                "build-std=core",
                "--",
                "-D",
                "warnings",
            ]),
        );
        report.check("fmt", &mut cargo(&["fmt", "--all", "--", "--check"]));
        report.tests(
            "unit tests",
            &mut host("test", &["--exclude", PRIVILEGED_PACKAGE, "--no-fail-fast"]),
        );
        // tests/docker.rs needs a daemon: started here if none answers, stopped after.
        let dockerd = dockerd::ensure_dockerd()
            .inspect_err(|e| eprintln!("no Docker daemon for the docker tests: {e:#}"));
        report.privileged_tests(&root, host("test", &["--no-run"]), PRIVILEGED_PACKAGE);
        drop(dockerd);
        if args.no_vm {
            report.skipped.push("tests in the VM (--no-vm)".into());
        } else {
            report.vm(&vm::VmArgs {
                ci: true,
                ..vm::VmArgs::default()
            });
        }
    } else {
        report
            .skipped
            .push("clippy, fmt and tests (the build failed)".into());
    }

    report.print_summary();
    println!("in {}", secs(start));
    if report.failed > 0 {
        std::process::exit(1);
    }
    Ok(())
}

fn step(name: &str) {
    println!("\n==> {name}");
}

/// A step's wall time for the summary: CI allows 90 minutes and these show where they go.
fn secs(t0: Instant) -> String {
    format!("{:.0} s", t0.elapsed().as_secs_f64())
}

#[derive(Default)]
struct Report {
    passed: u64,
    failed: u64,
    /// One line per step: its name and how it ended.
    steps: Vec<String>,
    skipped: Vec<String>,
}

impl Report {
    /// Runs a step whose only result is its exit status.
    fn check(&mut self, name: &str, cmd: &mut Command) -> bool {
        step(name);
        let t0 = Instant::now();
        let ok = cmd::status(cmd).unwrap_or_else(|e| {
            eprintln!("{e:#}");
            false
        });
        if !ok {
            self.failed += 1;
        }
        self.steps.push(format!(
            "{:<7} {name} ({})",
            if ok { "ok" } else { "FAILED" },
            secs(t0)
        ));
        ok
    }

    /// Runs a libtest-based step (cargo test, or a test binary), echoing its output and
    /// counting its `test result:` lines.
    fn tests(&mut self, name: &str, cmd: &mut Command) -> bool {
        step(name);
        let t0 = Instant::now();
        let (ok, counts) = run_counting(cmd).unwrap_or_else(|e| {
            eprintln!("{e:#}");
            (false, Counts::default())
        });
        self.passed += counts.passed;
        self.failed += counts.failed;
        // A failure libtest did not count (compile error, crash, abort) still counts once.
        if !ok && counts.failed == 0 {
            self.failed += 1;
        }
        self.steps.push(format!(
            "{:<7} {name}: {} passed, {} failed{} ({})",
            if ok { "ok" } else { "FAILED" },
            counts.passed,
            counts.failed,
            if ok || counts.failed > 0 {
                ""
            } else {
                " (and the run itself failed)"
            },
            secs(t0),
        ));
        ok
    }

    /// Builds test binaries with `no_run` (a `cargo test --no-run`), then runs each of
    /// `package`'s as root with `--test-threads=1`.
    fn privileged_tests(&mut self, root: &Path, mut no_run: Command, package: &str) {
        step(&format!("build {package} test binaries"));
        let t0 = Instant::now();
        let binaries = match test_binaries(root, &mut no_run, package) {
            Ok(b) => {
                let line = format!("{:<7} build {package} test binaries ({})", "ok", secs(t0));
                self.steps.push(line);
                b
            }
            Err(e) => {
                eprintln!("{e:#}");
                self.failed += 1;
                self.steps
                    .push(format!("FAILED  build {package} test binaries"));
                return;
            }
        };
        for bin in binaries {
            let mut c = Command::new(&bin.path);
            c.arg("--test-threads=1")
                .current_dir(&bin.package_dir)
                .env("CARGO_MANIFEST_DIR", &bin.package_dir)
                .stdin(Stdio::null());
            self.tests(
                &format!("{package} {} (root, one thread)", bin.name),
                &mut c,
            );
        }
    }

    /// Runs the privileged tests in the VMs and counts them like the host's.
    fn vm(&mut self, args: &vm::VmArgs) {
        step("tests in VMs (qemu, Debian cloud kernels 6.1 and 6.12)");
        match vm::run_tests(args) {
            Ok(report) => {
                // A VM without a result line, timed out or failing without a libtest count
                // counts once (see `VmReport::counts`).
                let counts = report.counts();
                self.passed += counts.passed;
                self.failed += counts.failed;
                self.steps.extend(report.summary_lines());
            }
            Err(e) => {
                eprintln!("{e:#}");
                self.failed += 1;
                self.steps.push("FAILED  tests in a VM".into());
            }
        }
    }

    fn print_summary(&self) {
        step("summary");
        for s in &self.steps {
            println!("  {s}");
        }
        for s in &self.skipped {
            println!("  skipped {s}");
        }
        println!("{} passed, {} failed", self.passed, self.failed);
    }
}

/// Runs `cmd` with stdout echoed line by line and parsed; stderr is inherited.
fn run_counting(cmd: &mut Command) -> anyhow::Result<(bool, Counts)> {
    println!("$ {}", cmd::display(cmd));
    let mut child = cmd
        .stdout(Stdio::piped())
        .spawn()
        .with_context(|| format!("cannot run {}", cmd::display(cmd)))?;
    let stdout = child.stdout.take().context("no stdout pipe")?;
    let mut counts = Counts::default();
    for line in BufReader::new(stdout).lines() {
        let line = line.context("reading test output")?;
        println!("{line}");
        counts.add_line(&line);
    }
    let status = child.wait()?;
    Ok((status.success(), counts))
}

struct TestBinary {
    /// Target name with its kind, e.g. `lib`, `bin netpath`, `test lab`.
    name: String,
    path: PathBuf,
    package_dir: PathBuf,
}

/// Runs `no_run` (a `cargo test --no-run`) with JSON messages and returns the test
/// executables it built for `package`. `no_run` selects the same packages as the build step,
/// so that features unify the same way and nothing (above all the eBPF object) is rebuilt.
fn test_binaries(
    root: &Path,
    no_run: &mut Command,
    package: &str,
) -> anyhow::Result<Vec<TestBinary>> {
    let manifest = cargo_metadata::MetadataCommand::new()
        .no_deps()
        .current_dir(root)
        .exec()
        .context("cargo metadata")?
        .packages
        .into_iter()
        .find(|p| p.name.as_str() == package)
        .with_context(|| format!("no package {package} in the workspace"))?
        .manifest_path;
    no_run
        .arg("--message-format=json-render-diagnostics")
        .stdout(Stdio::piped());
    println!("$ {}", cmd::display(no_run));
    let mut child = no_run.spawn().context("cannot run cargo test --no-run")?;
    let stdout = child.stdout.take().context("no stdout pipe")?;
    let mut binaries = Vec::new();
    for msg in Message::parse_stream(BufReader::new(stdout)) {
        let Message::CompilerArtifact(art) = msg.context("reading cargo's JSON output")? else {
            continue;
        };
        let Some(exe) = art.executable else { continue };
        if !art.profile.test || art.manifest_path != manifest {
            continue;
        }
        let kind = match art.target.kind.first() {
            Some(TargetKind::Lib | TargetKind::RLib) => "lib".to_owned(),
            Some(k) => format!("{k} {}", art.target.name),
            None => art.target.name.clone(),
        };
        binaries.push(TestBinary {
            name: kind,
            path: exe.into_std_path_buf(),
            package_dir: art
                .manifest_path
                .parent()
                .map_or_else(|| root.to_path_buf(), |p| p.as_std_path().to_path_buf()),
        });
    }
    let status = child.wait()?;
    anyhow::ensure!(status.success(), "cargo test --no-run failed ({status})");
    // Unit tests first, then binaries' tests, then integration tests, each by name.
    let rank = |name: &str| match name.split(' ').next() {
        Some("lib") => 0,
        Some("bin") => 1,
        _ => 2,
    };
    binaries.sort_by(|a, b| (rank(&a.name), &a.name).cmp(&(rank(&b.name), &b.name)));
    Ok(binaries)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_libtest_result_lines() {
        let mut c = Counts::default();
        c.add_line("running 3 tests");
        c.add_line("test result: ok. 3 passed; 0 failed; 1 ignored; 0 measured; 0 filtered out; finished in 0.01s");
        c.add_line("test result: FAILED. 2 passed; 4 failed; 0 ignored; 0 measured; 0 filtered out; finished in 1.20s");
        c.add_line("test foo ... ok");
        assert_eq!(
            c,
            Counts {
                passed: 5,
                failed: 4
            }
        );
    }
}
