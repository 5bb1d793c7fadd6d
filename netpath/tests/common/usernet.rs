//! A user-defined Docker network and containers on it, made with the docker CLI the way a user
//! makes them (not through netpath): for the tests of containers netpath did not start.

use std::cell::RefCell;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// `docker ARGS`, which must succeed; its stdout, trimmed.
pub fn docker(args: &[&str]) -> String {
    super::run_ok("docker", args)
}

/// A network `np-test-<run id>-net` on 10.B.K.0/24 and the containers run on it, all labelled
/// `netpath`; removed (containers first) however the test ends.
pub struct UserNet {
    /// `np-test-<run id>`, the start of every name here.
    prefix: String,
    /// B (the test's) and K (from the run id) of 10.B.K.0/24.
    subnet: (u8, u8),
    pub name: String,
    /// A host port to publish on, 20000 + a part of the run id: runs side by side differ.
    pub port: u16,
    containers: RefCell<Vec<String>>,
}

impl UserNet {
    pub fn create(b: u8) -> UserNet {
        let id = netpath::lab::new_run_id().unwrap();
        let k = u8::from_str_radix(&id[..2], 16).unwrap() % 254 + 1;
        let port = 20000 + u16::from_str_radix(&id[..3], 16).unwrap() % 10000;
        let prefix = format!("np-test-{id}");
        let name = format!("{prefix}-net");
        let subnet = format!("10.{b}.{k}.0/24");
        docker(&[
            "network", "create", "--label", "netpath", "--subnet", &subnet, &name,
        ]);
        UserNet {
            prefix,
            subnet: (b, k),
            name,
            port,
            containers: RefCell::new(Vec::new()),
        }
    }

    /// Host `host` of the subnet.
    pub fn ip(&self, host: u8) -> String {
        format!("10.{}.{}.{host}", self.subnet.0, self.subnet.1)
    }

    /// `np-test-<run id>-<role>`.
    pub fn container_name(&self, role: &str) -> String {
        format!("{}-{role}", self.prefix)
    }

    /// `docker run -d` of `image` with `cmd`, named for `role`, on this network (at `ip` if
    /// given; `extra` such as `-p` before the image). Returns its name.
    pub fn run(
        &self,
        role: &str,
        ip: Option<&str>,
        extra: &[&str],
        image: &str,
        cmd: &[&str],
    ) -> String {
        let name = self.container_name(role);
        let mut args = vec!["run", "-d", "--name", &name, "--label", "netpath"];
        args.extend(["--network", &self.name]);
        if let Some(ip) = ip {
            args.extend(["--ip", ip]);
        }
        args.extend(extra);
        args.push(image);
        args.extend(cmd);
        // Listed before it starts: a half-made container is removed too.
        self.containers.borrow_mut().push(name.clone());
        docker(&args);
        name
    }

    /// The agent's server (`image`) as `role`, listening on `bind`: [`REQ`]-byte requests,
    /// [`RESP`]-byte responses.
    pub fn serve(&self, role: &str, bind: SocketAddr, extra: &[&str], image: &str) -> String {
        let ip = bind.ip().to_string();
        let (bind, req, resp) = (bind.to_string(), REQ.to_string(), RESP.to_string());
        let cmd = ["serve", "--bind", &bind, "--req", &req, "--resp", &resp];
        self.run(role, Some(&ip), extra, image, &cmd)
    }
}

impl Drop for UserNet {
    fn drop(&mut self) {
        for c in self.containers.borrow().iter() {
            let _ = std::process::Command::new("docker")
                .args(["rm", "-f", c])
                .output();
        }
        let _ = std::process::Command::new("docker")
            .args(["network", "rm", &self.name])
            .output();
    }
}

/// The agent server's request and response sizes in [`UserNet::serve`].
pub const REQ: usize = 64;
pub const RESP: usize = 32;

/// Requests over one connection to `addr`, `gap` apart, until `done` (or 40 s); returns how
/// many were answered. The first exchange is retried for 20 s: docker-proxy accepts before the
/// server in the container listens, and until then each connection is reset.
pub fn exchange_until(addr: SocketAddr, done: &AtomicBool, gap: Duration) -> std::io::Result<u64> {
    let exchange = |c: &mut TcpStream| -> std::io::Result<()> {
        c.write_all(&[7u8; REQ])?;
        c.read_exact(&mut [0u8; RESP])
    };
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut conn = loop {
        let tried = TcpStream::connect_timeout(&addr, Duration::from_secs(2))
            .and_then(|mut c| exchange(&mut c).map(|()| c));
        match tried {
            Ok(c) => break c,
            Err(e) if Instant::now() > deadline => return Err(e),
            Err(_) => std::thread::sleep(Duration::from_millis(200)),
        }
    };
    let mut n = 1;
    let until = Instant::now() + Duration::from_secs(40);
    while !done.load(Ordering::Relaxed) && Instant::now() < until {
        exchange(&mut conn)?;
        n += 1;
        std::thread::sleep(gap);
    }
    Ok(n)
}
