//! Which paths and sizes can carry which protocol, said in one line before anything is built.

use super::icmp;
use super::proto::Proto;
use crate::driver::ProtoUnsupported;

/// Whether netpath can measure `proto` on the lab's `driver`: the refusals are the driver's
/// facts (`Driver::facts`), a field per protocol; TCP every path carries.
pub fn check(driver: crate::driver::Driver, proto: Proto) -> Result<(), ProtoUnsupported> {
    let f = driver.facts();
    let refused = match proto {
        Proto::Tcp => None,
        Proto::Udp => f.udp_refused,
        Proto::Icmp => f.icmp_refused,
    };
    match refused {
        Some(why) => Err(ProtoUnsupported {
            driver: driver.name(),
            proto: proto.name(),
            why: why.to_string(),
        }),
        None => Ok(()),
    }
}

/// Whether netpath can measure `proto` on the Docker `driver`: as on the lab, and an echo from
/// a client in the Docker host's own namespace (`host`, `host-egress`) needs that namespace to
/// open ping sockets to root already; netpath changes no setting of a namespace it did not
/// create.
pub fn check_docker(driver: crate::driver::Driver, proto: Proto) -> Result<(), ProtoUnsupported> {
    check(driver, proto)?;
    let host_namespace = driver.facts().client_on_host;
    if proto != Proto::Icmp || !host_namespace {
        return Ok(());
    }
    let range = crate::sys::netns::read_sysctl(icmp::PING_RANGE)
        .unwrap_or_else(|e| format!("unreadable: {e:#}"));
    if icmp::ping_allows_root(&range) {
        return Ok(());
    }
    Err(ProtoUnsupported {
        driver: driver.name(),
        proto: proto.name(),
        why: format!(
            "the client runs in the Docker host's own namespace, whose {} ({}) opens ping \
             sockets to no group of root's, and netpath changes no setting of a namespace it \
             did not create: allow root there (sysctl -w {}=\"0 0\") or use -d bridge",
            icmp::PING_RANGE,
            range.replace('\t', " "),
            icmp::PING_RANGE
        ),
    })
}

/// Sizes `proto` can carry: what cannot run is said in one line before anything is loaded or
/// built (and checked again by every run).
pub fn check_sizes(proto: Proto, req_size: usize, resp_size: usize) -> anyhow::Result<()> {
    if proto == Proto::Tcp {
        return Ok(());
    }
    if proto == Proto::Icmp && req_size != resp_size {
        anyhow::bail!(
            "--proto icmp: the echo reply carries the request's {req_size} bytes back, so a \
             {resp_size}-byte response cannot be asked: drop --resp-size or make it equal to \
             --req-size"
        );
    }
    if let Some(max) = proto.max_payload()
        && req_size.max(resp_size) > max
    {
        anyhow::bail!(
            "--proto {proto}: a request or response of {} bytes does not fit one datagram (at \
             most {max}): use --req-size/--resp-size up to {max}",
            req_size.max(resp_size)
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::driver::Driver;

    #[test]
    fn paths_that_cannot_carry_a_protocol_are_named() {
        for d in Driver::ALL {
            assert!(check(d, Proto::Tcp).is_ok(), "{d}");
        }
        let e = check(Driver::PublishedProxy, Proto::Udp).unwrap_err();
        assert!(e.to_string().contains("published-nat"), "{e}");
        assert!(check(Driver::PublishedNat, Proto::Udp).is_ok());
        assert!(check(Driver::PublishedNat, Proto::Icmp).is_err());
        assert!(check(Driver::Egress, Proto::Icmp).is_ok());
        // The whole table: those three refusals and no other.
        let refused = Driver::ALL
            .iter()
            .flat_map(|d| Proto::ALL.iter().map(move |p| (*d, *p)))
            .filter(|(d, p)| check(*d, *p).is_err())
            .count();
        assert_eq!(refused, 3);
        assert!(check_sizes(Proto::Udp, 65_507, 1).is_ok());
        assert!(check_sizes(Proto::Udp, 65_508, 1).is_err());
        assert!(check_sizes(Proto::Icmp, 64, 128).is_err());
        assert!(check_sizes(Proto::Tcp, 1 << 20, 1).is_ok());
        // Docker refuses what the lab refuses.
        let e = check_docker(Driver::PublishedProxy, Proto::Icmp).unwrap_err();
        assert!(e.to_string().contains("-d gateway"), "{e}");
        assert!(check_docker(Driver::Bridge, Proto::Icmp).is_ok());
        assert!(check_docker(Driver::PublishedNat, Proto::Udp).is_ok());
    }
}
