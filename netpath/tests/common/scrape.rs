//! `netpath serve` as a child process, HTTP on loopback, and a real Prometheus (Debian's)
//! scraping it.
#![allow(dead_code)] // each test binary uses its own subset

use std::io::{Read as _, Write as _};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Kills and reaps a child this test started (by its pid) when the test ends, pass or fail.
pub struct Reaped(pub Child);

impl Drop for Reaped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// One HTTP GET on loopback: (status line, body).
pub fn get(port: u16, path: &str) -> Option<(String, String)> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
    write!(s, "GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n").ok()?;
    let mut buf = String::new();
    s.read_to_string(&mut buf).ok()?;
    let (head, body) = buf.split_once("\r\n\r\n")?;
    Some((head.lines().next()?.to_string(), body.to_string()))
}

/// The body of `GET /metrics` ("" while nothing answers).
pub fn metrics(port: u16) -> String {
    get(port, "/metrics").map(|r| r.1).unwrap_or_default()
}

/// The value of an unlabelled gauge in a scrape.
pub fn gauge(m: &str, name: &str) -> Option<u64> {
    m.lines()
        .find_map(|l| l.strip_prefix(&format!("{name} ")))
        .and_then(|v| v.trim().parse().ok())
}

pub fn wait_for(what: &str, secs: u64, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(secs);
    while Instant::now() < deadline {
        if f() {
            return;
        }
        std::thread::sleep(Duration::from_millis(300));
    }
    panic!("{what} did not happen within {secs} s");
}

fn urlencode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// A real Prometheus on loopback scraping 127.0.0.1:`target` every second; its directory is
/// removed when it drops.
pub struct Prometheus {
    _child: Reaped,
    pub port: u16,
    dir: PathBuf,
}

impl Prometheus {
    pub fn start(target: u16) -> Prometheus {
        let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("np-prom-{target}"));
        std::fs::create_dir_all(&dir).unwrap();
        let cfg = dir.join("prometheus.yml");
        std::fs::write(
            &cfg,
            format!(
                "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nscrape_configs:\n  - job_name: netpath\n    static_configs:\n      - targets: ['127.0.0.1:{target}']\n"
            ),
        )
        .unwrap();
        let port = free_port();
        let child = Command::new("prometheus")
            .arg(format!("--config.file={}", cfg.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.join("data").display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(dir.join("prometheus.log")).unwrap())
            .spawn()
            .expect("prometheus (Debian's package; `cargo xtask setup`)");
        Prometheus {
            _child: Reaped(child),
            port,
            dir,
        }
    }

    /// An instant query's result vector (empty while Prometheus has nothing or is starting).
    pub fn query(&self, q: &str) -> Vec<serde_json::Value> {
        let path = format!("/api/v1/query?query={}", urlencode(q));
        let body = get(self.port, &path).map(|r| r.1).unwrap_or_default();
        let v: serde_json::Value = serde_json::from_str(&body).unwrap_or_default();
        v["data"]["result"].as_array().cloned().unwrap_or_default()
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self._child.0.kill();
        let _ = self._child.0.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// `netpath serve` on a free loopback port with `args`, `env` set: (the process, its port).
pub fn serve(args: &[&str], env: &[(&str, &str)]) -> (Reaped, u16) {
    let port = free_port();
    let child = Command::new(env!("CARGO_BIN_EXE_netpath"))
        .args(["serve", "--listen", &format!("127.0.0.1:{port}")])
        .args(["--rescan-secs", "0.5"])
        .args(args)
        .envs(env.iter().copied())
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let s = Reaped(child);
    wait_for("serve /ready", 60, || {
        get(port, "/ready").is_some_and(|(st, _)| st.contains(" 200 "))
    });
    (s, port)
}

/// `serve` following these containers (`--container` each: a Docker name or a containerd
/// path) with `args` and `env`, once it says it watches them all.
pub fn serve_following(containers: &[&str], args: &[&str], env: &[(&str, &str)]) -> (Reaped, u16) {
    let mut all: Vec<&str> = containers.iter().flat_map(|c| ["--container", c]).collect();
    all.extend_from_slice(args);
    let (s, port) = serve(&all, env);
    let n = containers.len() as u64;
    wait_for(&format!("serve to follow {n} containers"), 30, || {
        gauge(&metrics(port), "netpath_watched_containers") == Some(n)
    });
    (s, port)
}
