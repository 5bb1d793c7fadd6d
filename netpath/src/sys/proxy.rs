//! docker-proxy processes on this machine: the one scan of `/proc` that finds them.
//!
//! The lab's cleanup looks for the ones left in its namespaces, `docker inspect` and the
//! Docker published-proxy driver for the one serving a port.

use std::path::Path;

use crate::sys::netns::ns_inum;

/// Docker's userland proxy for published ports (Debian package docker.io).
pub const DOCKER_PROXY: &str = "/usr/sbin/docker-proxy";

/// A docker-proxy process and what it forwards (from its arguments: `-proto tcp -host-ip
/// 127.0.0.1 -host-port P -container-ip C -container-port Q`).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, schemars::JsonSchema)]
pub struct ProxyProcess {
    pub pid: u32,
    /// Inode of its network namespace.
    #[serde(skip)]
    pub netns_inum: u32,
    pub proto: String,
    pub host_ip: String,
    pub host_port: u16,
    pub container_ip: String,
    pub container_port: u16,
}

/// Every docker-proxy process on the machine, by pid.
pub fn proxy_processes() -> Vec<ProxyProcess> {
    let Ok(all) = procfs::process::all_processes() else {
        return Vec::new();
    };
    let mut v: Vec<ProxyProcess> = all
        .filter_map(|p| u32::try_from(p.ok()?.pid).ok())
        .filter_map(proxy_process)
        .collect();
    v.sort_by_key(|p| p.pid);
    v
}

/// `pid` if it is a docker-proxy: its executable is called `docker-proxy` (`docker-proxy
/// (deleted)` after a package upgrade), or its `argv[0]` ends so.
pub fn proxy_process(pid: u32) -> Option<ProxyProcess> {
    let proc = procfs::process::Process::new(i32::try_from(pid).ok()?).ok()?;
    let args = proc.cmdline().ok()?;
    let exe_is_proxy = proc
        .exe()
        .ok()
        .and_then(|e| Some(e.file_name()?.to_str()?.starts_with("docker-proxy")))
        .unwrap_or(false);
    if !exe_is_proxy && !args.first()?.ends_with("docker-proxy") {
        return None;
    }
    let mut p = parse_proxy_args(pid, &args).unwrap_or(ProxyProcess {
        pid,
        netns_inum: 0,
        proto: String::new(),
        host_ip: String::new(),
        host_port: 0,
        container_ip: String::new(),
        container_port: 0,
    });
    p.netns_inum = ns_inum(Path::new(&format!("/proc/{pid}/ns/net"))).ok()?;
    Some(p)
}

/// What a docker-proxy forwards, from its arguments; `None` without both ports.
pub fn parse_proxy_args(pid: u32, args: &[String]) -> Option<ProxyProcess> {
    let get = |k: &str| {
        args.iter()
            .position(|a| a == k)
            .and_then(|i| args.get(i + 1))
            .cloned()
    };
    Some(ProxyProcess {
        pid,
        netns_inum: 0,
        proto: get("-proto").unwrap_or_else(|| "tcp".into()),
        host_ip: get("-host-ip").unwrap_or_default(),
        host_port: get("-host-port")?.parse().ok()?,
        container_ip: get("-container-ip").unwrap_or_default(),
        container_port: get("-container-port")?.parse().ok()?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_docker_proxy_cmdline() {
        let args: Vec<String> = [
            "/usr/sbin/docker-proxy",
            "-proto",
            "tcp",
            "-host-ip",
            "127.0.0.1",
            "-host-port",
            "40001",
            "-container-ip",
            "172.18.0.2",
            "-container-port",
            "11111",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        let p = parse_proxy_args(7, &args).unwrap();
        assert_eq!(p.host_port, 40001);
        assert_eq!(p.container_ip, "172.18.0.2");
        assert_eq!(p.container_port, 11111);
        assert!(parse_proxy_args(7, &["/bin/sh".to_string()]).is_none());
    }

    #[test]
    fn this_process_is_no_proxy() {
        assert!(proxy_process(std::process::id()).is_none());
        assert!(
            proxy_processes()
                .iter()
                .all(|p| p.pid != std::process::id())
        );
    }
}
