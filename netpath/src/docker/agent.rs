//! The in-container agent (`netpath agent serve|hold`), the `netpath-agent` image's entrypoint.
//!
//! * `serve --bind IP:PORT [--req SIZE] [--resp SIZE] [--proto tcp|udp]`: request/response
//!   echo server like the harness's: TCP `read_exact(req)` then `write_all(resp)` until EOF,
//!   one thread per connection, accepting forever; UDP a `resp`-byte datagram to whoever sent
//!   a `req`-byte one, its first 8 bytes (the harness's sequence number) echoed. ICMP needs no
//!   server: the container's kernel answers echo requests. The address is explicit (the
//!   container's own IP): a wildcard bind is refused.
//! * `hold`: sleep forever; keeps a container (and its network namespace) alive.
//!
//! SIGTERM (what `docker stop` sends to PID 1) ends either at once: PID 1 in a container
//! has no default signal dispositions, so they are installed explicitly.

use std::io::ErrorKind;
use std::net::{SocketAddr, TcpListener, UdpSocket};

use anyhow::{Context, Result, bail};

use crate::harness::Proto;

const USAGE: &str = "usage: netpath agent serve --bind IP:PORT [--req SIZE] [--resp SIZE] [--proto tcp|udp]\n       netpath agent hold";

/// Entry point of `netpath agent ARGS…` (`args` excludes `agent` itself).
pub fn agent_main(args: &[String]) -> Result<()> {
    let Some((cmd, rest)) = args.split_first() else {
        bail!("{USAGE}");
    };
    match cmd.as_str() {
        "serve" => {
            let o = ServeOpts::parse(rest)?;
            exit_on_term();
            match o.proto {
                Proto::Udp => serve_udp(&o),
                _ => serve(&o),
            }
        }
        "hold" => {
            if !rest.is_empty() {
                bail!("hold takes no arguments\n{USAGE}");
            }
            exit_on_term();
            loop {
                std::thread::park();
            }
        }
        "-h" | "--help" | "help" => {
            println!("{USAGE}");
            Ok(())
        }
        other => bail!("unknown agent command {other:?}\n{USAGE}"),
    }
}

/// Options of `serve`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServeOpts {
    pub bind: SocketAddr,
    pub req: usize,
    pub resp: usize,
    pub proto: Proto,
}

impl ServeOpts {
    pub fn parse(args: &[String]) -> Result<ServeOpts> {
        let mut bind = None;
        let (mut req, mut resp) = (1024usize, 1024usize);
        let mut proto = Proto::Tcp;
        let mut it = args.iter();
        while let Some(a) = it.next() {
            let (k, inline) = match a.split_once('=') {
                Some((k, v)) => (k, Some(v.to_string())),
                None => (a.as_str(), None),
            };
            let mut val = || -> Result<String> {
                match &inline {
                    Some(v) => Ok(v.clone()),
                    None => it
                        .next()
                        .cloned()
                        .with_context(|| format!("{k} needs a value\n{USAGE}")),
                }
            };
            match k {
                "--bind" => {
                    let v = val()?;
                    bind = Some(
                        v.parse::<SocketAddr>()
                            .with_context(|| format!("--bind {v:?}: want IP:PORT"))?,
                    )
                }
                "--req" => req = val()?.parse().context("--req: want a byte count")?,
                "--resp" => resp = val()?.parse().context("--resp: want a byte count")?,
                "--proto" => {
                    proto = match val()?.as_str() {
                        "tcp" => Proto::Tcp,
                        "udp" => Proto::Udp,
                        "icmp" => bail!(
                            "--proto icmp needs no server: the container's kernel answers echo requests"
                        ),
                        v => bail!("--proto {v:?}: want tcp or udp"),
                    }
                }
                _ => bail!("unknown serve option {a:?}\n{USAGE}"),
            }
        }
        let bind = bind.with_context(|| format!("serve needs --bind IP:PORT\n{USAGE}"))?;
        if bind.ip().is_unspecified() {
            bail!("refusing to listen on the wildcard address {bind}: pass the container's own IP");
        }
        if req == 0 || resp == 0 {
            bail!("--req and --resp must be at least 1 byte");
        }
        if proto == Proto::Udp && req.max(resp) > 65_507 {
            bail!("--proto udp: --req and --resp must fit one datagram (at most 65507 bytes)");
        }
        Ok(ServeOpts {
            bind,
            req,
            resp,
            proto,
        })
    }
}

fn serve(o: &ServeOpts) -> Result<()> {
    let l = TcpListener::bind(o.bind).with_context(|| format!("cannot listen on {}", o.bind))?;
    eprintln!("netpath agent: serving on {}", o.bind);
    loop {
        match l.accept() {
            Ok((conn, _)) => {
                let (req, resp) = (o.req, o.resp);
                std::thread::spawn(move || {
                    if let Err(e) = echo(conn, req, resp) {
                        eprintln!("netpath agent: {e:#}");
                    }
                });
            }
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => {
                eprintln!("netpath agent: accept: {e}");
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
        }
    }
}

/// UDP: answers each request to its sender (behind NAT, the translated address), in the
/// harness's own wire format (`harness::dgram::Answerer`).
fn serve_udp(o: &ServeOpts) -> Result<()> {
    let s = UdpSocket::bind(o.bind).with_context(|| format!("cannot bind UDP {}", o.bind))?;
    eprintln!("netpath agent: serving UDP on {}", o.bind);
    let mut echo = crate::harness::dgram::Answerer::new(o.req, o.resp);
    loop {
        match s.recv_from(echo.buffer()) {
            Ok((len, peer)) => {
                let Some(resp) = echo.answer(len) else {
                    continue;
                };
                if let Err(e) = s.send_to(resp, peer) {
                    eprintln!("netpath agent: answering {peer}: {e}");
                }
            }
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => bail!("netpath agent: receiving: {e}"),
        }
    }
}

pub use crate::harness::echo;

extern "C" fn on_term(_: libc::c_int) {
    // SAFETY: _exit is async-signal-safe.
    unsafe { libc::_exit(0) };
}

/// As PID 1 the kernel ignores signals without a handler: install one for SIGTERM/SIGINT.
fn exit_on_term() {
    for sig in [libc::SIGTERM, libc::SIGINT] {
        // SAFETY: installing a handler that only calls _exit.
        unsafe {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = on_term as *const () as usize;
            libc::sigemptyset(&mut sa.sa_mask);
            libc::sigaction(sig, &sa, std::ptr::null_mut());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(v: &[&str]) -> Vec<String> {
        v.iter().map(|x| x.to_string()).collect()
    }

    #[test]
    fn parses_serve() {
        let o = ServeOpts::parse(&s(&["--bind", "10.0.0.2:11111", "--resp=64"])).unwrap();
        assert_eq!(o.bind, "10.0.0.2:11111".parse().unwrap());
        assert_eq!((o.req, o.resp, o.proto), (1024, 64, Proto::Tcp));
        let u = ServeOpts::parse(&s(&["--bind", "10.0.0.2:1", "--proto", "udp"])).unwrap();
        assert_eq!(u.proto, Proto::Udp);
        assert!(ServeOpts::parse(&s(&["--bind", "10.0.0.2:1", "--proto=icmp"])).is_err());
        assert!(
            ServeOpts::parse(&s(&["--bind", "10.0.0.2:1", "--proto=udp", "--req=70000"])).is_err()
        );
        assert!(ServeOpts::parse(&s(&["--bind", "0.0.0.0:1"])).is_err());
        assert!(ServeOpts::parse(&s(&[])).is_err());
        assert!(ServeOpts::parse(&s(&["--bind", "1.2.3.4:5", "--req", "0"])).is_err());
        assert!(agent_main(&s(&["bogus"])).is_err());
    }

    #[test]
    fn echo_server_answers() {
        use std::io::{Read, Write};
        use std::net::TcpStream;
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let t = std::thread::spawn(move || {
            let (c, _) = l.accept().unwrap();
            echo(c, 8, 3).unwrap();
        });
        let mut c = TcpStream::connect(addr).unwrap();
        let mut out = [0u8; 3];
        for _ in 0..5 {
            c.write_all(&[1u8; 8]).unwrap();
            c.read_exact(&mut out).unwrap();
            assert_eq!(out, [0x5a; 3]);
        }
        drop(c);
        t.join().unwrap();
    }

    #[test]
    fn udp_server_answers_with_the_sequence() {
        let o = ServeOpts::parse(&s(&[
            "--bind",
            "127.0.0.1:0",
            "--proto",
            "udp",
            "--req",
            "16",
            "--resp",
            "12",
        ]))
        .unwrap();
        // Bound here (port 0 → a free one), then the server loop on that address.
        let probe = UdpSocket::bind(o.bind).unwrap();
        let bind = probe.local_addr().unwrap();
        drop(probe);
        let o = ServeOpts { bind, ..o };
        std::thread::spawn(move || serve_udp(&o));
        let c = UdpSocket::bind("127.0.0.1:0").unwrap();
        c.set_read_timeout(Some(std::time::Duration::from_millis(100)))
            .unwrap();
        let mut got = [0u8; 13];
        for seq in 0u64..3 {
            let mut req = [0xa5u8; 16];
            req[..8].copy_from_slice(&seq.to_le_bytes());
            // Until the server thread is bound, a request may go unanswered: resend.
            let n = (0..100)
                .find_map(|_| {
                    c.send_to(&req, bind).unwrap();
                    c.recv_from(&mut got).ok().map(|(n, _)| n)
                })
                .expect("no answer from the UDP server in 10 s");
            assert_eq!(n, 12);
            assert_eq!(got[..8], seq.to_le_bytes());
            assert_eq!(got[8..12], [0x5a; 4]);
        }
    }
}
