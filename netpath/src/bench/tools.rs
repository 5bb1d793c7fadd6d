//! External tools (sockperf, iperf3, bpftrace), their parsers, small helpers.

use super::*;

// ---------------------------------------------------------------------------------------------
// External tools.

/// A child process that is killed and reaped when dropped.
pub(super) struct Reaped(Option<Child>);

impl Reaped {
    fn pid(&self) -> u32 {
        self.0.as_ref().map_or(0, |c| c.id())
    }

    /// Waits up to `limit` for it to exit on its own, then kills it; returns its output.
    fn finish(mut self, limit: Duration) -> (String, String) {
        let mut child = self.0.take().expect("child");
        let end = Instant::now() + limit;
        while Instant::now() < end {
            if let Ok(Some(_)) = child.try_wait() {
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let _ = child.kill();
        let _ = child.wait();
        let mut out = String::new();
        let mut err = String::new();
        if let Some(mut o) = child.stdout.take() {
            let _ = o.read_to_string(&mut out);
        }
        if let Some(mut e) = child.stderr.take() {
            let _ = e.read_to_string(&mut err);
        }
        (out, err)
    }
}

impl Drop for Reaped {
    fn drop(&mut self) {
        if let Some(c) = self.0.as_mut() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Starts `cmd` in `ns` (the child inherits the spawning thread's netns).
pub(super) fn spawn_in(ns: &Netns, mut cmd: Command) -> Result<Reaped> {
    let shown = format!("{cmd:?}");
    let child = ns
        .run(move || Ok(cmd.spawn()?))
        .with_context(|| format!("starting {shown} in {}", ns.name))?;
    Ok(Reaped(Some(child)))
}

/// Runs `cmd` to completion in `ns`; stdout and stderr, or an error if it failed.
pub(super) fn output_in(ns: &Netns, mut cmd: Command) -> Result<(String, String)> {
    let shown = format!("{cmd:?}");
    let out = ns
        .run(move || Ok(cmd.stdin(Stdio::null()).output()?))
        .with_context(|| format!("running {shown} in {}", ns.name))?;
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    if !out.status.success() {
        bail!(
            "{shown} failed ({}): {}{}",
            out.status,
            last_lines(&stdout, 3),
            last_lines(&stderr, 3)
        );
    }
    Ok((stdout, stderr))
}

pub(super) fn last_lines(s: &str, n: usize) -> String {
    let lines: Vec<&str> = s.lines().filter(|l| !l.trim().is_empty()).collect();
    lines[lines.len().saturating_sub(n)..].join(" / ")
}

/// Waits until process `pid` (in the server's netns) has a socket ready on `port`: a TCP
/// socket in LISTEN, or (`udp`) a bound UDP socket, which `/proc/net/udp` shows in state 07
/// (unconnected, i.e. TCP_CLOSE) from the moment it is bound.
pub(super) fn wait_listening(server: &mut Reaped, port: u16, what: &str, udp: bool) -> Result<()> {
    let end = Instant::now() + Duration::from_secs(10);
    let (table, state) = if udp { ("udp", "07") } else { ("tcp", "0A") };
    let path = format!("/proc/{}/net/{table}", server.pid());
    while Instant::now() < end {
        if let Some(c) = server.0.as_mut()
            && let Ok(Some(st)) = c.try_wait()
        {
            bail!("{what} exited before listening ({st})");
        }
        let text = std::fs::read_to_string(&path).unwrap_or_default();
        if listening_on(&text, port, state) {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    bail!("{what} is not listening on {table} port {port} after 10 s")
}

/// Whether `/proc/net/tcp` or `/proc/net/udp` text has a socket in `state` on local `port`.
pub(super) fn listening_on(proc_net: &str, port: u16, state: &str) -> bool {
    let want = format!(":{port:04X}");
    proc_net.lines().skip(1).any(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        f.len() > 3 && f[1].ends_with(&want) && f[3] == state
    })
}

/// `sockperf sr` in the server netns on `server` (the lab server's address), `sockperf pp` to it
/// from the client netns; `--tcp` for TCP, sockperf's default (UDP) mode otherwise.
pub(super) fn sockperf(
    lab: &NetPath,
    server: SocketAddrV4,
    secs: u64,
    proto: Proto,
) -> Result<Rtt> {
    let connect = server;
    let udp = proto == Proto::Udp;
    let mode: &[&str] = if udp { &[] } else { &["--tcp"] };
    let mut sr = Command::new("sockperf");
    sr.arg("sr")
        .args(mode)
        .args(["-i", &server.ip().to_string()])
        .args(["-p", &server.port().to_string()])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    let mut srv = spawn_in(&lab.server_ns, sr)?;
    wait_listening(&mut srv, server.port(), "sockperf server", udp)?;
    let mut pp = Command::new("sockperf");
    pp.arg("pp")
        .args(mode)
        .args(["-i", &connect.ip().to_string()])
        .args(["-p", &connect.port().to_string()])
        .args(["-m", "1024", "-t", &secs.to_string()]);
    let out = output_in(&lab.client_ns, pp);
    drop(srv);
    let (stdout, stderr) = out?;
    let r = parse_sockperf(&format!("{stdout}\n{stderr}"))?;
    Ok(r.rtt())
}

/// `iperf3 -s -1` in the server netns on `server` (the lab server's address), `iperf3 -c -J` to
/// it from the client netns, bound to the client's address.
pub(super) fn iperf3(
    lab: &NetPath,
    server: SocketAddrV4,
    client: Ipv4Addr,
    secs: u64,
) -> Result<Bulk> {
    let connect = server;
    let mut s = Command::new("iperf3");
    s.args(["-s", "-B", &server.ip().to_string()])
        .args(["-p", &server.port().to_string(), "-1"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    let mut srv = spawn_in(&lab.server_ns, s)?;
    wait_listening(&mut srv, server.port(), "iperf3 server", false)?;
    let mut c = Command::new("iperf3");
    c.args(["-c", &connect.ip().to_string(), "-B", &client.to_string()])
        .args(["-p", &connect.port().to_string()])
        .args(["-t", &secs.to_string(), "-J"]);
    let shown = format!("{c:?}");
    // iperf3 -J exits non-zero on errors but still prints JSON with an "error" field.
    let out = lab
        .client_ns
        .run(move || Ok(c.stdin(Stdio::null()).output()?))
        .with_context(|| format!("running {shown}"))?;
    srv.finish(Duration::from_secs(2));
    let r = parse_iperf3(&String::from_utf8_lossy(&out.stdout))
        .with_context(|| format!("{shown} ({})", out.status))?;
    Ok(Bulk {
        gbit_per_s: r.bits_per_second / 1e9,
        retransmits: r.retransmits,
    })
}

/// The naive tracer: one hash map keyed by skb address, updated on four net tracepoints, with
/// the time since the previous point in a histogram (what a first bpftrace attempt looks like).
pub const NAIVE_SCRIPT: &str = r#"
tracepoint:net:net_dev_queue,
tracepoint:net:net_dev_start_xmit,
tracepoint:net:netif_rx,
tracepoint:net:netif_receive_skb
{
  $t = @ts[args->skbaddr];
  if ($t) { @hop = hist(nsecs - $t); }
  @ts[args->skbaddr] = nsecs;
}
END { clear(@ts); }
"#;

/// An untraced harness run with the naive bpftrace script attached.
pub(super) fn rr_under_bpftrace(bin: &Path, lab: &NetPath, cfg: &RrConfig) -> Result<RrResult> {
    let mut cmd = Command::new(bin);
    cmd.args(["-e", NAIVE_SCRIPT])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = Reaped(Some(cmd.spawn().context("starting bpftrace")?));
    // Both pipes are drained by threads so bpftrace never blocks on a full pipe.
    let stderr = child.0.as_mut().and_then(|c| c.stderr.take());
    let err_reader = std::thread::spawn(move || {
        let mut s = String::new();
        if let Some(mut e) = stderr {
            let _ = e.read_to_string(&mut s);
        }
        s
    });
    // bpftrace prints "Attaching N probes..." once the probes are in.
    let stdout = child.0.as_mut().and_then(|c| c.stdout.take());
    let (tx, rx) = std::sync::mpsc::channel();
    if let Some(out) = stdout {
        std::thread::spawn(move || {
            for l in BufReader::new(out).lines() {
                let Ok(l) = l else { break };
                if l.starts_with("Attaching") {
                    let _ = tx.send(());
                }
            }
        });
    }
    if rx.recv_timeout(Duration::from_secs(30)).is_err() {
        child.finish(Duration::ZERO);
        let err = err_reader.join().unwrap_or_default();
        bail!("bpftrace did not attach: {}", last_lines(&err, 3));
    }
    // Let the attach settle (bpftrace prints before the last link is in).
    std::thread::sleep(Duration::from_millis(500));
    let r = harness::run_rr(lab, cfg, &NoPhases);
    // SIGINT so it exits cleanly (prints its maps, which we discard).
    let _ = nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.pid() as i32),
        nix::sys::signal::Signal::SIGINT,
    );
    child.finish(Duration::from_secs(10));
    let _ = err_reader.join();
    r.context("run under bpftrace")
}

// ---------------------------------------------------------------------------------------------
// Parsers.

/// What `sockperf ping-pong` prints, in its units: one-way latency (RTT/2), µs.
#[derive(Clone, Debug, PartialEq, Serialize, schemars::JsonSchema)]
pub struct Sockperf {
    pub observations: u64,
    pub avg_us: f64,
    pub min_us: f64,
    pub max_us: f64,
    /// (percentile, µs), as printed (25 … 99.999).
    pub percentiles: Vec<(f64, f64)>,
}

impl Sockperf {
    pub fn percentile(&self, q: f64) -> Option<f64> {
        self.percentiles
            .iter()
            .find(|(p, _)| (p - q).abs() < 1e-9)
            .map(|(_, v)| *v)
    }

    /// As round trips: sockperf's latency is half the round trip, so everything doubles.
    pub fn rtt(&self) -> Rtt {
        Rtt {
            p50_us: 2.0 * self.percentile(50.0).unwrap_or(f64::NAN),
            p99_us: 2.0 * self.percentile(99.0).unwrap_or(f64::NAN),
            mean_us: 2.0 * self.avg_us,
        }
    }
}

/// Removes ANSI colour sequences (sockperf colours its summary lines).
pub(super) fn strip_ansi(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut it = s.chars().peekable();
    while let Some(c) = it.next() {
        if c == '\x1b' {
            if it.peek() == Some(&'[') {
                it.next();
                for c in it.by_ref() {
                    if c.is_ascii_alphabetic() {
                        break;
                    }
                }
            }
            continue;
        }
        out.push(c);
    }
    out
}

/// Parses `sockperf pp` output (stdout and stderr together).
pub fn parse_sockperf(text: &str) -> Result<Sockperf> {
    let text = strip_ansi(text);
    let num = |s: &str| -> Option<f64> { s.trim().parse::<f64>().ok() };
    let mut r = Sockperf {
        observations: 0,
        avg_us: f64::NAN,
        min_us: f64::NAN,
        max_us: f64::NAN,
        percentiles: Vec::new(),
    };
    for line in text.lines() {
        let line = line.trim_start_matches("sockperf:").trim();
        if let Some(rest) = line.strip_prefix("====> avg-latency=") {
            r.avg_us = num(rest.split_whitespace().next().unwrap_or("")).unwrap_or(f64::NAN);
        } else if let Some(rest) = line.strip_prefix("Total ") {
            if let Some(n) = rest.split_whitespace().next().and_then(|n| n.parse().ok()) {
                r.observations = n;
            }
        } else if let Some(rest) = line.strip_prefix("---> percentile ") {
            if let Some((p, v)) = rest.split_once('=')
                && let (Some(p), Some(v)) = (num(p), num(v))
            {
                r.percentiles.push((p, v));
            }
        } else if let Some(rest) = line.strip_prefix("---> <MAX> observation =") {
            r.max_us = num(rest).unwrap_or(f64::NAN);
        } else if let Some(rest) = line.strip_prefix("---> <MIN> observation =") {
            r.min_us = num(rest).unwrap_or(f64::NAN);
        }
    }
    if r.percentile(50.0).is_none() || r.percentile(99.0).is_none() || r.avg_us.is_nan() {
        bail!(
            "no latency percentiles in sockperf's output: {}",
            last_lines(&text, 4)
        );
    }
    Ok(r)
}

/// The sender summary of `iperf3 -c … -J`.
#[derive(Clone, Debug, PartialEq, Serialize, schemars::JsonSchema)]
pub struct Iperf3 {
    pub bits_per_second: f64,
    pub retransmits: u64,
    pub bytes: u64,
    pub seconds: f64,
    /// end.sum_received.bits_per_second.
    pub received_bits_per_second: f64,
}

pub fn parse_iperf3(json: &str) -> Result<Iperf3> {
    let v: serde_json::Value =
        serde_json::from_str(json).context("iperf3 did not print JSON (-J)")?;
    if let Some(e) = v.get("error").and_then(|e| e.as_str()) {
        bail!("iperf3: {e}");
    }
    let sent = v
        .pointer("/end/sum_sent")
        .context("iperf3 JSON has no end.sum_sent")?;
    let f = |o: &serde_json::Value, k: &str| o.get(k).and_then(|x| x.as_f64());
    Ok(Iperf3 {
        bits_per_second: f(sent, "bits_per_second")
            .context("iperf3 JSON has no end.sum_sent.bits_per_second")?,
        retransmits: sent
            .get("retransmits")
            .and_then(|x| x.as_u64())
            .unwrap_or(0),
        bytes: sent.get("bytes").and_then(|x| x.as_u64()).unwrap_or(0),
        seconds: f(sent, "seconds").unwrap_or(0.0),
        received_bits_per_second: v
            .pointer("/end/sum_received/bits_per_second")
            .and_then(|x| x.as_f64())
            .unwrap_or(f64::NAN),
    })
}

// ---------------------------------------------------------------------------------------------
// Small helpers.

/// NaN when no round gave a figure (shown as such in the report).
pub(super) fn median(v: impl Iterator<Item = f64>) -> f64 {
    crate::sys::stats::median(v).unwrap_or(f64::NAN)
}

pub(super) fn which(tool: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(tool))
        .find(|p| p.is_file())
}

pub(super) fn bpf_stats_enabled() -> bool {
    std::fs::read_to_string("/proc/sys/kernel/bpf_stats_enabled").is_ok_and(|s| s.trim() == "1")
}

/// The source address the client namespace uses towards `to` (route lookup: an unbound UDP
/// socket is connected, which sends nothing).
pub(super) fn source_addr(client: &Netns, to: SocketAddrV4) -> Result<Ipv4Addr> {
    client.run(|| {
        use nix::sys::socket::{
            AddressFamily, SockFlag, SockType, SockaddrIn, connect, getsockname, socket,
        };
        let fd = socket(
            AddressFamily::Inet,
            SockType::Datagram,
            SockFlag::SOCK_CLOEXEC,
            None,
        )?;
        connect(std::os::fd::AsRawFd::as_raw_fd(&fd), &SockaddrIn::from(to))?;
        let local: SockaddrIn = getsockname(std::os::fd::AsRawFd::as_raw_fd(&fd))?;
        match IpAddr::V4(local.ip()) {
            IpAddr::V4(a) => Ok(a),
            IpAddr::V6(_) => unreachable!(),
        }
    })
}

// ---------------------------------------------------------------------------------------------

#[cfg(test)]
mod tests {
    use super::*;

    /// `sockperf pp --tcp -i 127.0.0.1 -p 12345 -m 1024 -t 2`, sockperf 3.7 (Debian 12),
    /// stdout and stderr as captured, colour codes included.
    const SOCKPERF_OUT: &str = include_str!("../../tests/data/sockperf-3.7-pp-tcp.txt");

    /// `iperf3 -c 127.0.0.1 -B 127.0.0.1 -p 12346 -t 1 -J`, iperf 3.12 (Debian 12).
    const IPERF3_JSON: &str = include_str!("../../tests/data/iperf3-3.12-client.json");

    #[test]
    fn parses_sockperf_ping_pong() {
        let s = parse_sockperf(SOCKPERF_OUT).unwrap();
        assert_eq!(s.observations, 206658);
        assert_eq!(s.avg_us, 3.729);
        assert_eq!(s.max_us, 2586.734);
        assert_eq!(s.min_us, 2.097);
        assert_eq!(s.percentiles.len(), 8);
        assert_eq!(s.percentile(50.0), Some(2.383));
        assert_eq!(s.percentile(99.0), Some(5.565));
        assert_eq!(s.percentile(99.9), Some(54.708));
        // One-way latency doubles into round trips.
        let r = s.rtt();
        assert_eq!(r.p50_us, 4.766);
        assert_eq!(r.p99_us, 11.13);
        assert_eq!(r.mean_us, 7.458);
    }

    #[test]
    fn sockperf_without_results_is_an_error() {
        let e = parse_sockperf(
            "sockperf: ERROR: Failed to connect to 10.1.2.3:11111 (Connection refused)\n",
        )
        .unwrap_err();
        assert!(e.to_string().contains("Connection refused"), "{e}");
    }

    #[test]
    fn parses_iperf3_json() {
        let r = parse_iperf3(IPERF3_JSON).unwrap();
        assert_eq!(r.bits_per_second, 20820714242.577553);
        assert_eq!(r.retransmits, 0);
        assert_eq!(r.bytes, 2602958848);
        assert_eq!(r.seconds, 1.000142);
        assert_eq!(r.received_bits_per_second, 20775980130.51096);
    }

    #[test]
    fn iperf3_error_json_is_an_error() {
        let e = parse_iperf3(
            "{\n\t\"start\":\t{},\n\t\"intervals\":\t[],\n\t\"end\":\t{},\n\t\"error\":\t\"unable to connect to server: Connection refused\"\n}\n",
        )
        .unwrap_err();
        assert!(e.to_string().contains("unable to connect"), "{e}");
        assert!(parse_iperf3("iperf3: error - unable to connect").is_err());
    }

    #[test]
    fn finds_listening_sockets() {
        let tcp = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0300A80A:2B67 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 123 1 0 100 0 0 10 0
   1: 0300A80A:2B67 0200A80A:9C40 01 00000000:00000000 00:00000000 00000000     0        0 124 1 0 100 0 0 10 0
";
        assert!(listening_on(tcp, 11111, "0A"));
        assert!(!listening_on(tcp, 11112, "0A"));
        assert!(!listening_on(tcp, 40000, "0A"));
        // A bound UDP socket (sockperf's UDP server) is in state 07.
        let udp = "   sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode ref pointer drops
  912: 0300A80A:2B67 00000000:0000 07 00000000:00000000 00:00000000 00000000     0        0 125 2 0 0
";
        assert!(listening_on(udp, 11111, "07"));
        assert!(!listening_on(udp, 11111, "0A"));
    }

    #[test]
    fn medians_and_colours() {
        assert_eq!(median([3.0, 1.0, 2.0].into_iter()), 2.0);
        assert_eq!(median([4.0, 1.0, 2.0, 3.0].into_iter()), 2.5);
        assert!(median(std::iter::empty()).is_nan());
        assert_eq!(strip_ansi("a\x1b[2;35mb\x1b[0mc"), "abc");
    }
}
