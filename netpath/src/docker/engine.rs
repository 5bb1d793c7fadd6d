//! A synchronous handle on a Docker engine, and the object removals every caller shares.
//!
//! bollard over its unix socket, driven by a private current-thread tokio runtime (the rest
//! of netpath is blocking code).

use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result, anyhow, bail};
use bollard::Docker;
use bollard::errors::Error as BollardError;
use bollard::query_parameters::{
    InspectNetworkOptions, ListNetworksOptions, RemoveContainerOptions,
};

/// Default socket when `DOCKER_HOST` is unset.
pub const DEFAULT_HOST: &str = "unix:///var/run/docker.sock";
/// How long connecting (version negotiation) may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// Per-request timeout handed to bollard, in seconds (image builds stream for a while).
const REQUEST_TIMEOUT_S: u64 = 300;

/// A connected Docker engine: a bollard connection (unix socket, `DOCKER_HOST` honoured, API
/// version negotiated: Debian's docker.io 20.10 speaks API 1.41) with one-line errors. Cheap
/// to clone (shared runtime and connection pool).
#[derive(Clone)]
pub struct Engine {
    docker: Docker,
    rt: Arc<tokio::runtime::Runtime>,
    /// Where the engine was reached, as in `DOCKER_HOST` (`unix:///var/run/docker.sock`).
    pub host: String,
    /// Negotiated API version (e.g. `1.41`).
    pub api_version: String,
    /// Engine version (e.g. `20.10.24+dfsg1`).
    pub server_version: String,
    /// The network namespace the daemon (and so docker-proxy, the bridges and the host
    /// ends of the veths) lives in. `/proc/self/ns/net` for the system daemon (netpath
    /// runs beside it); a netpath namespace for a second daemon.
    pub host_netns: PathBuf,
    /// Name netpath gives that namespace in device lists (`host`).
    pub host_netns_name: String,
    /// The daemon's `--exec-root` (its netns directory is `<exec_root>/netns`).
    pub exec_root: PathBuf,
}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine")
            .field("host", &self.host)
            .field("api_version", &self.api_version)
            .field("server_version", &self.server_version)
            .finish()
    }
}

impl Engine {
    /// Connect to the engine named by `DOCKER_HOST` (default
    /// `unix:///var/run/docker.sock`) and negotiate the API version.
    pub fn connect() -> Result<Engine> {
        let host = std::env::var("DOCKER_HOST")
            .ok()
            .filter(|h| !h.trim().is_empty())
            .unwrap_or_else(|| DEFAULT_HOST.to_string());
        Self::connect_to(&host)
    }

    /// Connect to `host` (`unix:///path`, a plain socket path, or `tcp://host:port`).
    pub fn connect_to(host: &str) -> Result<Engine> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .context("cannot start a tokio runtime for the Docker client")?;
        let (docker, host) = if let Some(rest) = host.strip_prefix("tcp://") {
            let d = Docker::connect_with_http(
                &format!("http://{rest}"),
                REQUEST_TIMEOUT_S,
                bollard::API_DEFAULT_VERSION,
            )
            .map_err(|e| anyhow!("Docker daemon not reachable at {host}: {e}"))?;
            (d, host.to_string())
        } else {
            let path = host.strip_prefix("unix://").unwrap_or(host);
            if !path.starts_with('/') {
                bail!(
                    "unsupported DOCKER_HOST {host:?}: netpath talks to a local engine over unix:// (or tcp://)"
                );
            }
            check_socket(path)?;
            let d = rt.block_on(async {
                Docker::connect_with_unix(path, REQUEST_TIMEOUT_S, bollard::API_DEFAULT_VERSION)
            });
            let d = d.map_err(|e| anyhow!("Docker daemon not reachable at unix://{path}: {e}"))?;
            (d, format!("unix://{path}"))
        };
        let not_reachable = |why: String| {
            anyhow!(
                "Docker daemon not reachable at {host}: {why}; start it (`dockerd &` or `systemctl start docker`)"
            )
        };
        let docker = rt
            .block_on(async {
                tokio::time::timeout(CONNECT_TIMEOUT, docker.negotiate_version()).await
            })
            .map_err(|_| not_reachable(format!("no answer within {CONNECT_TIMEOUT:?}")))?
            .map_err(|e| not_reachable(crate::error_chain(&e)))?;
        let v = rt
            .block_on(docker.version())
            .map_err(|e| not_reachable(crate::error_chain(&e)))?;
        Ok(Engine {
            api_version: docker.client_version().to_string(),
            server_version: v.version.unwrap_or_default(),
            docker,
            rt: Arc::new(rt),
            host,
            host_netns: PathBuf::from("/proc/self/ns/net"),
            host_netns_name: "host".to_string(),
            exec_root: PathBuf::from("/var/run/docker"),
        })
    }

    /// The bollard client (for calls this module does not wrap); drive its futures with
    /// [`Engine::block_on`].
    pub fn docker(&self) -> &Docker {
        &self.docker
    }

    /// Run a future on the engine's runtime. Must not be called from inside another
    /// tokio runtime.
    pub fn block_on<F: Future>(&self, f: F) -> F::Output {
        self.rt.block_on(f)
    }

    /// The unix socket path, if the engine is reached over one.
    pub fn socket_path(&self) -> Option<&Path> {
        self.host.strip_prefix("unix://").map(Path::new)
    }

    /// `docker info`.
    pub fn info(&self) -> Result<bollard::models::SystemInfo> {
        self.block_on(self.docker.info())
            .map_err(|e| self.err(e, "reading engine info"))
    }

    /// Swarm state of this engine: `(local node state, is a manager)`, e.g.
    /// `("active", true)` or `("inactive", false)`.
    pub fn swarm_state(&self) -> Result<(String, bool)> {
        let info = self.info()?;
        let s = info.swarm.unwrap_or_default();
        let state = s
            .local_node_state
            .map(|v| v.to_string())
            .unwrap_or_else(|| "inactive".into());
        Ok((state, s.control_available.unwrap_or(false)))
    }

    /// Remove a container (forced, with its volumes); one already gone is fine.
    pub(crate) fn remove_container(&self, id: &str) -> Result<()> {
        let opts = RemoveContainerOptions {
            force: true,
            v: true,
            ..Default::default()
        };
        let res = self.block_on(self.docker.remove_container(id, Some(opts)));
        self.removed(res, &format!("removing container {id}"))
            .map(drop)
    }

    /// What a removal came to: `Ok(true)` removed, `Ok(false)` already gone (fine: whoever
    /// removed it did what was asked), else the error, saying `what` was being done.
    pub(crate) fn removed<T>(&self, res: Result<T, BollardError>, what: &str) -> Result<bool> {
        match res {
            Ok(_) => Ok(true),
            Err(err) if is_not_found(&err) => Ok(false),
            Err(err) => Err(self.err(err, what)),
        }
    }

    /// Remove a network and wait until it is really gone: an overlay may still be detaching
    /// its last endpoint for a moment, and a swarm removes a swarm-scoped network
    /// asynchronously.
    pub(crate) fn remove_network(&self, name: &str) -> Result<()> {
        let deadline = std::time::Instant::now() + Duration::from_secs(15);
        let mut last = None;
        loop {
            match self.block_on(self.docker.remove_network(name)) {
                Ok(()) => {}
                Err(err) if is_not_found(&err) => {}
                Err(err) => last = Some(self.err(err, &format!("removing network {name}"))),
            }
            let gone = self.block_on(
                self.docker
                    .inspect_network(name, None::<InspectNetworkOptions>),
            );
            if matches!(&gone, Err(err) if is_not_found(err)) {
                return Ok(());
            }
            if std::time::Instant::now() >= deadline {
                return Err(
                    last.unwrap_or_else(|| anyhow!("network {name} still exists after removal"))
                );
            }
            std::thread::sleep(Duration::from_millis(250));
        }
    }

    /// Networks matching `filters` (`label`, `driver`, `name`, ...).
    pub(crate) fn networks(
        &self,
        filters: &[(&str, &str)],
    ) -> Result<Vec<bollard::models::Network>> {
        let filters = filters
            .iter()
            .map(|(k, v)| (k.to_string(), vec![v.to_string()]))
            .collect();
        let opts = ListNetworksOptions {
            filters: Some(filters),
        };
        self.block_on(self.docker.list_networks(Some(opts)))
            .map_err(|err| self.err(err, "listing networks"))
    }

    /// Turn a bollard error into one clear line: unknown containers/networks/images,
    /// swarm manager missing, daemon gone, with `what` saying what was being done.
    pub fn err(&self, e: BollardError, what: &str) -> anyhow::Error {
        classify(&self.host, e, what)
    }
}

/// One-line error for a bollard failure.
pub(crate) fn classify(host: &str, e: BollardError, what: &str) -> anyhow::Error {
    match &e {
        BollardError::DockerResponseServerError {
            status_code,
            message,
        } => {
            let m = message.trim();
            let lower = m.to_lowercase();
            if lower.contains("not a swarm manager")
                || lower.contains("swarm manager")
                || lower.contains("this node is not part of a swarm")
            {
                anyhow!(
                    "{what}: Swarm manager unavailable on {host}: {m} (overlay networks need this engine to be a swarm manager)"
                )
            } else if *status_code == 404 && lower.contains("no such container") {
                anyhow!("{what}: unknown container: {m}")
            } else if *status_code == 404 {
                anyhow!("{what}: not found: {m}")
            } else {
                anyhow!("{what}: Docker engine answered {status_code}: {m}")
            }
        }
        BollardError::SocketNotFoundError(p) => anyhow!(
            "{what}: Docker daemon not reachable at unix://{p}: start it (`dockerd &` or `systemctl start docker`)"
        ),
        BollardError::RequestTimeoutError => {
            anyhow!("{what}: the Docker daemon at {host} did not answer in time")
        }
        _ => {
            let chain = crate::error_chain(&e);
            let lower = chain.to_lowercase();
            if lower.contains("permission denied") {
                anyhow!(
                    "{what}: permission denied on the Docker socket {host}: run netpath as root (or a member of the docker group)"
                )
            } else if lower.contains("connection refused")
                || lower.contains("no such file")
                || lower.contains("broken pipe")
            {
                anyhow!(
                    "{what}: Docker daemon not reachable at {host} ({chain}): start it (`dockerd &` or `systemctl start docker`)"
                )
            } else {
                anyhow!("{what}: {chain}")
            }
        }
    }
}

/// Fail early, with the right sentence, if the socket is missing or not ours to use.
fn check_socket(path: &str) -> Result<()> {
    match std::os::unix::net::UnixStream::connect(path) {
        Ok(_) => Ok(()),
        Err(e) => match e.kind() {
            std::io::ErrorKind::PermissionDenied => bail!(
                "permission denied on the Docker socket unix://{path}: run netpath as root (or a member of the docker group)"
            ),
            std::io::ErrorKind::NotFound | std::io::ErrorKind::ConnectionRefused => bail!(
                "Docker daemon not reachable at unix://{path} ({e}): start it (`dockerd &` or `systemctl start docker`)"
            ),
            _ => bail!(
                "Docker daemon not reachable at unix://{path} ({e}): start it (`dockerd &` or `systemctl start docker`)"
            ),
        },
    }
}

/// True if a bollard error is a 404 (object already gone).
pub(crate) fn is_not_found(e: &BollardError) -> bool {
    matches!(
        e,
        BollardError::DockerResponseServerError {
            status_code: 404,
            ..
        }
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_socket_says_how_to_start_docker() {
        let e = Engine::connect_to("unix:///nonexistent/netpath-test.sock").unwrap_err();
        let s = format!("{e:#}");
        assert!(
            s.contains("Docker daemon not reachable at unix:///nonexistent/netpath-test.sock"),
            "{s}"
        );
        assert!(s.contains("dockerd &"), "{s}");
    }

    #[test]
    fn classifies_server_errors() {
        let e = classify(
            "unix:///x",
            BollardError::DockerResponseServerError {
                status_code: 404,
                message: "No such container: foo".into(),
            },
            "inspecting foo",
        );
        assert!(e.to_string().contains("unknown container"), "{e}");
        let e = classify(
            "unix:///x",
            BollardError::DockerResponseServerError {
                status_code: 503,
                message: "This node is not a swarm manager. Use \"docker swarm init\"".into(),
            },
            "creating network",
        );
        assert!(e.to_string().contains("Swarm manager unavailable"), "{e}");
    }
}
