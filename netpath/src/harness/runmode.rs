//! How the harness threads wait for data and where they run: `--wait block|spin|busy-poll`
//! and `--cpus same|split|auto|N,M`.
//!
//! The receiver's wakeup on an idle vCPU costs tens of µs and swings with the machine's state;
//! the per-driver differences netpath explains are a few µs. `spin` takes the scheduler out of
//! the data path (non-blocking receives in a loop; the EAGAIN receives are no journeys, the
//! kernel programs end a journey only at a receive that returns data), `split` keeps client and
//! server on two fixed CPUs. Nothing host-wide is changed: `SO_BUSY_POLL` is set on netpath's
//! own sockets only, affinity on netpath's own threads (and the relay it started).

use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use nix::sched::{CpuSet, sched_getaffinity, sched_setaffinity};
use nix::unistd::Pid;

/// How a receiving harness thread waits for its data.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum WaitMode {
    /// Blocking receives: what an application sees, the scheduler's wakeup included.
    #[default]
    Block,
    /// Non-blocking receives in a tight loop: the data path without the scheduler.
    Spin,
    /// `SO_BUSY_POLL` on the harness sockets: the kernel polls the device's NAPI in the
    /// receive (blocking receives where the device has no NAPI).
    BusyPoll,
}

impl WaitMode {
    pub fn name(self) -> &'static str {
        match self {
            WaitMode::Block => "block",
            WaitMode::Spin => "spin",
            WaitMode::BusyPoll => "busy-poll",
        }
    }
}

/// `SO_BUSY_POLL` budget per receive, µs (what the kernel documentation suggests for sockets).
pub const BUSY_POLL_US: i32 = 50;

/// Where the client and server threads run, as asked on the command line.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Cpus {
    /// Both on one CPU.
    Same,
    /// On two different CPUs.
    Split,
    /// Wherever the scheduler puts them.
    #[default]
    Auto,
    /// Both on this CPU.
    One(usize),
    /// Client on the first CPU, server on the second.
    Pair(usize, usize),
}

impl std::str::FromStr for Cpus {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Cpus, String> {
        match s {
            "same" => Ok(Cpus::Same),
            "split" => Ok(Cpus::Split),
            "auto" => Ok(Cpus::Auto),
            _ => {
                let bad = || format!("unknown placement {s:?}: use same, split, auto, N or N,M");
                let n = |x: &str| x.trim().parse::<usize>().map_err(|_| bad());
                match s.split_once(',') {
                    Some((a, b)) => Ok(Cpus::Pair(n(a)?, n(b)?)),
                    None => Ok(Cpus::One(n(s)?)),
                }
            }
        }
    }
}

impl std::fmt::Display for Cpus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Cpus::Same => f.write_str("same"),
            Cpus::Split => f.write_str("split"),
            Cpus::Auto => f.write_str("auto"),
            Cpus::One(a) => write!(f, "{a}"),
            Cpus::Pair(a, b) => write!(f, "{a},{b}"),
        }
    }
}

impl serde::Serialize for Cpus {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

/// Wait mode and placement of a measurement.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct RunMode {
    /// Wait mode of the runs the hop tables and ratios come from.
    pub wait: WaitMode,
    /// Also run blocking (untraced and traced) and print its RTT and wakeup hop beside.
    pub block_line: bool,
    pub cpus: Cpus,
    /// `cpus` resolved on this machine.
    pub pin: Pin,
}

/// `--wait` and `--cpus`, shared by every command that runs request/response traffic.
#[derive(Clone, Debug, PartialEq, clap::Args)]
pub struct RunModeArgs {
    /// How receivers wait: block (what an application sees), spin (non-blocking receives in a
    /// loop: the data path without the scheduler), busy-poll (SO_BUSY_POLL on netpath's own
    /// sockets). Default: hop tables and ratios from spin, plus a block RTT line with its wakeup.
    #[arg(long, value_enum)]
    pub wait: Option<WaitMode>,
    /// Where client and server threads run: same (one CPU), split (two CPUs), auto (the
    /// scheduler decides), N (both on CPU N) or N,M (client on N, server on M).
    #[arg(long, default_value = "split")]
    pub cpus: Cpus,
}

impl RunModeArgs {
    /// Checked against this machine's CPUs before anything is built.
    pub fn resolve(&self) -> Result<RunMode> {
        Ok(RunMode {
            wait: self.wait.unwrap_or(WaitMode::Spin),
            block_line: self.wait.is_none(),
            cpus: self.cpus,
            pin: self.cpus.resolve()?,
        })
    }
}

/// The CPUs this process may run on.
pub fn allowed_cpus() -> Result<Vec<usize>> {
    let set = sched_getaffinity(Pid::from_raw(0)).context("sched_getaffinity")?;
    Ok((0..CpuSet::count())
        .filter(|&c| set.is_set(c).unwrap_or(false))
        .collect())
}

/// A placement resolved against this machine: the client's and the server's CPU, or none.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, serde::Serialize)]
pub struct Pin {
    pub client: Option<usize>,
    pub server: Option<usize>,
}

impl Cpus {
    /// The CPUs to pin to, checked against the CPUs this process may use: an impossible
    /// placement is one line saying which CPUs exist.
    pub fn resolve(self) -> Result<Pin> {
        let cpus = allowed_cpus()?;
        let list = || {
            cpus.iter()
                .map(|c| c.to_string())
                .collect::<Vec<_>>()
                .join(",")
        };
        let pin = |c: usize, s: usize| Pin {
            client: Some(c),
            server: Some(s),
        };
        match self {
            Cpus::Auto => Ok(Pin::default()),
            Cpus::Same => Ok(pin(cpus[0], cpus[0])),
            Cpus::Split if cpus.len() < 2 => bail!(
                "--cpus split needs two CPUs, and this process may use only CPU {}: use --cpus same or auto",
                list()
            ),
            Cpus::Split => Ok(pin(cpus[0], cpus[1])),
            Cpus::One(a) | Cpus::Pair(a, _) | Cpus::Pair(_, a) if !cpus.contains(&a) => bail!(
                "--cpus {self}: CPU {a} is not one this process may use (CPUs {}): pick from those",
                list()
            ),
            Cpus::One(a) => Ok(pin(a, a)),
            Cpus::Pair(a, b) => Ok(pin(a, b)),
        }
    }
}

/// Pins the calling thread to `cpu` (no-op for `None`).
pub fn pin_current(cpu: Option<usize>) -> Result<()> {
    let Some(cpu) = cpu else { return Ok(()) };
    let mut set = CpuSet::new();
    set.set(cpu).with_context(|| format!("CPU {cpu}"))?;
    sched_setaffinity(Pid::from_raw(0), &set)
        .with_context(|| format!("pinning a thread to CPU {cpu}"))
}

/// Pins every thread of process `pid` (a relay netpath started) to `cpu`, or lets it run on
/// every allowed CPU again for `None`. Best effort: threads may come and go meanwhile.
pub fn pin_process(pid: u32, cpu: Option<usize>) -> Result<()> {
    let mut set = CpuSet::new();
    let cpus = match cpu {
        Some(c) => vec![c],
        None => allowed_cpus()?,
    };
    for c in cpus {
        set.set(c).with_context(|| format!("CPU {c}"))?;
    }
    let dir = format!("/proc/{pid}/task");
    for e in std::fs::read_dir(&dir).with_context(|| format!("listing {dir}"))? {
        let Some(tid) = e
            .ok()
            .and_then(|e| e.file_name().to_str()?.parse::<i32>().ok())
        else {
            continue;
        };
        let _ = sched_setaffinity(Pid::from_raw(tid), &set);
    }
    Ok(())
}

/// The CPU the calling thread runs on now.
pub fn current_cpu() -> Option<usize> {
    // SAFETY: sched_getcpu has no preconditions.
    let c = unsafe { libc::sched_getcpu() };
    (c >= 0).then_some(c as usize)
}

/// One end of a request/response connection set up for a wait mode.
pub struct Receiver {
    pub wait: WaitMode,
    /// Yield the CPU between polls (spin with client and server on one CPU).
    pub yield_between: bool,
    /// Bound on one receive in spin mode (blocking modes use the socket's read timeout).
    pub timeout: Option<Duration>,
}

impl Receiver {
    pub fn new(wait: WaitMode, pin: Pin, timeout: Option<Duration>) -> Receiver {
        Receiver {
            wait,
            yield_between: pin.client.is_some() && pin.client == pin.server,
            timeout,
        }
    }

    /// Other threads netpath runs share these CPUs (a relay beside the server, several
    /// connections per CPU): spin yields between polls so they get to run.
    pub fn sharing(mut self, shared: bool) -> Receiver {
        self.yield_between |= shared;
        self
    }

    /// Sets the socket up for the mode: non-blocking for spin, `SO_BUSY_POLL` for busy-poll.
    pub fn prepare(&self, conn: &TcpStream) -> Result<()> {
        match self.wait {
            WaitMode::Block => Ok(()),
            WaitMode::Spin => conn
                .set_nonblocking(true)
                .context("making the socket non-blocking"),
            WaitMode::BusyPoll => set_busy_poll(conn, BUSY_POLL_US),
        }
    }

    /// Reads exactly `buf.len()` bytes; `UnexpectedEof` when the peer closed.
    pub fn read_exact(&self, conn: &mut TcpStream, buf: &mut [u8]) -> std::io::Result<()> {
        if self.wait != WaitMode::Spin {
            return conn.read_exact(buf);
        }
        let mut off = 0;
        let mut polls = 0u32;
        let mut started: Option<Instant> = None;
        while off < buf.len() {
            match conn.read(&mut buf[off..]) {
                Ok(0) => return Err(ErrorKind::UnexpectedEof.into()),
                Ok(n) => off += n,
                Err(e) if e.kind() == ErrorKind::WouldBlock => {
                    self.idle(&mut polls, &mut started)?;
                }
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// Writes all of `buf` (a non-blocking socket may take it in parts).
    pub fn write_all(&self, conn: &mut TcpStream, buf: &[u8]) -> std::io::Result<()> {
        if self.wait != WaitMode::Spin {
            return conn.write_all(buf);
        }
        let mut off = 0;
        let mut polls = 0u32;
        let mut started = None;
        while off < buf.len() {
            match conn.write(&buf[off..]) {
                Ok(0) => return Err(ErrorKind::WriteZero.into()),
                Ok(n) => off += n,
                Err(e) if e.kind() == ErrorKind::WouldBlock => {
                    self.idle(&mut polls, &mut started)?;
                }
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// Between two polls: yield when sharing the CPU with the peer, and every few thousand
    /// polls look at the clock for the timeout.
    fn idle(&self, polls: &mut u32, started: &mut Option<Instant>) -> std::io::Result<()> {
        if self.yield_between {
            // SAFETY: sched_yield has no preconditions.
            unsafe { libc::sched_yield() };
        } else {
            std::hint::spin_loop();
        }
        *polls += 1;
        if (*polls).is_multiple_of(4096)
            && let Some(t) = self.timeout
        {
            let s = *started.get_or_insert_with(Instant::now);
            if s.elapsed() >= t {
                return Err(ErrorKind::TimedOut.into());
            }
        }
        Ok(())
    }
}

fn set_busy_poll(conn: &TcpStream, us: i32) -> Result<()> {
    set_busy_poll_fd(conn.as_raw_fd(), us)
}

/// `SO_BUSY_POLL` of `us` µs on socket `fd` (one of netpath's own).
pub fn set_busy_poll_fd(fd: std::os::fd::RawFd, us: i32) -> Result<()> {
    // SAFETY: SO_BUSY_POLL takes an int; the pointer and length describe `us`.
    let r = unsafe {
        libc::setsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_BUSY_POLL,
            (&us as *const i32).cast(),
            std::mem::size_of::<i32>() as libc::socklen_t,
        )
    };
    if r != 0 {
        return Err(std::io::Error::last_os_error())
            .context("setting SO_BUSY_POLL on a harness socket");
    }
    Ok(())
}

/// NAPI id of the device that delivered the socket's last packet (`SO_INCOMING_NAPI_ID`);
/// 0 when it has none, and then busy polling has nothing to poll.
pub fn incoming_napi_id(conn: &TcpStream) -> u32 {
    napi_id_of(conn.as_raw_fd())
}

/// [`incoming_napi_id`] of socket `fd`.
pub fn napi_id_of(fd: std::os::fd::RawFd) -> u32 {
    let mut v: u32 = 0;
    let mut len = std::mem::size_of::<u32>() as libc::socklen_t;
    // SAFETY: the pointer and length describe `v`.
    let r = unsafe {
        libc::getsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_INCOMING_NAPI_ID,
            (&mut v as *mut u32).cast(),
            &mut len,
        )
    };
    if r == 0 { v } else { 0 }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_placements() {
        assert_eq!("same".parse::<Cpus>(), Ok(Cpus::Same));
        assert_eq!("split".parse::<Cpus>(), Ok(Cpus::Split));
        assert_eq!("auto".parse::<Cpus>(), Ok(Cpus::Auto));
        assert_eq!("0,1".parse::<Cpus>(), Ok(Cpus::Pair(0, 1)));
        assert_eq!("7".parse::<Cpus>(), Ok(Cpus::One(7)));
        assert!(
            "x".parse::<Cpus>()
                .unwrap_err()
                .contains("same, split, auto, N or N,M")
        );
        assert!("a,b".parse::<Cpus>().is_err());
        assert_eq!(Cpus::Pair(1, 0).to_string(), "1,0");
    }

    #[test]
    fn a_cpu_that_is_not_there_is_refused() {
        let e = Cpus::Pair(0, 100_000).resolve().unwrap_err().to_string();
        assert!(e.contains("CPU 100000"), "{e}");
        let p = Cpus::Same.resolve().unwrap();
        assert_eq!(p.client, p.server);
        assert_eq!(Cpus::Auto.resolve().unwrap(), Pin::default());
    }
}
