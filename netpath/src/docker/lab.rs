//! `DockerLab`: the lab's data paths built by a real Docker engine, with the agent image.
//!
//! | driver            | Docker objects                                   | client → server |
//! |-------------------|--------------------------------------------------|-----------------|
//! | `bridge`          | network `np<id>-net` (bridge `np<id>br`), or docker0 | cli eth0 → veth → bridge → veth → srv eth0 |
//! | `host`            | two `--network host` containers                  | host lo         |
//! | `none`            | one `--network none` container                   | its lo          |
//! | `overlay`         | swarm (initialised on 127.0.0.1 if none), attachable overlay `np<id>-net` | eth0 → veth → br0 (overlay netns, with vxlan0) → veth → eth0 |
//! | `macvlan`         | parent veth `np<id>mp` (peer in netns `np<id>-mvp`), macvlan network | macvlan → macvlan |
//! | `published-proxy` | srv with `-p 127.0.0.1:P:11111` on `np<id>-net`  | host lo → docker-proxy → bridge → veth → eth0 |
//! | `published-nat`   | a second dockerd (`--userland-proxy=false`) in netns `np<id>-dkr`, srv with `-p 127.0.0.1:P:11111` | dkr lo → OUTPUT DNAT → bridge → veth → eth0 |
//!
//! The containers run the agent image: `hold` keeps each one (and its namespace) alive.
//! The request/response server is the harness's own thread, which enters the server
//! container's namespace and listens on the container's IP:11111: the packets take the
//! same path as to a server process inside the container, and the tracer knows the
//! server thread (it correlates by thread id). `netpath agent serve` exists for
//! containers the harness does not drive.

use std::collections::HashMap;
use std::net::{Ipv4Addr, SocketAddrV4, TcpListener};
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, anyhow, bail};
use bollard::models::{
    ContainerCreateBody, EndpointIpamConfig, EndpointSettings, HostConfig, Ipam, IpamConfig,
    NetworkCreateRequest, NetworkingConfig, PortBinding, SwarmInitRequest,
};
use bollard::query_parameters::{
    CreateContainerOptions, InspectContainerOptions, ListNetworksOptions, RemoveContainerOptions,
    RemoveImageOptions, StartContainerOptions,
};
use netpath_common::DevKind;

use super::container::{ContainerNet, from_inspect};
use super::daemon::SecondDaemon;
use super::engine::is_not_found;
use super::netlink::links_at;
use super::state::{self, RunLock, SwarmRecord};
use super::{AGENT_PORT, Engine, LABEL, LABEL_RUN, image};
use crate::lab::{
    Driver, Lab, LabDevice, LabParts, Netns, PUBLISHED_PORT, UNDERLAY_MTU, ifname, lab_subnet_in,
    netns_name, new_run_id, nl::Nl, ns_inum, subnet_host,
};

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
    /// `bridge` on Docker's default bridge (docker0) instead of a netpath network.
    pub default_bridge: bool,
    /// Run id (default: a fresh random one).
    pub run_id: Option<String>,
}

/// Real containers on a real Docker network, shaped like a [`Lab`].
pub struct DockerLab {
    pub driver: Driver,
    pub run_id: String,
    /// Agent image tag.
    pub image: String,
    /// The client container (none for the published drivers: the client is the host).
    pub client: Option<ContainerNet>,
    pub server: ContainerNet,
    /// The Docker network netpath created, if any.
    pub network: Option<String>,
    pub client_ns: Netns,
    pub server_ns: Netns,
    pub server_bind: SocketAddrV4,
    pub connect_to: SocketAddrV4,
    pub devices: Vec<LabDevice>,
    /// `127.0.0.1:P` published by `-p` (published drivers).
    pub published: Option<SocketAddrV4>,
    /// The docker-proxy serving the published port (published-proxy).
    pub proxy_pid: Option<u32>,
    /// The Docker host's namespace, when the lab uses it.
    pub host_ns: Option<Netns>,
    /// Every namespace of the lab with the fd that keeps it (paths are
    /// `/proc/self/fd/N` of these fds).
    nss: Vec<(Netns, OwnedFd)>,
    res: Resources,
}

impl std::fmt::Debug for DockerLab {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DockerLab")
            .field("driver", &self.driver)
            .field("run_id", &self.run_id)
            .field("client", &self.client.as_ref().map(|c| &c.name))
            .field("server", &self.server.name)
            .field("server_bind", &self.server_bind)
            .field("connect_to", &self.connect_to)
            .field("devices", &self.devices)
            .field("proxy_pid", &self.proxy_pid)
            .finish()
    }
}

impl DockerLab {
    /// Build `driver` on `engine` (the second daemon of `published-nat` is started here).
    pub fn build(engine: &Engine, driver: Driver, opts: &DockerLabOptions) -> Result<DockerLab> {
        let run_id = match &opts.run_id {
            Some(id) => id.clone(),
            None => new_run_id()?,
        };
        let lock = RunLock::acquire(&run_id)?;
        crate::lab::on_interrupt("docker", super::cleanup::interrupted);
        let mut res = Resources {
            engine: engine.clone(),
            run_id: run_id.clone(),
            ctr_engine: None,
            containers: Vec::new(),
            networks: Vec::new(),
            swarm_created: false,
            macvlan: None,
            daemon: None,
            image: None,
            keep_image: opts.keep_image || opts.reuse_image,
            done: false,
            _lock: Some(lock),
        };
        build_in(&mut res, driver, opts).with_context(|| {
            format!(
                "cannot build the Docker {} lab (run {run_id})",
                driver.name()
            )
        })
        // On error `res` drops here and removes what was made.
    }

    /// The same lab as a [`Lab`] for the harness and the tracer. It holds its own fds on
    /// every namespace and tears nothing down; tear down with [`DockerLab::teardown`].
    pub fn to_lab(&self) -> Result<Lab> {
        let mut nss = Vec::new();
        for (ns, fd) in &self.nss {
            let dup = fd.try_clone().context("dup of a namespace fd")?;
            let n = Netns {
                name: ns.name.clone(),
                path: fd_path(&dup),
                inum: ns.inum,
            };
            nss.push((n, dup));
        }
        let find = |name: &str| -> Result<Netns> {
            nss.iter()
                .find(|(n, _)| n.name == name)
                .map(|(n, _)| n.clone())
                .ok_or_else(|| anyhow!("namespace {name} missing from the Docker lab"))
        };
        let client_ns = find(&self.client_ns.name)?;
        let server_ns = find(&self.server_ns.name)?;
        let node_ns = match &self.host_ns {
            Some(h) => Some(find(&h.name)?),
            None => None,
        };
        Ok(Lab::from_parts(LabParts {
            driver: self.driver,
            run_id: self.run_id.clone(),
            client_ns,
            server_ns,
            server_bind: self.server_bind,
            connect_to: self.connect_to,
            devices: self.devices.clone(),
            node_ns,
            published: self.published,
            proxy_pid: self.proxy_pid,
            namespaces: nss,
        }))
    }

    /// Every namespace of the lab (paths valid while the lab lives).
    pub fn namespaces(&self) -> Vec<Netns> {
        self.nss.iter().map(|(n, _)| n.clone()).collect()
    }

    /// Names of the containers, networks and links this lab made.
    pub fn objects(&self) -> Vec<String> {
        let mut v: Vec<String> = self.res.containers.iter().map(|(_, n)| n.clone()).collect();
        v.extend(self.res.networks.iter().cloned());
        if let Some(m) = &self.res.macvlan {
            v.push(m.parent.clone());
            v.push(m.netns.name.clone());
        }
        if let Some(d) = &self.res.daemon {
            v.push(d.netns.name.clone());
        }
        v
    }

    /// The second daemon's socket (published-nat).
    pub fn daemon_socket(&self) -> Option<&Path> {
        self.res.daemon.as_ref().map(|d| d.socket())
    }

    /// Remove the containers, the network, the swarm if this lab initialised it (and no
    /// other netpath overlay uses it), the macvlan parent, the second daemon and (unless
    /// kept or reused) the agent image.
    pub fn teardown(mut self) -> Result<()> {
        self.nss.clear();
        self.res.teardown()
    }
}

/// `/proc/self/fd/N` of an fd (a path any thread of this process can open).
fn fd_path(fd: &OwnedFd) -> PathBuf {
    PathBuf::from(format!("/proc/self/fd/{}", fd.as_raw_fd()))
}

/// The macvlan parent netpath made: `np<id>mp` in the host namespace, its peer in
/// `np<id>-mvp`.
struct MacvlanParent {
    parent: String,
    host_netns: PathBuf,
    netns: Netns,
    _fd: OwnedFd,
}

/// Everything a Docker lab created, removed on teardown or drop.
struct Resources {
    engine: Engine,
    run_id: String,
    /// Engine of the second daemon (published-nat), where the containers are.
    ctr_engine: Option<Engine>,
    /// (id, name)
    containers: Vec<(String, String)>,
    networks: Vec<String>,
    swarm_created: bool,
    macvlan: Option<MacvlanParent>,
    daemon: Option<SecondDaemon>,
    /// The agent image on the main engine, to remove at teardown.
    image: Option<String>,
    keep_image: bool,
    done: bool,
    _lock: Option<RunLock>,
}

impl Resources {
    fn ctr(&self) -> &Engine {
        self.ctr_engine.as_ref().unwrap_or(&self.engine)
    }

    fn teardown(&mut self) -> Result<()> {
        if self.done {
            return Ok(());
        }
        self.done = true;
        let mut first: Option<anyhow::Error> = None;
        let mut note = |r: Result<()>| {
            if let Err(e) = r {
                first.get_or_insert(e);
            }
        };
        let e = self.ctr().clone();
        for (id, name) in std::mem::take(&mut self.containers).into_iter().rev() {
            note(remove_container(&e, &id).with_context(|| format!("removing container {name}")));
        }
        let networks = std::mem::take(&mut self.networks);
        for n in networks.iter().rev() {
            note(remove_network(&e, n));
        }
        if self.swarm_created {
            note(leave_swarm_if_unused(&self.engine, &networks).map(|_| ()));
        }
        if let Some(m) = self.macvlan.take() {
            note(remove_macvlan_parent(&m));
        }
        self.ctr_engine = None;
        if let Some(d) = self.daemon.take() {
            note(d.stop());
        }
        if let Some(img) = self.image.take()
            && !self.keep_image
        {
            // Fails (harmlessly) while another run's containers use it.
            let _ = self.engine.block_on(self.engine.docker().remove_image(
                &img,
                None::<RemoveImageOptions>,
                None,
            ));
        }
        self._lock = None;
        match first {
            None => Ok(()),
            Some(e) => Err(e.context(format!("teardown of Docker lab {} incomplete", self.run_id))),
        }
    }
}

impl Drop for Resources {
    fn drop(&mut self) {
        if let Err(e) = self.teardown() {
            log::warn!("{e:#}");
        }
    }
}

fn build_in(res: &mut Resources, driver: Driver, opts: &DockerLabOptions) -> Result<DockerLab> {
    let id = res.run_id.clone();
    let exe = opts
        .exe
        .clone()
        .unwrap_or_else(|| PathBuf::from("/proc/self/exe"));

    if driver == Driver::PublishedNat {
        let d = SecondDaemon::start(&id)?;
        let e2 = d.engine()?;
        res.daemon = Some(d);
        res.ctr_engine = Some(e2);
    }
    let e = res.ctr().clone();
    let image = image::ensure_agent_image_from(&e, &exe, opts.keep_image)?;
    if res.daemon.is_none() {
        res.image = Some(image.clone());
    }
    let net_name = format!("np{id}-net");
    let (srv_name, cli_name) = (format!("np{id}-srv"), format!("np{id}-cli"));
    let hold = ["hold"];

    let mut host_used = false;
    let (client, server, server_bind, connect_to, published, proxy_pid, network);
    match driver {
        Driver::Bridge => {
            let net = if opts.default_bridge {
                "bridge".to_string()
            } else {
                create_bridge_network(res, &id, &net_name)?;
                net_name.clone()
            };
            let (s, c);
            (s, c, server_bind) = pair_on(res, [&srv_name, &cli_name], &image, &net)?;
            connect_to = server_bind;
            (client, server) = (Some(c), s);
            published = None;
            proxy_pid = None;
            network = (!opts.default_bridge).then_some(net);
        }
        Driver::Host => {
            let s = run(res, &srv_name, &image, &hold, "host", None, None)?;
            let c = run(res, &cli_name, &image, &hold, "host", None, None)?;
            host_used = true;
            let port = free_port_here()?;
            server_bind = SocketAddrV4::new(Ipv4Addr::LOCALHOST, port);
            connect_to = server_bind;
            (client, server) = (Some(c), s);
            published = None;
            proxy_pid = None;
            network = None;
        }
        Driver::None => {
            let s = run(res, &srv_name, &image, &hold, "none", None, None)?;
            server_bind = SocketAddrV4::new(Ipv4Addr::LOCALHOST, AGENT_PORT);
            connect_to = server_bind;
            (client, server) = (None, s);
            published = None;
            proxy_pid = None;
            network = None;
        }
        Driver::Overlay => {
            res.swarm_created = ensure_swarm(&res.engine)?;
            create_network(res, &net_name, "overlay", HashMap::new(), None, true)?;
            let (s, c);
            (s, c, server_bind) = pair_on(res, [&srv_name, &cli_name], &image, &net_name)?;
            connect_to = server_bind;
            (client, server) = (Some(c), s);
            published = None;
            proxy_pid = None;
            network = Some(net_name.clone());
        }
        Driver::Macvlan => {
            let parent = make_macvlan_parent(res)?;
            let (net, plen) = lab_subnet_in(&id, 216);
            let (cli_ip, srv_ip) = (subnet_host(net, 2), subnet_host(net, 3));
            create_network(
                res,
                &net_name,
                "macvlan",
                HashMap::from([
                    ("parent".to_string(), parent),
                    ("macvlan_mode".to_string(), "bridge".to_string()),
                ]),
                Some(IpamConfig {
                    subnet: Some(format!("{net}/{plen}")),
                    gateway: Some(subnet_host(net, 1).to_string()),
                    ..Default::default()
                }),
                false,
            )?;
            let s = run(res, &srv_name, &image, &hold, &net_name, Some(srv_ip), None)?;
            let c = run(res, &cli_name, &image, &hold, &net_name, Some(cli_ip), None)?;
            server_bind = SocketAddrV4::new(srv_ip, AGENT_PORT);
            connect_to = server_bind;
            (client, server) = (Some(c), s);
            published = None;
            proxy_pid = None;
            network = Some(net_name.clone());
        }
        Driver::PublishedProxy | Driver::PublishedNat => {
            create_bridge_network(res, &id, &net_name)?;
            let port = if driver == Driver::PublishedNat {
                // The second daemon's own namespace: nothing else binds there.
                PUBLISHED_PORT
            } else {
                free_port_here()?
            };
            let s = run(res, &srv_name, &image, &hold, &net_name, None, Some(port))?;
            let ip = s
                .ip_on(&net_name)
                .context("server container has no IPv4 address")?;
            server_bind = SocketAddrV4::new(ip, AGENT_PORT);
            connect_to = SocketAddrV4::new(Ipv4Addr::LOCALHOST, port);
            published = Some(connect_to);
            proxy_pid = if driver == Driver::PublishedProxy {
                Some(wait_proxy_pid(port)?)
            } else {
                None
            };
            host_used = true;
            (client, server) = (None, s);
            network = Some(net_name.clone());
        }
    }

    let cs: Vec<&ContainerNet> = client.iter().chain(std::iter::once(&server)).collect();
    let (nss, devices) = paths_of(&e, &cs, host_used)?;
    let ns_named = |name: &str| -> Result<Netns> {
        nss.iter()
            .find(|(n, _)| n.name == name)
            .map(|(n, _)| n.clone())
            .ok_or_else(|| anyhow!("namespace {name} not found"))
    };
    let host_ns = if host_used {
        Some(ns_named(&e.host_netns_name)?)
    } else {
        None
    };
    let server_ns = ns_named(&server.netns_name())?;
    let client_ns = match &client {
        Some(c) => ns_named(&c.netns_name())?,
        None if host_used => host_ns.clone().expect("host namespace"),
        None => server_ns.clone(),
    };

    Ok(DockerLab {
        driver,
        run_id: id,
        image,
        client,
        server,
        network,
        client_ns,
        server_ns,
        server_bind,
        connect_to,
        devices,
        published,
        proxy_pid,
        host_ns,
        nss,
        res: std::mem::replace(
            res,
            Resources {
                engine: res.engine.clone(),
                run_id: res.run_id.clone(),
                ctr_engine: None,
                containers: Vec::new(),
                networks: Vec::new(),
                swarm_created: false,
                macvlan: None,
                daemon: None,
                image: None,
                keep_image: true,
                done: true,
                _lock: None,
            },
        ),
    })
}

/// `docker network create` with netpath's labels.
/// A user-defined bridge network whose Linux bridge carries netpath's name (`np<id>br`), so
/// cleanup and the tests can find it.
fn create_bridge_network(res: &mut Resources, id: &str, name: &str) -> Result<()> {
    let br = ifname(id, "br")?;
    let options = HashMap::from([("com.docker.network.bridge.name".to_string(), br)]);
    create_network(res, name, "bridge", options, None, false)
}

fn create_network(
    res: &mut Resources,
    name: &str,
    driver: &str,
    options: HashMap<String, String>,
    ipam: Option<IpamConfig>,
    attachable: bool,
) -> Result<()> {
    let e = res.ctr().clone();
    let req = NetworkCreateRequest {
        name: name.to_string(),
        driver: Some(driver.to_string()),
        attachable: attachable.then_some(true),
        options: Some(options),
        ipam: ipam.map(|c| Ipam {
            driver: Some("default".into()),
            config: Some(vec![c]),
            options: None,
        }),
        labels: Some(labels(&res.run_id)),
        ..Default::default()
    };
    e.block_on(e.docker().create_network(req))
        .map_err(|err| e.err(err, &format!("creating {driver} network {name}")))?;
    res.networks.push(name.to_string());
    Ok(())
}

fn labels(run_id: &str) -> HashMap<String, String> {
    HashMap::from([
        (LABEL.to_string(), "1".to_string()),
        (LABEL_RUN.to_string(), run_id.to_string()),
    ])
}

/// Create and start a container of the agent image; `publish` maps
/// `127.0.0.1:publish` to the agent port.
/// Server and client containers (holding, the harness enters them) on `net`, and the
/// server's address there on the agent port.
fn pair_on(
    res: &mut Resources,
    [srv, cli]: [&str; 2],
    image: &str,
    net: &str,
) -> Result<(ContainerNet, ContainerNet, SocketAddrV4)> {
    let s = run(res, srv, image, &["hold"], net, None, None)?;
    let c = run(res, cli, image, &["hold"], net, None, None)?;
    let ip = s
        .ip_on(net)
        .with_context(|| format!("server container has no IPv4 address on {net}"))?;
    Ok((s, c, SocketAddrV4::new(ip, AGENT_PORT)))
}

fn run(
    res: &mut Resources,
    name: &str,
    image: &str,
    cmd: &[&str],
    network: &str,
    ip: Option<Ipv4Addr>,
    publish: Option<u16>,
) -> Result<ContainerNet> {
    let e = res.ctr().clone();
    let port_key = format!("{AGENT_PORT}/tcp");
    let endpoints = match network {
        "host" | "none" | "bridge" => None,
        n => Some(NetworkingConfig {
            endpoints_config: Some(HashMap::from([(
                n.to_string(),
                EndpointSettings {
                    ipam_config: ip.map(|ip| EndpointIpamConfig {
                        ipv4_address: Some(ip.to_string()),
                        ..Default::default()
                    }),
                    ..Default::default()
                },
            )])),
        }),
    };
    let body = ContainerCreateBody {
        image: Some(image.to_string()),
        cmd: Some(cmd.iter().map(|s| s.to_string()).collect()),
        labels: Some(labels(&res.run_id)),
        exposed_ports: publish.map(|_| HashMap::from([(port_key.clone(), HashMap::new())])),
        host_config: Some(HostConfig {
            network_mode: Some(network.to_string()),
            port_bindings: publish.map(|p| {
                HashMap::from([(
                    port_key.clone(),
                    Some(vec![PortBinding {
                        // Containment: published on loopback only.
                        host_ip: Some("127.0.0.1".into()),
                        host_port: Some(p.to_string()),
                    }]),
                )])
            }),
            ..Default::default()
        }),
        networking_config: endpoints,
        ..Default::default()
    };
    let created = e
        .block_on(e.docker().create_container(
            Some(CreateContainerOptions {
                name: Some(name.to_string()),
                ..Default::default()
            }),
            body,
        ))
        .map_err(|err| e.err(err, &format!("creating container {name}")))?;
    res.containers.push((created.id.clone(), name.to_string()));
    e.block_on(
        e.docker()
            .start_container(&created.id, None::<StartContainerOptions>),
    )
    .map_err(|err| e.err(err, &format!("starting container {name}")))?;
    let c = e
        .block_on(
            e.docker()
                .inspect_container(&created.id, None::<InspectContainerOptions>),
        )
        .map_err(|err| e.err(err, &format!("inspecting container {name}")))?;
    from_inspect(&e, &c).with_context(|| format!("resolving container {name}"))
}

fn remove_container(e: &Engine, id: &str) -> Result<()> {
    match e.block_on(e.docker().remove_container(
        id,
        Some(RemoveContainerOptions {
            force: true,
            v: true,
            ..Default::default()
        }),
    )) {
        Ok(()) => Ok(()),
        Err(err) if is_not_found(&err) => Ok(()),
        Err(err) => Err(e.err(err, &format!("removing container {id}"))),
    }
}

fn remove_network(e: &Engine, name: &str) -> Result<()> {
    // An overlay may still be detaching its last endpoint for a moment, and a swarm
    // removes a swarm-scoped network asynchronously: wait until it is really gone.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(15);
    let mut last = None;
    loop {
        match e.block_on(e.docker().remove_network(name)) {
            Ok(()) => {}
            Err(err) if is_not_found(&err) => {}
            Err(err) => last = Some(e.err(err, &format!("removing network {name}"))),
        }
        match e.block_on(e.docker().inspect_network(
            name,
            None::<bollard::query_parameters::InspectNetworkOptions>,
        )) {
            Err(err) if is_not_found(&err) => return Ok(()),
            _ => {}
        }
        if std::time::Instant::now() >= deadline {
            return Err(
                last.unwrap_or_else(|| anyhow!("network {name} still exists after removal"))
            );
        }
        std::thread::sleep(std::time::Duration::from_millis(250));
    }
}

/// Make this engine a single-node swarm manager if it is in no swarm at all (listening
/// and advertising on 127.0.0.1 only). Returns true if netpath initialised it. A swarm
/// netpath did not create is used as it is, never changed.
fn ensure_swarm(e: &Engine) -> Result<bool> {
    let (st, manager) = e.swarm_state()?;
    match st.as_str() {
        "active" if manager => Ok(false),
        "active" => bail!(
            "Swarm manager unavailable: this engine ({}) is a swarm worker; overlay networks are created on a manager",
            e.host
        ),
        "inactive" | "" => {
            let gw_existed = network_exists(e, "docker_gwbridge")?;
            let node = e
                .block_on(e.docker().init_swarm(SwarmInitRequest {
                    listen_addr: Some("127.0.0.1:2377".into()),
                    advertise_addr: Some("127.0.0.1".into()),
                    ..Default::default()
                }))
                .map_err(|err| e.err(err, "initialising a single-node swarm on 127.0.0.1"))?;
            state::write_swarm(&SwarmRecord {
                host: e.host.clone(),
                node_id: node,
                gwbridge_created: !gw_existed,
            })?;
            Ok(true)
        }
        other => bail!(
            "Swarm manager unavailable: swarm state of {} is {other:?}; fix it (`docker swarm leave` or unlock) or use another driver",
            e.host
        ),
    }
}

fn network_exists(e: &Engine, name: &str) -> Result<bool> {
    let nets = e
        .block_on(e.docker().list_networks(Some(ListNetworksOptions {
            filters: Some(HashMap::from([(
                "name".to_string(),
                vec![name.to_string()],
            )])),
        })))
        .map_err(|err| e.err(err, "listing networks"))?;
    Ok(nets.iter().any(|n| n.name.as_deref() == Some(name)))
}

/// Leave the swarm netpath created, unless another netpath overlay network (not one of
/// `removed`, which the swarm may still list for a moment) uses it.
/// Returns true if it left.
pub(crate) fn leave_swarm_if_unused(e: &Engine, removed: &[String]) -> Result<bool> {
    let Some(rec) = state::read_swarm() else {
        return Ok(false);
    };
    if rec.host != e.host {
        return Ok(false);
    }
    let nets = e
        .block_on(e.docker().list_networks(Some(ListNetworksOptions {
            filters: Some(HashMap::from([
                ("label".to_string(), vec![LABEL.to_string()]),
                ("driver".to_string(), vec!["overlay".to_string()]),
            ])),
        })))
        .map_err(|err| e.err(err, "listing networks"))?;
    if nets.iter().any(|n| {
        !removed
            .iter()
            .any(|r| n.name.as_deref() == Some(r.as_str()))
    }) {
        return Ok(false);
    }
    leave_recorded_swarm(e, &rec)
}

/// Leave the swarm of `rec` if this engine is still that node; remove docker_gwbridge
/// if the swarm brought it.
/// Returns true if it left.
pub(crate) fn leave_recorded_swarm(e: &Engine, rec: &SwarmRecord) -> Result<bool> {
    let info = e.info()?;
    let node = info.swarm.and_then(|s| s.node_id).unwrap_or_default();
    if node != rec.node_id {
        // Not the swarm netpath made (left, or re-created by someone): not ours.
        state::remove_swarm();
        return Ok(false);
    }
    e.block_on(
        e.docker()
            .leave_swarm(Some(bollard::query_parameters::LeaveSwarmOptions {
                force: true,
            })),
    )
    .map_err(|err| e.err(err, "leaving the swarm netpath initialised"))?;
    if rec.gwbridge_created {
        let _ = remove_network(e, "docker_gwbridge");
    }
    state::remove_swarm();
    Ok(true)
}

/// `np<id>mp` in the Docker host's namespace, its peer `np<id>pp` up in `np<id>-mvp`.
fn make_macvlan_parent(res: &mut Resources) -> Result<String> {
    let id = res.run_id.clone();
    let parent = ifname(&id, "mp")?;
    let peer = ifname(&id, "pp")?;
    state::write_mvp_marker(&id)?;
    let mvp = match Netns::create(&netns_name(&id, "mvp")) {
        Ok(n) => n,
        Err(e) => {
            state::remove_mvp_marker(&id);
            return Err(e);
        }
    };
    let fd = match mvp.open() {
        Ok(fd) => fd,
        Err(err) => {
            let _ = mvp.delete();
            return Err(err);
        }
    };
    let host = res.ctr().host_netns.clone();
    let r = in_netns(&host, || {
        let nl = Nl::new()?;
        let p = nl.add_veth_into(&parent, &peer, fd.as_fd(), UNDERLAY_MTU)?;
        nl.set_up(p.ifindex)
    });
    res.macvlan = Some(MacvlanParent {
        parent: parent.clone(),
        host_netns: host,
        netns: mvp.clone(),
        _fd: fd,
    });
    r.with_context(|| format!("creating the macvlan parent {parent}"))?;
    mvp.run(|| {
        let nl = Nl::new()?;
        nl.lo_up()?;
        let p = nl.require_link(&peer)?;
        nl.set_up(p.ifindex)
    })
    .with_context(|| format!("setting up {peer} in {}", mvp.name))?;
    Ok(parent)
}

fn remove_macvlan_parent(m: &MacvlanParent) -> Result<()> {
    let parent = m.parent.clone();
    in_netns(&m.host_netns, || {
        let nl = Nl::new()?;
        if let Some(l) = nl.link(&parent)? {
            nl.del_link(l.ifindex)?;
        }
        Ok(())
    })
    .with_context(|| format!("deleting the macvlan parent {}", m.parent))?;
    m.netns.delete()?;
    if let Some(id) = crate::lab::run_id_of_netns(&m.netns.name) {
        state::remove_mvp_marker(id);
    }
    Ok(())
}

/// Run `f` on a thread inside the namespace at `path`.
pub(crate) fn in_netns<T: Send>(path: &Path, f: impl FnOnce() -> Result<T> + Send) -> Result<T> {
    let fd: OwnedFd = std::fs::File::open(path)
        .with_context(|| format!("cannot open network namespace {}", path.display()))?
        .into();
    std::thread::scope(|s| {
        s.spawn(|| {
            nix::sched::setns(fd.as_fd(), nix::sched::CloneFlags::CLONE_NEWNET)
                .with_context(|| format!("setns into {}", path.display()))?;
            f()
        })
        .join()
        .map_err(|_| anyhow!("thread inside {} panicked", path.display()))?
    })
}

/// A port free on 127.0.0.1 in this process's namespace right now.
/// Namespaces with an fd held on each (the fd keeps it alive and names it as
/// `/proc/self/fd/N`).
pub(super) type HeldNamespaces = Vec<(Netns, OwnedFd)>;

/// The namespaces on the paths of `containers` (theirs and their peers', plus the Docker
/// host's when `host_used`), opened and checked against their inode so a container restarted
/// meanwhile is noticed, and every device on those paths for the tracer.
pub(super) fn paths_of(
    e: &Engine,
    containers: &[&ContainerNet],
    host_used: bool,
) -> Result<(HeldNamespaces, Vec<LabDevice>)> {
    let mut wanted: Vec<(String, PathBuf, u32)> = Vec::new();
    let mut add = |n: (String, PathBuf, u32)| {
        if !wanted.iter().any(|w| w.2 == n.2) {
            wanted.push(n);
        }
    };
    for c in containers {
        c.namespaces().into_iter().for_each(&mut add);
    }
    let host_inum = ns_inum(&e.host_netns)?;
    if host_used {
        add((e.host_netns_name.clone(), e.host_netns.clone(), host_inum));
    }
    let mut nss: Vec<(Netns, OwnedFd)> = Vec::new();
    for (name, path, inum) in wanted {
        let f = std::fs::File::open(&path)
            .with_context(|| format!("cannot open network namespace {}", path.display()))?;
        let fd: OwnedFd = f.into();
        let p = fd_path(&fd);
        let got = ns_inum(&p)?;
        if got != inum {
            bail!(
                "namespace {} changed under us ({inum} → {got})",
                path.display()
            );
        }
        nss.push((
            Netns {
                name,
                path: p,
                inum,
            },
            fd,
        ));
    }

    let mut devices: Vec<LabDevice> = Vec::new();
    let mut push = |d: LabDevice| {
        if !devices
            .iter()
            .any(|x| x.netns_inum == d.netns_inum && x.ifindex == d.ifindex)
        {
            devices.push(d);
        }
    };
    if host_used {
        for l in links_at(&e.host_netns)?
            .into_iter()
            .filter(|l| l.name == "lo")
        {
            push(LabDevice {
                name: l.name,
                netns: e.host_netns_name.clone(),
                netns_inum: host_inum,
                ifindex: l.ifindex,
                kind: DevKind::Loopback,
                mtu: l.mtu,
            });
        }
    }
    for c in containers {
        c.devices().into_iter().for_each(&mut push);
    }
    Ok((nss, devices))
}

fn free_port_here() -> Result<u16> {
    let l = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).context("finding a free port")?;
    Ok(l.local_addr()?.port())
}

/// The docker-proxy process serving `127.0.0.1:port` (Docker starts it before the
/// container start returns; give it a moment anyway).
fn wait_proxy_pid(port: u16) -> Result<u32> {
    for _ in 0..50 {
        if let Some(p) = super::inspect::proxy_processes()
            .into_iter()
            .find(|p| p.host_port == port && p.host_ip == "127.0.0.1")
        {
            return Ok(p.pid);
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    bail!(
        "no docker-proxy serving 127.0.0.1:{port} (is the daemon running with --userland-proxy=false?)"
    )
}
