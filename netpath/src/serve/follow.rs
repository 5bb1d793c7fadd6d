//! What `serve` follows and how a sampled journey becomes series: the followed containers (or
//! pods) with their devices and each device's role, the owner of a journey, its direction and
//! the kind of its other end.
use std::net::Ipv4Addr;

use bollard::query_parameters::InspectNetworkOptions;
use netpath_common::{DIR_OUT, Hop, SkbState};

use crate::docker::Engine;
use crate::path::Device;
use crate::record;
use crate::render::prom::{HopLabels, Metrics, Owner, PathLabels, Way};
use crate::runtime::select::{Unit, driver_label};
use crate::runtime::{Node, Runtime};

/// A followed container (or pod): whose it is (the `namespace`, `pod` and `container`
/// labels), who runs it, its network driver, devices (with their roles) and addresses.
pub struct Followed {
    pub owner: Owner,
    pub runtime: Runtime,
    pub ids: Vec<String>,
    pub driver: String,
    pub netns_inum: u32,
    pub devices: Vec<Device>,
    /// `devrole::*` of each of `devices`.
    pub roles: Vec<u32>,
    pub addrs: Vec<Ipv4Addr>,
}

pub fn followed(node: &mut Node, u: Unit) -> Followed {
    let net = &u.net;
    let driver = match u.runtime {
        Runtime::Docker if net.host_network => "host".to_string(),
        Runtime::Docker => node
            .engine()
            .ok()
            .and_then(|e| docker_driver(e, &net.networks.first()?.network_id))
            .unwrap_or_else(|| net.network_mode.clone()),
        _ => driver_label(net),
    };
    let devices = net.devices();
    let roles = devices.iter().map(|d| net.role(d)).collect();
    let mut addrs: Vec<Ipv4Addr> = net.networks.iter().filter_map(|n| n.ip).collect();
    for i in &net.interfaces {
        addrs.extend(i.link.addrs.iter().map(|a| a.0));
    }
    Followed {
        owner: Owner {
            namespace: u.namespace,
            pod: u.pod,
            container: u.container,
        },
        runtime: u.runtime,
        ids: u.ids,
        driver,
        netns_inum: net.netns_inum,
        devices,
        roles,
        addrs,
    }
}

/// The driver of a Docker network.
fn docker_driver(engine: &Engine, network_id: &str) -> Option<String> {
    engine
        .block_on(
            engine
                .docker()
                .inspect_network(network_id, None::<InspectNetworkOptions>),
        )
        .ok()?
        .driver
}

/// Every followed device once, with its role.
pub fn device_set(f: &[Followed]) -> Vec<(Device, u32)> {
    let all = f
        .iter()
        .flat_map(|f| f.devices.iter().cloned().zip(f.roles.iter().copied()));
    crate::probe::tracer::watched_once(all)
}

/// The container a journey belongs to: the first followed container whose namespace it
/// touched, else the owner of the first followed device it crossed.
fn owner<'a>(s: &SkbState, followed: &'a [Followed]) -> Option<&'a Followed> {
    let n = (s.npoints as usize).min(s.points.len());
    let pts = &s.points[..n];
    pts.iter()
        .find_map(|p| followed.iter().find(|f| f.netns_inum == p.netns))
        .or_else(|| {
            pts.iter().find_map(|p| {
                followed.iter().find(|f| {
                    f.devices
                        .iter()
                        .any(|d| d.netns_inum == p.netns && d.ifindex == p.ifindex)
                })
            })
        })
}

/// The node's addresses and the subnets of its bridges, to tell a journey's other end.
#[derive(Default)]
pub struct Peers {
    host: Vec<Ipv4Addr>,
    bridges: Vec<(Ipv4Addr, u8)>,
    containers: Vec<Ipv4Addr>,
}

impl Peers {
    /// Read from the host's namespace (its addresses, its bridges' subnets) and the followed
    /// containers' addresses. A namespace that cannot be read leaves those kinds unknown.
    pub fn read(followed: &[Followed]) -> Peers {
        let links = crate::runtime::host_netns()
            .and_then(|ns| crate::sys::nl::links_in(&ns))
            .unwrap_or_default();
        Peers {
            host: links
                .iter()
                .flat_map(|l| l.addrs.iter().map(|a| a.0))
                .collect(),
            bridges: links
                .iter()
                .filter(|l| l.kind == "bridge")
                .flat_map(|l| l.addrs.iter().copied())
                .collect(),
            containers: followed.iter().flat_map(|f| f.addrs.clone()).collect(),
        }
    }

    /// The kind of address `a` seen from container `f` (`prom::PEERS`).
    pub fn kind(&self, a: Ipv4Addr, f: &Followed) -> &'static str {
        let on = |(net, len): &(Ipv4Addr, u8)| {
            let mask = u32::MAX.checked_shl(32 - *len as u32).unwrap_or(0);
            u32::from(a) & mask == u32::from(*net) & mask
        };
        if a.is_unspecified() {
            "unknown"
        } else if a.is_loopback() || f.addrs.contains(&a) {
            "local"
        } else if self.host.contains(&a) {
            "host"
        } else if self.containers.contains(&a) || self.bridges.iter().any(on) {
            "container"
        } else {
            "remote"
        }
    }
}

/// One sampled journey into the metrics: its hops (consecutive segments of one hop are one
/// crossing, as the hop model merges them) and its whole one-way time, labelled with its
/// owner, direction and the kind of its other end.
pub fn observe(m: &mut Metrics, s: &SkbState, followed: &[Followed], peers: &Peers) {
    let Some(f) = owner(s, followed) else {
        return;
    };
    let ip = |a: u32| Ipv4Addr::from(u32::from_be(a));
    let (direction, other) = if s.dir as u16 == DIR_OUT {
        ("out", ip(s.daddr))
    } else {
        ("in", ip(s.saddr))
    };
    let way = Way {
        direction: direction.to_string(),
        peer: peers.kind(other, f).to_string(),
    };
    let t = record::timeline(s, &f.devices);
    let n = (s.npoints as usize).min(s.points.len());
    let pts = &s.points[..n];
    let mut crossings: Vec<(&str, u64)> = Vec::new();
    for (w, p) in pts.windows(2).zip(t.points.iter().skip(1)) {
        let ns = w[1].ts.saturating_sub(w[0].ts);
        match crossings.last_mut() {
            Some((h, d)) if *h == p.hop => *d += ns,
            _ => crossings.push((p.hop, ns)),
        }
    }
    let path = PathLabels {
        way,
        driver: f.driver.clone(),
        owner: f.owner.clone(),
    };
    for (hop, ns) in crossings {
        if hop == Hop::OneWay.name() {
            continue;
        }
        let hop = HopLabels {
            hop: hop.to_string(),
            path: path.clone(),
        };
        m.observe_hop(hop, ns);
    }
    m.observe_path(
        path,
        s.last_ts.saturating_sub(s.first_ts),
        t.rx_passes,
        t.softirq_runs,
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    fn followed(addrs: &[&str]) -> Followed {
        Followed {
            owner: Owner::default(),
            runtime: Runtime::Docker,
            ids: Vec::new(),
            driver: "bridge".into(),
            netns_inum: 1,
            devices: Vec::new(),
            roles: Vec::new(),
            addrs: addrs.iter().map(|a| a.parse().unwrap()).collect(),
        }
    }

    #[test]
    fn peer_kinds_are_bounded_and_told_apart() {
        let me = followed(&["172.18.0.2"]);
        let other = followed(&["10.0.9.7"]);
        let p = Peers {
            host: vec!["192.0.2.10".parse().unwrap(), "172.18.0.1".parse().unwrap()],
            bridges: vec![("172.18.0.1".parse().unwrap(), 16)],
            containers: vec!["172.18.0.2".parse().unwrap(), "10.0.9.7".parse().unwrap()],
        };
        let k = |a: &str| p.kind(a.parse().unwrap(), &me);
        assert_eq!(k("127.0.0.1"), "local");
        assert_eq!(k("172.18.0.2"), "local");
        assert_eq!(k("172.18.0.1"), "host");
        assert_eq!(k("192.0.2.10"), "host");
        assert_eq!(k("172.18.0.3"), "container");
        assert_eq!(p.kind("172.18.0.2".parse().unwrap(), &other), "container");
        assert_eq!(k("10.0.9.7"), "container");
        assert_eq!(k("198.51.100.4"), "remote");
        assert_eq!(k("0.0.0.0"), "unknown");
        for a in [
            "127.0.0.1",
            "172.18.0.1",
            "172.18.0.3",
            "198.51.100.4",
            "0.0.0.0",
        ] {
            assert!(crate::render::prom::PEERS.contains(&k(a)));
        }
    }
}
