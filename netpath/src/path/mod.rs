//! [`NetPath`]: one measured path, the same type whether the lab or Docker built it.
//!
//! A path is what the harness, the tracer, `compare`, `trace` and `bench` need to know: where
//! the client and the server run (namespaces, addresses), every device on the way with its
//! kind, the relay in the middle (docker-proxy), and what keeps all of it alive and what
//! removes it ([`Keep`]). The lab's drivers (`lab/`) and Docker's (`docker/drivers/`) build
//! it; `runtime::between` builds one over containers netpath only looks at.

mod kind;
pub mod parts;
pub mod qdisc;

use std::net::{Ipv4Addr, SocketAddrV4};

use anyhow::Result;
use netpath_common::DevKind;

pub use kind::{Role, kind_of};

use crate::driver::Driver;
use crate::sys::netns::{Held, Netns};
use crate::sys::nl::Link;

/// A network device on a path, as the loader needs it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Device {
    pub name: String,
    /// Name of the netns the device is in.
    pub netns: String,
    /// Inode number of that netns.
    pub netns_inum: u32,
    pub ifindex: u32,
    pub kind: DevKind,
    pub mtu: u32,
}

impl Device {
    /// `link` in `ns`, its kind from [`kind_of`]; `None` for a link of no kind netpath
    /// follows packets through.
    pub fn of(ns: (&str, u32), link: &Link, role: Role) -> Option<Device> {
        Some(Device {
            name: link.name.clone(),
            netns: ns.0.to_string(),
            netns_inum: ns.1,
            ifindex: link.ifindex,
            kind: kind_of(link, role)?,
            mtu: link.mtu,
        })
    }
}

/// Removes what a path's builder made (the lab's namespaces and processes, a Docker driver's
/// containers and networks). Called once, after the path let go of its namespaces.
pub trait Teardown: Send + Sync {
    fn teardown(&mut self) -> Result<()>;
}

/// An owner whose path is still being built: torn down (best effort, errors logged) if it is
/// dropped before [`Building::finish`] hands it on, e.g. when a build step fails.
pub struct Building<T: Teardown + 'static>(Option<T>);

impl<T: Teardown + 'static> Building<T> {
    pub fn new(owner: T) -> Building<T> {
        Building(Some(owner))
    }

    /// The owner, for a path's [`Keep`] to tear down from now on.
    pub fn finish(mut self) -> Box<dyn Teardown> {
        Box::new(self.0.take().expect("finished once"))
    }
}

impl<T: Teardown + 'static> std::ops::Deref for Building<T> {
    type Target = T;
    fn deref(&self) -> &T {
        self.0.as_ref().expect("not finished")
    }
}

impl<T: Teardown + 'static> std::ops::DerefMut for Building<T> {
    fn deref_mut(&mut self) -> &mut T {
        self.0.as_mut().expect("not finished")
    }
}

impl<T: Teardown + 'static> Drop for Building<T> {
    fn drop(&mut self) {
        if let Some(mut o) = self.0.take()
            && let Err(e) = o.teardown()
        {
            log::warn!("{e:#}");
        }
    }
}

/// The errors of a teardown that goes on past them to remove all it can: the first counts.
#[derive(Default)]
pub struct Errors(Option<anyhow::Error>);

impl Errors {
    pub fn note(&mut self, r: Result<()>) {
        if let Err(e) = r {
            self.0.get_or_insert(e);
        }
    }

    /// Ok, or the first error, saying that the teardown of `what` is incomplete.
    pub fn result(self, what: &str) -> Result<()> {
        match self.0 {
            None => Ok(()),
            Some(e) => Err(e.context(format!("teardown of {what} incomplete"))),
        }
    }
}

/// What keeps a path's namespaces alive, and what tearing the path down removes.
#[derive(Default)]
pub struct Keep {
    /// Every namespace of the path with an fd on it: the lab's own, or Docker containers'
    /// (named `/proc/self/fd/N` through that fd), which the path only holds.
    held: Vec<Held>,
    /// What teardown removes; `None` for namespaces the path only holds (containers
    /// netpath did not start).
    owner: Option<Box<dyn Teardown>>,
}

impl Keep {
    /// Namespaces this path holds and `owner` removes on teardown.
    pub fn owned(held: Vec<Held>, owner: Box<dyn Teardown>) -> Keep {
        Keep {
            held,
            owner: Some(owner),
        }
    }

    /// Namespaces this path only holds: teardown removes nothing.
    pub fn held(held: Vec<Held>) -> Keep {
        Keep { held, owner: None }
    }

    /// From now on `owner` removes what it made when the path is torn down.
    pub(crate) fn set_owner(&mut self, owner: Box<dyn Teardown>) {
        self.owner = Some(owner);
    }

    /// Let go of the namespaces first (a held container namespace would keep its veth alive
    /// while Docker removes the container), then remove what the owner made.
    fn release(&mut self) -> Result<()> {
        self.held.clear();
        match self.owner.take() {
            Some(mut o) => o.teardown(),
            None => Ok(()),
        }
    }
}

/// One measured path: client and server, the devices between them, and what keeps them.
/// Dropping it tears it down (best effort); prefer [`NetPath::teardown`] to see errors.
pub struct NetPath {
    pub driver: Driver,
    pub run_id: String,
    pub client_ns: Netns,
    pub server_ns: Netns,
    /// Where the server listens.
    pub server_bind: SocketAddrV4,
    /// Where the client connects (differs from `server_bind` behind a port mapping).
    pub connect_to: SocketAddrV4,
    /// Every device on the path, in path order where there is one.
    pub devices: Vec<Device>,
    /// The namespace standing in for the Docker host (the lab's node; for overlay node1,
    /// the client's), or the Docker host's own when the path uses it.
    pub node_ns: Option<Netns>,
    /// The published address on the node, reachable from the node namespace like `-p` is
    /// from the Docker host.
    pub published: Option<SocketAddrV4>,
    /// The lab's private subnet, if it has one.
    pub subnet: Option<(Ipv4Addr, u8)>,
    /// Name of netpath's nft table in the node namespace (family `ip`).
    pub nft_table: Option<String>,
    /// PID of the docker-proxy relaying the published port (published-proxy).
    pub proxy_pid: Option<u32>,
    pub(crate) keep: Keep,
}

impl std::fmt::Debug for NetPath {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NetPath")
            .field("driver", &self.driver)
            .field("run_id", &self.run_id)
            .field("client_ns", &self.client_ns.name)
            .field("server_ns", &self.server_ns.name)
            .field("server_bind", &self.server_bind)
            .field("connect_to", &self.connect_to)
            .field("devices", &self.devices)
            .field("published", &self.published)
            .field("proxy_pid", &self.proxy_pid)
            .finish()
    }
}

impl NetPath {
    /// A path from `client_ns` to a server listening on `server` in `server_ns`, connected to
    /// directly, with nothing else set yet: its builder fills in the rest.
    pub fn new(
        driver: Driver,
        run_id: &str,
        client_ns: Netns,
        server_ns: Netns,
        server: SocketAddrV4,
    ) -> NetPath {
        NetPath {
            driver,
            run_id: run_id.to_string(),
            client_ns,
            server_ns,
            server_bind: server,
            connect_to: server,
            devices: Vec::new(),
            node_ns: None,
            published: None,
            subnet: None,
            nft_table: None,
            proxy_pid: None,
            keep: Keep::default(),
        }
    }

    /// Remove what the path's builder made (nothing for containers netpath only looks at).
    pub fn teardown(mut self) -> Result<()> {
        self.keep.release()
    }

    /// Every namespace of this path.
    pub fn namespaces(&self) -> Vec<Netns> {
        self.keep.held.iter().map(|h| h.ns.clone()).collect()
    }

    /// Names of every namespace of this path.
    pub fn netns_names(&self) -> Vec<String> {
        self.keep.held.iter().map(|h| h.ns.name.clone()).collect()
    }

    /// Both ends of the link between the node and another host (the egress drivers'
    /// uplink; none on other paths): where a delay between hosts goes.
    pub fn uplinks(&self) -> Vec<&Device> {
        self.devices
            .iter()
            .filter(|d| d.kind == DevKind::Uplink)
            .collect()
    }

    /// The device with this name in this namespace.
    pub fn device(&self, netns: &str, name: &str) -> Option<&Device> {
        self.devices
            .iter()
            .find(|d| d.netns == netns && d.name == name)
    }
}

impl Drop for NetPath {
    fn drop(&mut self) {
        if let Err(e) = self.keep.release() {
            log::warn!("{e:#}");
        }
    }
}
