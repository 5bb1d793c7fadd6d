//! Boots one kernel under qemu and reads its serial console: the markers of the VM's
//! `/init` and libtest's lines, into a [`VmOutcome`].

use std::{
    fs,
    io::{BufRead as _, BufReader, Write as _},
    path::Path,
    process::{Command, ExitStatus, Stdio},
    sync::mpsc,
    time::{Duration, Instant},
};

use anyhow::Context as _;

use super::{BinaryRun, VmArgs, VmOutcome, backports::Qemu, kernels::Kernel};
use crate::cmd;

/// Reads the console: markers of the VM's `/init` (`initramfs::init_script`) and libtest lines.
#[derive(Default)]
struct Parser {
    outcome: VmOutcome,
    current: Option<BinaryRun>,
    /// Inside libtest's closing `failures:` list (names, one per indented line).
    in_failures: bool,
    /// The test libtest last started (`test NAME ... `).
    last_test: String,
}

impl Parser {
    fn line(&mut self, line: &str) {
        if let Some(i) = line.find("NETPATH-VM-RESULT rc=") {
            let v = &line[i + "NETPATH-VM-RESULT rc=".len()..];
            self.outcome.rc = v.split_whitespace().next().and_then(|n| n.parse().ok());
            return;
        }
        let t = line.trim();
        if !t.starts_with("test result:")
            && let Some(name) = t.strip_prefix("test ").and_then(|r| r.split(" ...").next())
        {
            self.last_test = name.to_owned();
        }
        if self.outcome.kernel_oops.is_none()
            && let Some(i) = ["BUG: ", "Oops: ", "Kernel panic"]
                .iter()
                .find_map(|k| line.find(k))
        {
            let during = match &self.current {
                Some(r) => format!(
                    " (during {} backend {}, test {})",
                    r.binary, r.backend, self.last_test
                ),
                None => String::new(),
            };
            self.outcome.kernel_oops = Some(format!("{}{during}", &line[i..]));
        }
        if let Some(rest) = t.strip_prefix("== vm kernel ") {
            if let Some((release, _)) = rest.split_once(" backend ") {
                self.outcome.kernel = release.to_owned();
            }
        } else if let Some(rest) = t.strip_prefix("== vm test ") {
            self.finish();
            if let Some((binary, backend)) = rest.split_once(" backend ") {
                self.current = Some(BinaryRun {
                    binary: binary.to_owned(),
                    backend: backend.to_owned(),
                    ..Default::default()
                });
            }
        } else if let Some(rest) = t.strip_prefix("== vm done ") {
            if let Some(run) = &mut self.current {
                for w in rest.split_whitespace() {
                    if let Some(n) = w.strip_prefix("rc=") {
                        run.rc = n.parse().ok();
                    } else if let Some(n) = w.strip_prefix("secs=") {
                        run.secs = n.parse().ok();
                    }
                }
            }
            self.finish();
        } else if let Some(run) = &mut self.current {
            // libtest ends a failing run with "failures:", the names indented, a blank
            // line (the per-test output blocks before it also start with "failures:",
            // followed by a blank line, so they add nothing).
            if t == "failures:" {
                self.in_failures = true;
                run.failed_tests.clear();
            } else if self.in_failures && line.starts_with("    ") && !t.contains(' ') {
                run.failed_tests.push(t.to_owned());
            } else {
                self.in_failures = false;
                if t.starts_with("test result:") {
                    run.counts.add_line(t);
                }
            }
        }
    }

    fn finish(&mut self) {
        self.in_failures = false;
        if let Some(run) = self.current.take() {
            self.outcome.counts.passed += run.counts.passed;
            self.outcome.counts.failed += run.counts.failed;
            // A binary that crashed or was killed without a libtest failure still fails once.
            if run.rc != Some(0) && run.counts.failed == 0 {
                self.outcome.counts.failed += 1;
            }
            self.outcome.runs.push(run);
        }
    }
}

/// Boots the kernel with the initramfs in `qemu_bin`, streams the serial console to stdout
/// and `log`, and parses it; kills qemu after `args.timeout` seconds.
pub(super) fn boot(
    qemu_bin: &Qemu,
    kernel: &Kernel,
    initramfs: &Path,
    backend: &str,
    log: &Path,
    args: &VmArgs,
) -> anyhow::Result<VmOutcome> {
    // Boots run side by side: every console line on stdout says whose it is.
    let series = kernel
        .version
        .split('.')
        .take(2)
        .collect::<Vec<_>>()
        .join(".");
    let tag = format!("[{series} {backend}]");
    let mut qemu = qemu_command(qemu_bin, kernel, initramfs, backend, args);
    println!("$ {}", cmd::display(&qemu));
    let t0 = Instant::now();
    let mut child = qemu
        .spawn()
        .with_context(|| format!("cannot run {}", qemu_bin.bin.display()))?;
    let lines = console_lines(child.stdout.take().context("no stdout pipe")?);
    let mut log_file =
        fs::File::create(log).with_context(|| format!("creating {}", log.display()))?;
    let mut out = |line: &str| {
        println!("{tag} {line}");
        let _ = writeln!(log_file, "{line}");
    };
    let deadline = t0 + Duration::from_secs(args.timeout);
    let mut parser = Parser::default();
    let mut timed_out = false;
    loop {
        match lines.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
            Ok(line) => {
                out(&line);
                parser.line(&line);
                if parser.outcome.rc.is_some() {
                    // poweroff follows; give it a moment, then stop qemu regardless.
                    let grace = Instant::now() + Duration::from_secs(60);
                    while let Ok(line) =
                        lines.recv_timeout(grace.saturating_duration_since(Instant::now()))
                    {
                        out(&line);
                    }
                    break;
                }
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
            Err(mpsc::RecvTimeoutError::Timeout) => {
                timed_out = true;
                let msg = format!(
                    "vm: {tag} no result after {} s: killing qemu (pid {})",
                    args.timeout,
                    child.id()
                );
                out(&msg);
                break;
            }
        }
    }
    let status = stop(&mut child, timed_out)?;
    let vm_secs = t0.elapsed().as_secs_f64();
    parser.finish();
    let mut outcome = parser.outcome;
    outcome.timed_out = timed_out;
    outcome.vm_secs = vm_secs;
    println!("vm: {tag} qemu exited ({status}) after {vm_secs:.0} s");
    if outcome.rc.is_none() && !timed_out {
        eprintln!(
            "vm: {tag} the VM stopped without a NETPATH-VM-RESULT line (see {})",
            log.display()
        );
    }
    Ok(outcome)
}

/// qemu for one boot: no network device, the serial console on stdout, the backends for
/// `/init` on the kernel command line.
fn qemu_command(
    qemu_bin: &Qemu,
    kernel: &Kernel,
    initramfs: &Path,
    backend: &str,
    args: &VmArgs,
) -> Command {
    let mut qemu = Command::new(&qemu_bin.bin);
    for d in &qemu_bin.data_dirs {
        qemu.arg("-L").arg(d);
    }
    qemu.args([
        "-accel",
        &args.accel,
        "-m",
        &args.memory.to_string(),
        "-smp",
        "2",
    ])
    .arg("-kernel")
    .arg(&kernel.vmlinuz)
    .arg("-initrd")
    .arg(initramfs)
    .arg("-append")
    .arg(format!(
        "console=ttyS0 rdinit=/init panic=-1 quiet netpath_backends={backend}"
    ))
    .args(["-nographic", "-no-reboot", "-nic", "none"])
    .stdin(Stdio::null())
    .stdout(Stdio::piped());
    qemu
}

/// The console's lines (without `\r`), read on a thread of their own so the caller can wait
/// with a deadline.
fn console_lines(stdout: std::process::ChildStdout) -> mpsc::Receiver<String> {
    let (tx, rx) = mpsc::channel::<String>();
    std::thread::spawn(move || {
        let mut r = BufReader::new(stdout);
        let mut buf = Vec::new();
        loop {
            buf.clear();
            match r.read_until(b'\n', &mut buf) {
                Ok(0) | Err(_) => break,
                Ok(_) => {
                    let line = String::from_utf8_lossy(&buf);
                    let line = line.trim_end_matches(['\n', '\r']).replace('\r', "");
                    if tx.send(line).is_err() {
                        break;
                    }
                }
            }
        }
    });
    rx
}

/// Waits for qemu to go (after poweroff or a panic with `-no-reboot`), killing it after 10 s,
/// or at once when the boot timed out.
fn stop(child: &mut std::process::Child, timed_out: bool) -> anyhow::Result<ExitStatus> {
    let limit = Duration::from_secs(if timed_out { 0 } else { 10 });
    Ok(cmd::reap_within(child, limit)?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::counts::Counts;

    #[test]
    fn parses_the_console() {
        let mut p = Parser::default();
        for l in [
            "[    1.0] random kernel line",
            "== vm kernel 6.1.0-57-cloud-amd64 backend auto",
            "== vm test lab backend auto",
            "running 2 tests",
            "test a ... ok",
            "test b ... some output of the test FAILED",
            "",
            "failures:",
            "",
            "---- b stdout ----",
            "thread 'b' panicked at netpath/tests/lab.rs:1:2:",
            "",
            "failures:",
            "    b",
            "",
            "test result: FAILED. 1 passed; 1 failed; 1 ignored; 0 measured; 0 filtered out",
            "== vm done lab backend auto rc=101 secs=12",
            "== vm test trace backend auto",
            "test result: ok. 5 passed; 0 failed; 0 ignored",
            "== vm done trace backend auto rc=0 secs=30",
            "== vm test crash backend auto",
            "== vm done crash backend auto rc=137 secs=900",
            "== vm test oops backend fentry",
            "test one ... [  219.843472] BUG: kernel NULL pointer dereference, address: 0",
            "[  219.843472] Kernel panic - not syncing: Fatal exception in interrupt",
        ] {
            p.line(l);
        }
        p.finish();
        let o = p.outcome;
        assert_eq!(o.kernel, "6.1.0-57-cloud-amd64");
        assert_eq!(o.rc, None);
        assert_eq!(
            o.kernel_oops.as_deref(),
            Some(
                "BUG: kernel NULL pointer dereference, address: 0 \
                 (during oops backend fentry, test one)"
            )
        );
        assert_eq!(
            o.counts,
            Counts {
                passed: 6,
                failed: 3
            }
        );
        assert_eq!(o.runs.len(), 4);
        assert_eq!(o.runs[3].rc, None);
        assert_eq!(o.runs[0].failed_tests, ["b"]);
        assert_eq!((o.runs[0].rc, o.runs[0].secs), (Some(101), Some(12)));
        assert_eq!(o.runs[2].rc, Some(137));
        assert!(!o.ok());
    }
}
