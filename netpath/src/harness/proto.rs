//! `--proto tcp|udp|icmp`: what the request/response harness sends, as the command line, the
//! records and the kernel programs (`PROTO_MODE`) name it; and `trace --proto`, which also
//! takes any IP protocol number.

crate::choice::choice! {
    /// Transport of the request/response runs.
    #[derive(Default)]
    pub enum Proto {
        /// One TCP connection, a request and a response per round trip (sockperf's TCP ping-pong).
        #[default]
        Tcp => "tcp",
        /// One datagram each way (sockperf's default mode).
        Udp => "udp",
        /// ICMP echo request and reply; the kernel answers, there is no server thread.
        Icmp => "icmp",
    }
}

impl Proto {
    /// IP protocol number (the `trace` filter).
    pub fn number(self) -> u8 {
        match self {
            Proto::Tcp => 6,
            Proto::Udp => 17,
            Proto::Icmp => 1,
        }
    }

    /// The value the kernel programs read from `PROTO_MODE`.
    pub fn kernel(self) -> u32 {
        match self {
            Proto::Tcp => netpath_common::proto::TCP,
            Proto::Udp => netpath_common::proto::UDP,
            Proto::Icmp => netpath_common::proto::ICMP,
        }
    }

    /// Largest request or response one datagram carries (IPv4: 65535 minus the IP and UDP
    /// or ICMP headers); TCP streams any size.
    pub fn max_payload(self) -> Option<usize> {
        match self {
            Proto::Tcp => None,
            Proto::Udp | Proto::Icmp => Some(65_507),
        }
    }
}

/// `trace --proto`: a protocol the harness sends, or any IP protocol number (a filter on
/// traffic netpath does not generate, with `--container`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum L4 {
    Harness(Proto),
    Number(u8),
}

impl L4 {
    /// The IP protocol number the kernel filter compares.
    pub fn number(self) -> u8 {
        match self {
            L4::Harness(p) => p.number(),
            L4::Number(n) => n,
        }
    }
}

impl std::str::FromStr for L4 {
    type Err = String;
    fn from_str(s: &str) -> Result<L4, String> {
        use clap::ValueEnum as _;
        if let Ok(p) = Proto::from_str(s, true) {
            return Ok(L4::Harness(p));
        }
        s.parse()
            .map(L4::Number)
            .map_err(|_| format!("unknown protocol {s:?}: use tcp, udp, icmp or a number"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_numbers() {
        assert_eq!("UDP".parse::<L4>(), Ok(L4::Harness(Proto::Udp)));
        assert_eq!("47".parse::<L4>().map(L4::number), Ok(47));
        assert_eq!(L4::Harness(Proto::Icmp).number(), 1);
        assert!(
            "sctp"
                .parse::<L4>()
                .unwrap_err()
                .contains("unknown protocol")
        );
        assert_ne!(Proto::Tcp.kernel(), Proto::Udp.kernel());
    }
}
