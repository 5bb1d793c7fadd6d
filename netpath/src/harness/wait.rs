//! How a harness thread waits for its data (`--wait block|spin|busy-poll`), and the one
//! receiver loop the TCP, UDP and ICMP exchanges share.
//!
//! `spin` takes the scheduler out of the data path: non-blocking receives in a loop (the
//! EAGAIN receives are no journeys; the kernel programs end a journey only at a receive that
//! returns data). Nothing host-wide is changed: `SO_BUSY_POLL` is set on netpath's own sockets.

use std::io::{ErrorKind, Read, Write};
use std::net::{TcpStream, UdpSocket};
use std::os::fd::{AsRawFd, RawFd};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};

pub use crate::options::WaitMode;

/// `SO_BUSY_POLL` budget per receive, µs (what the kernel documentation suggests for sockets).
pub const BUSY_POLL_US: i32 = 50;

/// A harness socket, stream or datagram.
pub trait Sock: AsRawFd {
    fn nonblocking(&self) -> std::io::Result<()>;
    fn read_timeout(&self, t: Duration) -> std::io::Result<()>;
}

impl Sock for TcpStream {
    fn nonblocking(&self) -> std::io::Result<()> {
        self.set_nonblocking(true)
    }
    fn read_timeout(&self, t: Duration) -> std::io::Result<()> {
        self.set_read_timeout(Some(t))
    }
}

impl Sock for UdpSocket {
    fn nonblocking(&self) -> std::io::Result<()> {
        self.set_nonblocking(true)
    }
    fn read_timeout(&self, t: Duration) -> std::io::Result<()> {
        self.set_read_timeout(Some(t))
    }
}

/// One end of an exchange set up for a wait mode.
pub struct Receiver {
    pub wait: WaitMode,
    /// Yield the CPU between polls (spin with client and server on one CPU).
    pub yield_between: bool,
    /// Bound on one stream receive in spin mode (blocking modes use the socket's read timeout).
    pub timeout: Option<Duration>,
}

impl Receiver {
    /// `same_cpu`: both ends pinned to one CPU (spin yields between polls then).
    pub fn new(wait: WaitMode, same_cpu: bool, timeout: Option<Duration>) -> Receiver {
        Receiver {
            wait,
            yield_between: same_cpu,
            timeout,
        }
    }

    /// Other threads netpath runs share these CPUs (a relay beside the server, several
    /// connections per CPU): spin yields between polls so they get to run.
    pub fn sharing(mut self, shared: bool) -> Receiver {
        self.yield_between |= shared;
        self
    }

    /// Sets the socket up for the mode: non-blocking for spin, `SO_BUSY_POLL` for busy-poll;
    /// with `bound`, blocking receives return after it (so a datagram end can look whether to
    /// give up).
    pub fn prepare(&self, s: &impl Sock, bound: Option<Duration>) -> Result<()> {
        match self.wait {
            WaitMode::Block => {}
            WaitMode::Spin => s.nonblocking().context("making the socket non-blocking")?,
            WaitMode::BusyPoll => set_busy_poll_fd(s.as_raw_fd(), BUSY_POLL_US)?,
        }
        if let Some(b) = bound.filter(|_| self.wait != WaitMode::Spin) {
            s.read_timeout(b)?;
        }
        Ok(())
    }

    /// Runs `op` until it does not have to wait: `Ok(None)` when `give_up` says so while
    /// waiting (asked at every receive bound in blocking modes, every few thousand polls
    /// spinning).
    pub fn poll<T>(
        &self,
        mut op: impl FnMut() -> std::io::Result<T>,
        give_up: &mut dyn FnMut() -> bool,
    ) -> std::io::Result<Option<T>> {
        let mut polls = 0u32;
        loop {
            match op() {
                Ok(x) => return Ok(Some(x)),
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                    if self.wait == WaitMode::Spin {
                        if self.yield_between {
                            // SAFETY: sched_yield has no preconditions.
                            unsafe { libc::sched_yield() };
                        } else {
                            std::hint::spin_loop();
                        }
                        polls += 1;
                        if !polls.is_multiple_of(4096) {
                            continue;
                        }
                    }
                    if give_up() {
                        return Ok(None);
                    }
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Reads exactly `buf.len()` bytes; `UnexpectedEof` when the peer closed.
    pub fn read_exact(&self, conn: &mut TcpStream, buf: &mut [u8]) -> std::io::Result<()> {
        if self.wait != WaitMode::Spin {
            return conn.read_exact(buf);
        }
        let mut late = self.late();
        let mut off = 0;
        while off < buf.len() {
            match self.poll(|| conn.read(&mut buf[off..]), &mut late)? {
                Some(0) => return Err(ErrorKind::UnexpectedEof.into()),
                Some(n) => off += n,
                None => return Err(ErrorKind::TimedOut.into()),
            }
        }
        Ok(())
    }

    /// Writes all of `buf` (a non-blocking socket may take it in parts).
    pub fn write_all(&self, conn: &mut TcpStream, buf: &[u8]) -> std::io::Result<()> {
        if self.wait != WaitMode::Spin {
            return conn.write_all(buf);
        }
        let mut late = self.late();
        let mut off = 0;
        while off < buf.len() {
            match self.poll(|| conn.write(&buf[off..]), &mut late)? {
                Some(0) => return Err(ErrorKind::WriteZero.into()),
                Some(n) => off += n,
                None => return Err(ErrorKind::TimedOut.into()),
            }
        }
        Ok(())
    }

    /// Whether the stream bound has passed since the first time it was asked.
    fn late(&self) -> impl FnMut() -> bool + use<> {
        let timeout = self.timeout;
        let mut started: Option<Instant> = None;
        move || timeout.is_some_and(|t| started.get_or_insert_with(Instant::now).elapsed() >= t)
    }
}

/// `SO_BUSY_POLL` of `us` µs on socket `fd` (one of netpath's own).
pub fn set_busy_poll_fd(fd: RawFd, us: i32) -> Result<()> {
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
pub fn napi_id_of(fd: RawFd) -> u32 {
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
