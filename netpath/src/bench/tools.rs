//! External tools (sockperf, iperf3, bpftrace), the BPF objects' memory, small helpers.

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

/// Waits until process `pid` (in the server's netns) has a TCP socket listening on `port`.
pub(super) fn wait_listening(server: &mut Reaped, port: u16, what: &str) -> Result<()> {
    let end = Instant::now() + Duration::from_secs(10);
    let path = format!("/proc/{}/net/tcp", server.pid());
    while Instant::now() < end {
        if let Some(c) = server.0.as_mut()
            && let Ok(Some(st)) = c.try_wait()
        {
            bail!("{what} exited before listening ({st})");
        }
        let tcp = std::fs::read_to_string(&path).unwrap_or_default();
        if listening_on(&tcp, port) {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    bail!("{what} is not listening on port {port} after 10 s")
}

/// Whether `/proc/net/tcp` text has a socket in LISTEN (0A) on `port`.
pub(super) fn listening_on(proc_net_tcp: &str, port: u16) -> bool {
    let want = format!(":{port:04X}");
    proc_net_tcp.lines().skip(1).any(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        f.len() > 3 && f[1].ends_with(&want) && f[3] == "0A"
    })
}

/// `sockperf sr` in the server netns on `server` (the lab server's address), `sockperf pp` to it
/// from the client netns.
pub(super) fn sockperf(lab: &NetPath, server: SocketAddrV4, secs: u64) -> Result<Rtt> {
    let connect = server;
    let mut sr = Command::new("sockperf");
    sr.args(["sr", "--tcp", "-i", &server.ip().to_string()])
        .args(["-p", &server.port().to_string()])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    let mut srv = spawn_in(&lab.server_ns, sr)?;
    wait_listening(&mut srv, server.port(), "sockperf server")?;
    let mut pp = Command::new("sockperf");
    pp.args(["pp", "--tcp", "-i", &connect.ip().to_string()])
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
    wait_listening(&mut srv, server.port(), "iperf3 server")?;
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
#[derive(Clone, Debug, PartialEq, Serialize)]
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
#[derive(Clone, Debug, PartialEq, Serialize)]
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
// Memory.

pub(super) fn proc_status_kib(field: &str) -> Option<u64> {
    let s = std::fs::read_to_string("/proc/self/status").ok()?;
    s.lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
}

/// `key:\tvalue` lines of an fdinfo file.
pub(super) fn fdinfo(text: &str) -> BTreeMap<&str, &str> {
    text.lines()
        .filter_map(|l| {
            let (k, v) = l.split_once(':')?;
            Some((k.trim(), v.trim()))
        })
        .collect()
}

/// BPF map types whose values are per CPU.
pub(super) fn per_cpu_type(t: u32) -> bool {
    // PERCPU_HASH, PERCPU_ARRAY, LRU_PERCPU_HASH, PERCPU_CGROUP_STORAGE
    matches!(t, 5 | 6 | 10 | 21)
}

/// The maps and programs this process holds (only netpath's: it holds no other BPF objects),
/// from `/proc/self/fdinfo`, deduplicated by id.
pub(super) fn bpf_memory() -> Result<Memory> {
    let ncpu = aya::util::nr_cpus().unwrap_or(1) as u64;
    let mut maps: BTreeMap<u32, MapMem> = BTreeMap::new();
    let mut progs: BTreeMap<u32, u64> = BTreeMap::new();
    for e in std::fs::read_dir("/proc/self/fd")?.flatten() {
        let Ok(target) = std::fs::read_link(e.path()) else {
            continue;
        };
        let target = target.to_string_lossy().into_owned();
        let is_map = target == "anon_inode:bpf-map";
        if !is_map && target != "anon_inode:bpf-prog" {
            continue;
        }
        let path = PathBuf::from("/proc/self/fdinfo").join(e.file_name());
        let Ok(text) = std::fs::read_to_string(&path) else {
            continue;
        };
        let info = fdinfo(&text);
        let get = |k: &str| info.get(k).and_then(|v| v.parse::<u64>().ok());
        let bytes = get("memlock").unwrap_or(0);
        if is_map {
            let Some(id) = get("map_id") else { continue };
            let map_type = get("map_type").unwrap_or(0) as u32;
            let name = aya::maps::MapInfo::from_id(id as u32)
                .ok()
                .and_then(|i| i.name_as_str().map(str::to_string))
                .unwrap_or_default();
            maps.insert(
                id as u32,
                MapMem {
                    name,
                    map_type,
                    per_cpu: per_cpu_type(map_type),
                    max_entries: get("max_entries").unwrap_or(0) as u32,
                    value_size: get("value_size").unwrap_or(0) as u32,
                    bytes,
                },
            );
        } else if let Some(id) = get("prog_id") {
            progs.insert(id as u32, bytes);
        }
    }
    let mut maps: Vec<MapMem> = maps.into_values().collect();
    maps.sort_by_key(|m| std::cmp::Reverse(m.bytes));
    let maps_bytes = maps.iter().map(|m| m.bytes).sum();
    // Per-CPU part: each per-CPU map holds max_entries values (rounded up to 8 bytes) per
    // possible CPU.
    let per_cpu_bytes_each: u64 = maps
        .iter()
        .filter(|m| m.per_cpu)
        .map(|m| u64::from(m.max_entries) * u64::from(m.value_size).next_multiple_of(8))
        .sum();
    let per_cpu_bytes = (per_cpu_bytes_each * ncpu).min(maps_bytes);
    Ok(Memory {
        maps_bytes_at_64_cpus: maps_bytes - per_cpu_bytes + 64 * per_cpu_bytes_each,
        maps,
        maps_bytes,
        per_cpu_bytes,
        per_cpu_bytes_each,
        programs: progs.len(),
        programs_bytes: progs.values().sum(),
        ..Memory::default()
    })
}

// ---------------------------------------------------------------------------------------------
// Small helpers.

pub(super) fn median(v: impl Iterator<Item = f64>) -> f64 {
    let mut v: Vec<f64> = v.filter(|x| x.is_finite()).collect();
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

pub(super) fn which(tool: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(tool))
        .find(|p| p.is_file())
}

pub(super) fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .unwrap_or_default()
        .split_whitespace()
        .take(3)
        .collect::<Vec<_>>()
        .join(" ")
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
        assert!(listening_on(tcp, 11111));
        assert!(!listening_on(tcp, 11112));
        assert!(!listening_on(tcp, 40000));
    }

    #[test]
    fn fdinfo_and_medians() {
        let f = fdinfo("pos:\t0\nmap_type:\t6\nmemlock:\t4096\nmap_id:\t17\n");
        assert_eq!(f["map_type"], "6");
        assert_eq!(f["memlock"], "4096");
        assert!(per_cpu_type(6) && !per_cpu_type(1));
        assert_eq!(median([3.0, 1.0, 2.0].into_iter()), 2.0);
        assert_eq!(median([4.0, 1.0, 2.0, 3.0].into_iter()), 2.5);
        assert!(median(std::iter::empty()).is_nan());
        assert_eq!(strip_ansi("a\x1b[2;35mb\x1b[0mc"), "abc");
    }
}
