//! Small helpers around `std::process::Command`: print, run, capture.

use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};

/// The command line as a shell would show it (environment overrides first).
pub fn display(cmd: &Command) -> String {
    let mut parts: Vec<String> = cmd
        .get_envs()
        .filter(|(k, _)| *k != "PATH")
        .filter_map(|(k, v)| {
            Some(format!(
                "{}={}",
                k.to_string_lossy(),
                quote(&v?.to_string_lossy())
            ))
        })
        .collect();
    parts.push(quote(&cmd.get_program().to_string_lossy()));
    parts.extend(cmd.get_args().map(|a| quote(&a.to_string_lossy())));
    parts.join(" ")
}

/// Single-quotes a word for the shell when it needs it.
fn quote(word: &str) -> String {
    let plain = |c: char| c.is_ascii_alphanumeric() || "-_=+:,./@%^".contains(c);
    if !word.is_empty() && word.chars().all(plain) {
        word.to_owned()
    } else {
        format!("'{}'", word.replace('\'', r"'\''"))
    }
}

/// Prints the command, runs it with inherited stdout/stderr and fails unless it exits 0.
pub fn run(cmd: &mut Command) -> anyhow::Result<()> {
    if !status(cmd)? {
        bail!("command failed: {}", display(cmd));
    }
    Ok(())
}

/// Prints the command and runs it; returns whether it exited 0.
pub fn status(cmd: &mut Command) -> anyhow::Result<bool> {
    println!("$ {}", display(cmd));
    let status = cmd
        .status()
        .with_context(|| format!("cannot run {}", display(cmd)))?;
    Ok(status.success())
}

/// Runs the command quietly and returns its stdout, or `None` when it cannot be run or
/// exits non-zero. For probes such as `tool --version`.
pub fn probe(cmd: &mut Command) -> Option<String> {
    let out = cmd
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Waits up to `limit` for `child` to exit, then kills it; reaps it either way.
pub fn reap_within(child: &mut Child, limit: Duration) -> std::io::Result<ExitStatus> {
    let stop_by = Instant::now() + limit;
    while child.try_wait()?.is_none() && Instant::now() < stop_by {
        std::thread::sleep(Duration::from_millis(100));
    }
    if child.try_wait()?.is_none() {
        let _ = child.kill();
    }
    child.wait()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_quotes_what_the_shell_would_split() {
        let mut c = Command::new("cargo");
        c.env("RUSTFLAGS", "-C a b").args(["x", "it's", "${S}"]);
        assert_eq!(display(&c), r"RUSTFLAGS='-C a b' cargo x 'it'\''s' '${S}'");
    }
}
