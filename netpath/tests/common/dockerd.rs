//! A Docker daemon for the test binaries that need one (the same way `docker.rs` gets its own).
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use netpath::docker::Engine;

/// Connect to the default engine; if nothing answers, start `dockerd` from a thread that
/// lives as long as the test process (its death signal stops the daemon when the tests
/// end) and wait up to 60 s.
pub fn ensure_daemon() -> Engine {
    static STARTED: OnceLock<Result<(), String>> = OnceLock::new();
    if let Ok(e) = Engine::connect() {
        return e;
    }
    let r = STARTED.get_or_init(|| {
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            use std::os::unix::process::CommandExt;
            let log = std::fs::File::create("/tmp/netpath-test-dockerd.log");
            let mut cmd = Command::new("dockerd");
            cmd.stdin(Stdio::null());
            if let Ok(l) = log {
                cmd.stdout(l.try_clone().unwrap()).stderr(l);
            }
            // SAFETY: prctl is async-signal-safe.
            unsafe {
                cmd.pre_exec(|| {
                    libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM);
                    Ok(())
                });
            }
            match cmd.spawn() {
                Ok(mut c) => {
                    let _ = tx.send(Ok(()));
                    let _ = c.wait();
                }
                Err(e) => {
                    let _ = tx.send(Err(format!("cannot start dockerd: {e}")));
                }
            }
        });
        rx.recv().map_err(|e| e.to_string())??;
        let deadline = Instant::now() + Duration::from_secs(60);
        while Instant::now() < deadline {
            if Engine::connect().is_ok() {
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(300));
        }
        Err(
            "dockerd started but did not answer within 60 s (see /tmp/netpath-test-dockerd.log)"
                .into(),
        )
    });
    if let Err(e) = r {
        panic!("no Docker daemon and none could be started: {e}");
    }
    Engine::connect().unwrap_or_else(|e| panic!("{e:#}"))
}
