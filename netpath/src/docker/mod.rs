//! Real Docker: the same data paths as the netns lab, built by a Docker engine.
//!
//! [`Engine`] talks to the daemon; [`image::ensure_agent_image`] builds the
//! `netpath-agent:<version>` image `FROM scratch` from the running netpath binary and its
//! shared libraries (no registry), whose containers run [`agent::agent_main`] (`serve`,
//! `hold`); [`DockerLab`] (`drivers/`, one file per [`Driver`](crate::driver::Driver) like
//! `lab/`; `resources` holds what it made, `swarm` the overlay's swarm) builds the
//! [`NetPath`](crate::path::NetPath) between client and server containers on a real Docker
//! network. [`ContainerNet`] (`container.rs`) is a container's network side, read from the
//! engine's inspect answer and the namespaces: the lab's own containers' here, those netpath
//! did not start by `runtime/` (`runtime::resolve_container`, `runtime::between`);
//! [`cleanup_docker`] removes everything netpath made in Docker.
//!
//! Everything netpath creates carries the label `netpath` and a name starting with
//! `np<runid>-`. Published ports bind 127.0.0.1 only, a swarm netpath initialises
//! advertises and listens on 127.0.0.1, and no traffic leaves the machine.

pub mod agent;
mod cleanup;
mod container;
mod daemon;
mod drivers;
mod engine;
mod hostveth;
pub mod image;
mod published;
mod resources;
mod state;
mod swarm;

pub use agent::agent_main;
pub use cleanup::{cleanup_docker, cleanup_docker_host};
pub use container::{
    ContainerNet, Interface, NetAttachment, PeerLink, PortMapping, addressing_from_json,
    set_host_proc,
};
pub(crate) use container::{from_inspect, hold_paths_in, interfaces_with, proc_root};
pub use daemon::SecondDaemon;
pub use drivers::{DockerLab, DockerLabOptions};
pub use engine::Engine;
pub use published::{PublishedLeg, published_leg};

/// Label on every container, network and image netpath creates (value `1`).
pub const LABEL: &str = "netpath";
/// Label on an agent image that cleanup must leave alone (`--keep-image`).
pub const LABEL_KEEP: &str = "netpath.keep";
/// Label carrying the run id of a container or network.
pub const LABEL_RUN: &str = "netpath.run";
/// Port the harness server listens on inside the server container (and the port `-p`
/// publishes).
pub const AGENT_PORT: u16 = crate::lab::LAB_PORT;
/// Where netpath keeps what it must remember across runs (swarm it created, second
/// daemons it started).
pub const STATE_DIR: &str = "/run/netpath";
