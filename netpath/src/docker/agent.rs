//! The in-container agent (`netpath agent serve|hold`), the `netpath-agent` image's entrypoint.
//!
//! * `serve --bind IP:PORT [--req SIZE] [--resp SIZE]`: request/response echo server like
//!   the harness's (`read_exact(req)` then `write_all(resp)` until EOF), one thread per
//!   connection, accepting forever. The address is explicit (the container's own IP):
//!   a wildcard bind is refused.
//! * `hold`: sleep forever; keeps a container (and its network namespace) alive.
//!
//! SIGTERM (what `docker stop` sends to PID 1) ends either at once: PID 1 in a container
//! has no default signal dispositions, so they are installed explicitly.

use std::io::ErrorKind;
use std::net::{SocketAddr, TcpListener};

use anyhow::{Context, Result, bail};

const USAGE: &str = "usage: netpath agent serve --bind IP:PORT [--req SIZE] [--resp SIZE]\n       netpath agent hold";

/// Entry point of `netpath agent ARGS…` (`args` excludes `agent` itself).
pub fn agent_main(args: &[String]) -> Result<()> {
    let Some((cmd, rest)) = args.split_first() else {
        bail!("{USAGE}");
    };
    match cmd.as_str() {
        "serve" => {
            let o = ServeOpts::parse(rest)?;
            exit_on_term();
            serve(&o)
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
}

impl ServeOpts {
    pub fn parse(args: &[String]) -> Result<ServeOpts> {
        let mut bind = None;
        let (mut req, mut resp) = (1024usize, 1024usize);
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
        Ok(ServeOpts { bind, req, resp })
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
        assert_eq!((o.req, o.resp), (1024, 64));
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
}
