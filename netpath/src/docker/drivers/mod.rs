//! Docker's data paths built by a real engine, one file per driver mirroring `lab/`.
//!
//! Each driver makes its networks and containers and returns the [`NetPath`] between them,
//! which owns (and on teardown removes) what the driver made; docs/drivers.md ("On real
//! Docker") lists each driver's Docker objects and path. The containers run the agent
//! image: `hold` keeps each one (and its namespace) alive. The request/response server is
//! the harness's own thread, which enters the server container's namespace and listens on
//! the container's IP:11111: the packets take the same path as to a server process inside
//! the container, and the tracer knows the server thread (it correlates by thread id).
//! `netpath agent serve` exists for containers the harness does not drive.

use std::net::{Ipv4Addr, SocketAddrV4, TcpListener};
use std::path::PathBuf;

use anyhow::{Context, Result};

use super::container::{ContainerNet, hold_paths};
use super::resources::Resources;
use super::state::RunLock;
use super::{AGENT_PORT, Engine, image};
use crate::driver::Driver;
use crate::lab::new_run_id;
use crate::path::{Building, Device, Keep, NetPath};
use crate::sys::netns::{Held, Netns};

macro_rules! docker_drivers {
    ($($variant:ident $module:ident $name:literal $help:literal;)*) => {
        $(mod $module;)*

        fn build_driver(driver: Driver, b: &mut Build<'_>) -> Result<NetPath> {
            match driver {
                $(Driver::$variant => $module::build(b),)*
            }
        }
    };
}
crate::driver::driver_table!(docker_drivers);

/// How a Docker lab is built.
#[derive(Clone, Debug, Default)]
pub struct DockerLabOptions {
    /// Label the agent image `netpath.keep` (cleanup leaves it) and never remove it.
    pub keep_image: bool,
    /// Leave the agent image for the next run at teardown (cleanup still removes it).
    pub reuse_image: bool,
    /// The netpath binary to put in the image (default: the running one). It must route
    /// `netpath agent …` to [`agent_main`](super::agent_main).
    pub exe: Option<PathBuf>,
    /// `bridge`, `egress` and `gateway` on Docker's default bridge (docker0) instead of a
    /// netpath network.
    pub default_bridge: bool,
    /// Run id (default: a fresh random one).
    pub run_id: Option<String>,
}

/// Real containers on a real Docker network: the path between them (which owns everything
/// the lab made), and the containers.
pub struct DockerLab {
    pub path: NetPath,
    /// The client container (none for the published drivers: the client is the host; none
    /// for `none`: the client runs in the server's container).
    pub client: Option<ContainerNet>,
    /// The server container (none when the server is the Docker host, `gateway`, or the
    /// remote namespace netpath made, `egress` and `host-egress`).
    pub server: Option<ContainerNet>,
    /// The second daemon's socket (published-nat).
    pub daemon_socket: Option<PathBuf>,
}

impl std::fmt::Debug for DockerLab {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DockerLab")
            .field("client", &self.client.as_ref().map(|c| &c.name))
            .field("server", &self.server.as_ref().map(|c| &c.name))
            .field("path", &self.path)
            .finish()
    }
}

impl DockerLab {
    /// Build `driver` on `engine`.
    pub fn build(engine: &Engine, driver: Driver, opts: &DockerLabOptions) -> Result<DockerLab> {
        let run_id = match &opts.run_id {
            Some(id) => id.clone(),
            None => new_run_id()?,
        };
        let lock = RunLock::acquire(&run_id)?;
        crate::lab::on_interrupt("docker", super::cleanup::interrupted);
        let keep_image = opts.keep_image || opts.reuse_image;
        let mut res = Building::new(Resources::new(engine, &run_id, lock, keep_image));
        let mut b = Build::new(&mut res, driver, opts);
        // On error `res` drops and removes what was made.
        let mut path = build_driver(driver, &mut b).with_context(|| {
            format!(
                "cannot build the Docker {} lab (run {run_id})",
                driver.name()
            )
        })?;
        let (client, server) = (b.client.take(), b.server.take());
        let daemon_socket = res.second_daemon().map(|d| d.socket().to_path_buf());
        path.keep.set_owner(res.finish());
        Ok(DockerLab {
            path,
            client,
            server,
            daemon_socket,
        })
    }

    /// Remove the containers, the network, the swarm if this lab initialised it (and no
    /// other netpath overlay uses it), the macvlan parent, the second daemon and (unless
    /// kept or reused) the agent image.
    pub fn teardown(self) -> Result<()> {
        self.path.teardown()
    }
}

/// Where the harness's client runs.
pub(super) enum Client {
    /// In the client container the driver started.
    Container,
    /// On the Docker host (published ports, reached from the host).
    Host,
    /// In the server's container (`none`: nothing else can reach it).
    Server,
}

/// Where the harness's server runs.
pub(super) enum Server {
    /// In the server container the driver started.
    Container,
    /// On the Docker host.
    Host,
    /// In a namespace netpath made beside Docker (egress's remote host), with the devices
    /// that lead there and are not Docker's.
    Netns(Netns, Vec<Device>),
}

/// What a driver builds with: the run's resources, its options and its names.
pub(super) struct Build<'a> {
    pub res: &'a mut Resources,
    pub opts: &'a DockerLabOptions,
    pub driver: Driver,
    /// `np<id>-net`, the network a driver creates.
    pub net: String,
    image: Option<String>,
    client: Option<ContainerNet>,
    server: Option<ContainerNet>,
}

impl<'a> Build<'a> {
    fn new(res: &'a mut Resources, driver: Driver, opts: &'a DockerLabOptions) -> Build<'a> {
        let net = format!("np{}-net", res.run_id);
        Build {
            res,
            opts,
            driver,
            net,
            image: None,
            client: None,
            server: None,
        }
    }

    /// The agent image on the engine the containers run on, built on first use.
    fn image(&mut self) -> Result<String> {
        if let Some(i) = &self.image {
            return Ok(i.clone());
        }
        let exe = self
            .opts
            .exe
            .clone()
            .unwrap_or_else(|| PathBuf::from("/proc/self/exe"));
        let tag = image::ensure_agent_image_from(self.res.ctr(), &exe, self.opts.keep_image)?;
        // A second daemon's images go with its data root.
        if self.res.second_daemon().is_none() {
            self.res.image = Some(tag.clone());
        }
        self.image = Some(tag.clone());
        Ok(tag)
    }

    /// Start the agent container `np<id>-<role>` (holding, the harness enters it) on
    /// `network`, at `ip` if given, publishing `127.0.0.1:publish` if given.
    fn container(
        &mut self,
        role: &str,
        network: &str,
        ip: Option<Ipv4Addr>,
        publish: Option<u16>,
    ) -> Result<ContainerNet> {
        let image = self.image()?;
        let name = format!("np{}-{role}", self.res.run_id);
        self.res
            .run_container(&name, &image, &["hold"], network, ip, publish)
    }

    /// The server container `np<id>-srv`, started (and kept for the path).
    pub fn server(
        &mut self,
        network: &str,
        ip: Option<Ipv4Addr>,
        publish: Option<u16>,
    ) -> Result<ContainerNet> {
        let c = self.container("srv", network, ip, publish)?;
        self.server = Some(c.clone());
        Ok(c)
    }

    /// The client container `np<id>-cli`, started (and kept for the path).
    pub fn client(&mut self, network: &str, ip: Option<Ipv4Addr>) -> Result<ContainerNet> {
        let c = self.container("cli", network, ip, None)?;
        self.client = Some(c.clone());
        Ok(c)
    }

    /// Server and client containers on `network` with addresses Docker assigns; the
    /// server's address there on the agent port.
    pub fn pair_on(&mut self, network: &str) -> Result<SocketAddrV4> {
        let s = self.server(network, None, None)?;
        self.client(network, None)?;
        let ip = s
            .ip_on(network)
            .with_context(|| format!("server container has no IPv4 address on {network}"))?;
        Ok(SocketAddrV4::new(ip, AGENT_PORT))
    }

    /// The path from `client` to the server container listening on `bind`, connected to at
    /// `connect_to`: its namespaces held, its devices read, the Docker host's namespace in
    /// it when the client or a `--network host` container runs there.
    pub fn path(
        &mut self,
        client: Client,
        bind: SocketAddrV4,
        connect_to: SocketAddrV4,
    ) -> Result<NetPath> {
        self.path_to(client, Server::Container, bind, connect_to)
    }

    /// [`path`](Self::path) to a server that runs where `server` says.
    pub fn path_to(
        &mut self,
        client: Client,
        server: Server,
        bind: SocketAddrV4,
        connect_to: SocketAddrV4,
    ) -> Result<NetPath> {
        let e = self.res.ctr().clone();
        let client_ctr = match client {
            Client::Container => Some(self.client.as_ref().context("no client container")?),
            Client::Host | Client::Server => None,
        };
        let server_ctr = match server {
            Server::Container => Some(self.server.as_ref().context("no server container")?),
            Server::Host | Server::Netns(..) => None,
        };
        let host_used = matches!(client, Client::Host)
            || !matches!(server, Server::Container)
            || server_ctr.is_some_and(|s| s.host_network)
            || client_ctr.is_some_and(|c| c.host_network);
        let cs: Vec<&ContainerNet> = client_ctr.into_iter().chain(server_ctr).collect();
        let (mut held, mut devices) = hold_paths(&e, &cs, host_used)?;
        let node_ns = host_used
            .then(|| named(&held, &e.host_netns_name))
            .transpose()?;
        let server_ns = match server {
            Server::Container => named(&held, &server_ctr.expect("container").netns_name())?,
            Server::Host => node_ns.clone().context("the Docker host's namespace")?,
            Server::Netns(ns, devs) => {
                held.push(Held::open(ns.clone())?);
                devices.extend(devs);
                ns
            }
        };
        let client_ns = match (client, client_ctr) {
            (_, Some(c)) => named(&held, &c.netns_name())?,
            (Client::Host, _) => node_ns.clone().context("the Docker host's namespace")?,
            _ => server_ns.clone(),
        };
        let mut p = NetPath::new(self.driver, &self.res.run_id, client_ns, server_ns, bind);
        p.connect_to = connect_to;
        p.devices = devices;
        p.node_ns = node_ns;
        p.keep = Keep::held(held);
        Ok(p)
    }
}

/// The namespace called `name` among `held`.
fn named(held: &[Held], name: &str) -> Result<Netns> {
    held.iter()
        .find(|h| h.ns.name == name)
        .map(|h| h.ns.clone())
        .with_context(|| format!("namespace {name} not found"))
}

/// A port free on 127.0.0.1 in this process's namespace right now.
fn free_port_here() -> Result<u16> {
    let l = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).context("finding a free port")?;
    Ok(l.local_addr()?.port())
}

/// A port free on `ip` in namespace `ns` right now.
fn free_port_in(ns: &Netns, ip: Ipv4Addr) -> Result<u16> {
    ns.run(|| {
        let l = TcpListener::bind((ip, 0))
            .with_context(|| format!("finding a free port on {ip} in {}", ns.name))?;
        Ok(l.local_addr()?.port())
    })
}
