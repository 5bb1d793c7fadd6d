//! How fast the machine's kernel networking runs right now, measured before each sweep run
//! of a round, so that a run says whether the machine changed speed under it.
//!
//! On these VMs a plain loopback UDP ping-pong's p50 moves between two levels (7.9 and
//! 11.3 µs, measured) for tens of seconds at a time while a CPU-bound loop keeps its speed:
//! the host, not the guest's CPU, changes how fast the kernel's network code runs. A round of
//! ten drivers lasts long enough to be cut by such a change, and a ratio taken across it
//! compares a fast machine with a slow one: the sweep keeps two paths' runs close, and the
//! probe says how much the machine moved over the run (it cannot pair runs: the speed also
//! changed between a probe and the run 20 ms after it). The probe: 2000 round trips of 64 bytes over
//! 127.0.0.1, both ends spinning on the CPUs the measured runs use (about 20 ms).
use std::net::UdpSocket;
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, bail};

use crate::options::Pin;
use crate::sys::runmode::pin_current;

const ROUND_TRIPS: usize = 2000;
/// A probe whose datagram does not come back within this is given up (a loaded machine).
const PATIENCE: Duration = Duration::from_millis(200);

/// The loopback ping-pong's p50 round trip, µs, client and server on `pin`'s CPUs.
pub fn probe(pin: Pin) -> Result<f64> {
    let server = UdpSocket::bind("127.0.0.1:0").context("speed probe: server socket")?;
    let client = UdpSocket::bind("127.0.0.1:0").context("speed probe: client socket")?;
    client.connect(server.local_addr()?)?;
    server.connect(client.local_addr()?)?;
    for s in [&server, &client] {
        s.set_nonblocking(true)?;
    }
    // Both ends on threads of their own: pinning is per thread, and the caller's stays as it
    // was.
    std::thread::scope(|s| {
        let echo = s.spawn(|| echo(&server, pin.server));
        let ping = s.spawn(|| {
            let rtts = ping(&client, pin.client);
            // The echo ends on the client's last datagram (a zero-length one) or its patience.
            let _ = client.send(&[]);
            rtts
        });
        let panicked = || anyhow::anyhow!("speed probe: a thread panicked");
        let rtts = ping.join().map_err(|_| panicked())?;
        echo.join().map_err(|_| panicked())??;
        let mut rtts = rtts?;
        rtts.sort_by(f64::total_cmp);
        Ok(rtts[rtts.len() / 2])
    })
}

fn echo(s: &UdpSocket, cpu: Option<usize>) -> Result<()> {
    pin_current(cpu)?;
    let mut buf = [0u8; 64];
    loop {
        let n = spin_recv(s, &mut buf)?;
        if n == 0 {
            return Ok(());
        }
        s.send(&buf[..n])?;
    }
}

fn ping(s: &UdpSocket, cpu: Option<usize>) -> Result<Vec<f64>> {
    pin_current(cpu)?;
    let mut buf = [0u8; 64];
    let mut rtts = Vec::with_capacity(ROUND_TRIPS);
    for _ in 0..ROUND_TRIPS {
        let t = Instant::now();
        s.send(&buf)?;
        spin_recv(s, &mut buf)?;
        rtts.push(t.elapsed().as_secs_f64() * 1e6);
    }
    Ok(rtts)
}

fn spin_recv(s: &UdpSocket, buf: &mut [u8]) -> Result<usize> {
    let start = Instant::now();
    loop {
        match s.recv(buf) {
            Ok(n) => return Ok(n),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                if start.elapsed() > PATIENCE {
                    bail!("speed probe: no datagram within {PATIENCE:?}");
                }
                std::hint::spin_loop();
            }
            Err(e) => return Err(e).context("speed probe: recv"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_probe_times_a_loopback_ping_pong() {
        let us = probe(Pin::default()).unwrap();
        assert!(us.is_finite() && us > 0.0, "{us}");
    }
}
