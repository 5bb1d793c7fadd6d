//! `trace`'s pcap filter expression (`'tcp port 5432 and host 10.0.0.2'`, as tcpdump and pwru
//! take them) compiled to what the kernel side tests when it first sees a packet: one IP
//! protocol, one address on either side, one port on either side, all of them together.
//! Anything else is refused in one line saying what the kernel cannot test and what to write
//! instead. Supported, joined by `and` (`&&`), with parentheses around such a conjunction:
//! `tcp`, `udp`, `icmp`, `ip` (every packet netpath follows is IPv4), `proto N`,
//! `ip proto N|tcp|udp|icmp`, `[tcp|udp] port N`, `host A`, `net A/32`.
use std::net::Ipv4Addr;

use anyhow::{Result, bail};

use crate::harness::proto::L4;

/// What an expression asks the kernel side to test: `trace`'s `--proto`, `--host`, `--port`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Compiled {
    pub proto: Option<L4>,
    pub host: Option<Ipv4Addr>,
    pub port: Option<u16>,
}

/// What the kernel side tests, said once in every refusal.
const CAN: &str = "the kernel side tests one protocol, one address and one port (either side), \
                   joined by `and`";

fn tokens(expr: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    for c in expr.chars() {
        match c {
            '(' | ')' | '!' => {
                out.extend((!cur.is_empty()).then(|| std::mem::take(&mut cur)));
                out.push(c.to_string());
            }
            c if c.is_whitespace() => {
                out.extend((!cur.is_empty()).then(|| std::mem::take(&mut cur)));
            }
            c => cur.push(c),
        }
    }
    out.extend((!cur.is_empty()).then_some(cur));
    out
}

/// Compiles `expr`; an error is one line naming the part that cannot be tested.
pub fn compile(expr: &str) -> Result<Compiled> {
    let toks = tokens(expr);
    if toks.is_empty() {
        bail!("filter expression is empty: give one such as 'tcp port 5432 and host 10.0.0.2'");
    }
    let mut c = Compiled::default();
    let mut depth = 0i32;
    let mut i = 0;
    // Whether the next token starts a primitive (else it must be `and`).
    let mut want = true;
    while i < toks.len() {
        let t = toks[i].to_ascii_lowercase();
        match t.as_str() {
            "(" if want => depth += 1,
            ")" if !want && depth > 0 => depth -= 1,
            "and" | "&&" if !want => want = true,
            "or" | "||" => bail!(
                "filter expression: `or` cannot be tested: {CAN}; run one trace per alternative"
            ),
            "not" | "!" => bail!("filter expression: `not` cannot be tested: {CAN}"),
            _ if want => {
                i = primitive(&toks, i, &mut c)?;
                want = false;
                continue;
            }
            _ => bail!(
                "filter expression: expected `and` before {:?} (primitives are joined by `and`)",
                toks[i]
            ),
        }
        i += 1;
    }
    if want || depth != 0 {
        bail!(
            "filter expression {expr:?} is incomplete (an `and` or a parenthesis without its other side)"
        );
    }
    Ok(c)
}

fn set<T: PartialEq + Copy + std::fmt::Display>(
    slot: &mut Option<T>,
    v: T,
    what: &str,
) -> Result<()> {
    match *slot {
        Some(old) if old != v => {
            bail!("filter expression: two {what} ({old} and {v}): {CAN}")
        }
        _ => {
            *slot = Some(v);
            Ok(())
        }
    }
}

/// A protocol by name or number; the harness's own (6, 17, 1) by either, so `proto 6` on a
/// lab sends TCP as `tcp` does.
fn proto_of(name: &str) -> Option<L4> {
    use crate::harness::Proto;
    let n = match name.trim_start_matches('\\') {
        "tcp" => 6,
        "udp" => 17,
        "icmp" => 1,
        n => n.parse::<u8>().ok()?,
    };
    Some(match n {
        6 => L4::Harness(Proto::Tcp),
        17 => L4::Harness(Proto::Udp),
        1 => L4::Harness(Proto::Icmp),
        n => L4::Number(n),
    })
}

fn set_proto(c: &mut Compiled, p: L4) -> Result<()> {
    match c.proto {
        Some(old) if old != p => bail!(
            "filter expression: two protocols ({} and {}): {CAN}",
            old.number(),
            p.number()
        ),
        _ => {
            c.proto = Some(p);
            Ok(())
        }
    }
}

/// Reads the primitive at `toks[i]` into `c`; returns the index after it.
fn primitive(toks: &[String], i: usize, c: &mut Compiled) -> Result<usize> {
    let lower = |k: usize| toks.get(k).map(|t| t.to_ascii_lowercase());
    let arg = |k: usize, what: &str| {
        toks.get(k)
            .cloned()
            .ok_or_else(|| anyhow::anyhow!("filter expression: `{what}` needs a value"))
    };
    let t = lower(i).expect("called on a token");
    match t.as_str() {
        "tcp" | "udp" | "icmp" => {
            set_proto(c, proto_of(&t).expect("a name"))?;
            // `tcp port N` is `tcp and port N`.
            if lower(i + 1).as_deref() == Some("port") {
                return primitive(toks, i + 1, c);
            }
            Ok(i + 1)
        }
        "ip" if lower(i + 1).as_deref() == Some("proto") => primitive(toks, i + 1, c),
        "ip" => Ok(i + 1),
        "proto" => {
            let v = arg(i + 1, "proto")?;
            let p = proto_of(&v.to_ascii_lowercase()).ok_or_else(|| {
                anyhow::anyhow!(
                    "filter expression: `proto {v}`: give tcp, udp, icmp or a number 0-255"
                )
            })?;
            set_proto(c, p)?;
            Ok(i + 2)
        }
        "port" => {
            let v = arg(i + 1, "port")?;
            let p: u16 = v.parse().map_err(|_| {
                anyhow::anyhow!("filter expression: `port {v}`: a port is a number 0-65535 (service names are not looked up)")
            })?;
            set(&mut c.port, p, "ports")?;
            Ok(i + 2)
        }
        "host" => {
            let v = arg(i + 1, "host")?;
            set(&mut c.host, address(&v)?, "addresses")?;
            Ok(i + 2)
        }
        "net" => {
            let v = arg(i + 1, "net")?;
            match v.split_once('/') {
                Some((a, "32")) => set(&mut c.host, address(a)?, "addresses")?,
                _ => bail!(
                    "filter expression: `net {v}`: only a single address (/32) can be tested: {CAN}"
                ),
            }
            Ok(i + 2)
        }
        "src" | "dst" => bail!(
            "filter expression: `{t}` cannot be tested: the kernel side matches an address or a \
             port on either side of the packet; drop `{t}` (`host A`, `port N`)"
        ),
        "ip6" | "icmp6" | "arp" | "rarp" | "ether" | "vlan" | "mpls" => {
            bail!("filter expression: `{t}`: netpath follows IPv4 packets only; {CAN}")
        }
        "portrange" | "less" | "greater" | "len" | "gateway" | "broadcast" | "multicast"
        | "inbound" | "outbound" | "sctp" => {
            bail!("filter expression: `{t}` cannot be tested: {CAN}")
        }
        _ if t.contains('[') => {
            bail!("filter expression: byte offsets ({t}) cannot be tested: {CAN}")
        }
        _ => bail!(
            "filter expression: unknown primitive {:?}: {CAN} (tcp, udp, icmp, proto N, port N, host A)",
            toks[i]
        ),
    }
}

fn address(v: &str) -> Result<Ipv4Addr> {
    v.parse().map_err(|_| {
        anyhow::anyhow!(
            "filter expression: `host {v}`: give an IPv4 address (names are not resolved)"
        )
    })
}

#[cfg(test)]
mod tests;
