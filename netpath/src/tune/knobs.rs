//! The knobs `netpath tune` turns: what each is, which values it takes, which drivers it
//! applies to, and (for the harness's own settings) how a side's options change. Knobs on
//! the lab's devices are applied, read back and restored in `devices.rs`.
//!
//! Every knob acts on netpath's own namespaces, devices and sockets only. A knob that would
//! need a host-wide change (a sysctl outside netpath's namespaces) is known by name and
//! refused with one line saying why, before anything is built.

use anyhow::{Result, bail};
use serde::Serialize;

use crate::driver::Driver;
use crate::harness::{Cpus, Proto, WaitMode};
use crate::measure::compare::CompareOptions;

/// Declares `Knob` and `KNOBS` from one row a knob, so a knob's name is written once: serde
/// and the JSON schema write it, `--knob` parses it (`KNOBS`), `Knob::name` returns it.
macro_rules! knobs {
    ($($(#[$doc:meta])* $v:ident $name:literal, $values:literal, $pair:literal;)*) => {
        /// A knob of `tune`.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, schemars::JsonSchema)]
        pub enum Knob {
            $($(#[$doc])* #[serde(rename = $name)] $v,)*
        }

        /// Every knob's name, its values and its default pair, for `--help` and error lines.
        pub const KNOBS: &[(Knob, &str, &str, &str)] = &[$((Knob::$v, $name, $values, $pair)),*];
    };
}

// One row a knob: the variant, its name, the values it takes, its default pair (A,B).
knobs! {
    /// RPS mask on the rx queues of the devices that receive into the client's and the
    /// server's namespaces.
    Rps "rps", "HEX mask, all or off", "all,off";
    /// GRO on every veth of the path (which also gives veth NAPI).
    Gro "gro", "on or off", "on,off";
    /// TSO on every veth of the path.
    Tso "tso", "on or off", "off,on";
    /// GSO on every veth of the path.
    Gso "gso", "on or off", "off,on";
    /// MTU of every link of the path.
    Mtu "mtu", "68 to 65535", "9000,1500";
    /// Root (egress) qdisc of every link of the path.
    Qdisc "qdisc", "noqueue, pfifo_fast, pfifo, fq or fq_codel", "pfifo_fast,noqueue";
    /// notrack rules for the path's traffic in netpath's own nft table.
    Conntrack "conntrack", "notrack or track", "notrack,track";
    /// The published port through docker-proxy (published-proxy) or through DNAT
    /// (published-nat, `--userland-proxy=false`).
    Proxy "proxy", "on (docker-proxy) or off (DNAT)", "on,off";
    /// TCP_NODELAY on the client, with requests written in two parts.
    Nodelay "nodelay", "on or off", "off,on";
    /// The harness's wait mode.
    Wait "wait", "block, spin or busy-poll", "block,spin";
    /// The harness's CPU placement.
    Cpus "cpus", "same, split, auto, N or N,M", "same,split";
    /// How CPUs may idle while both sides run blocking: deep (as the machine lets them) or
    /// poll (kept awake, CPU latency QoS 0 µs).
    Idle "idle", "deep or poll", "deep,poll";
}

/// Knobs that would change the host, not netpath's namespaces: refused by name.
const HOST_WIDE: &[(&str, &str)] = &[
    (
        "rfs",
        "RFS needs net.core.rps_sock_flow_entries, a sysctl of the whole host, not of a namespace",
    ),
    (
        "busy-poll",
        "net.core.busy_poll is a sysctl of the whole host; --wait busy-poll sets SO_BUSY_POLL on netpath's own sockets instead (try --knob wait=busy-poll,spin)",
    ),
    (
        "default-qdisc",
        "net.core.default_qdisc is a sysctl of the whole host; --knob qdisc sets the qdisc of the lab's own links instead",
    ),
];

/// One setting of a knob, parsed and checked.
#[derive(Clone, Debug, PartialEq, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "kebab-case", tag = "kind", content = "value")]
pub enum Value {
    Flag(bool),
    /// RPS CPU mask (0: off).
    Mask(u64),
    Mtu(u32),
    Qdisc(String),
    Wait(WaitMode),
    Cpus(Cpus),
    Idle(crate::sys::pmqos::Idle),
}

/// `--knob NAME[=A,B]`: the knob and its two settings, A first (the one tried) and B (the
/// one it is held against).
#[derive(Clone, Debug, Serialize, schemars::JsonSchema)]
pub struct KnobSpec {
    pub knob: Knob,
    pub name: &'static str,
    pub a: Value,
    pub b: Value,
    /// How each setting reads in labels and verdicts (`gro=on`).
    pub a_label: String,
    pub b_label: String,
}

impl Knob {
    pub fn name(self) -> &'static str {
        KNOBS
            .iter()
            .find(|k| k.0 == self)
            .map(|k| k.1)
            .unwrap_or("?")
    }

    /// Whether the knob changes the lab (applied to the built path) rather than the harness.
    pub fn on_lab(self) -> bool {
        matches!(
            self,
            Knob::Rps
                | Knob::Gro
                | Knob::Tso
                | Knob::Gso
                | Knob::Mtu
                | Knob::Qdisc
                | Knob::Conntrack
        )
    }
}

/// Parses `NAME[=A,B]` (`A/B` too, for placements that hold a comma: `cpus=0,1/same`).
pub fn parse(arg: &str) -> Result<KnobSpec> {
    let (name, values) = match arg.split_once('=') {
        Some((n, v)) => (n.trim(), Some(v.trim())),
        None => (arg.trim(), None),
    };
    let name_norm = name.replace('_', "-");
    if let Some((_, why)) = HOST_WIDE.iter().find(|(n, _)| *n == name_norm) {
        bail!(
            "--knob {name} is refused: {why}; netpath changes only its own namespaces, devices and sockets"
        );
    }
    let Some(&(knob, kname, accepts, default)) = KNOBS
        .iter()
        .find(|k| k.1 == name || k.1.replace('_', "-") == name_norm)
    else {
        let names: Vec<&str> = KNOBS.iter().map(|k| k.1).collect();
        bail!("unknown knob {name:?}: use one of {}", names.join(", "));
    };
    let values = values.unwrap_or(default);
    let (a, b) = if let Some(ab) = values.split_once('/') {
        ab
    } else if knob == Knob::Cpus && values.matches(',').count() != 1 {
        bail!(
            "--knob cpus={values}: write the two settings as A/B when one holds a comma (cpus=0,1/same)"
        );
    } else {
        values.split_once(',').ok_or_else(|| {
            anyhow::anyhow!(
                "--knob {kname}={values}: give two settings, A,B (e.g. {kname}={default})"
            )
        })?
    };
    let bad = |v: &str, e: String| {
        anyhow::anyhow!("--knob {kname}: bad setting {v:?} ({e}): {kname} takes {accepts}")
    };
    let pa = value(knob, a.trim()).map_err(|e| bad(a, e))?;
    let pb = value(knob, b.trim()).map_err(|e| bad(b, e))?;
    if pa == pb {
        bail!("--knob {kname}={values}: both settings are the same; give two different ones");
    }
    Ok(KnobSpec {
        knob,
        name: kname,
        a_label: format!("{kname}={}", a.trim()),
        b_label: format!("{kname}={}", b.trim()),
        a: pa,
        b: pb,
    })
}

fn flag(v: &str) -> std::result::Result<bool, String> {
    match v {
        "on" | "1" | "true" | "yes" => Ok(true),
        "off" | "0" | "false" | "no" => Ok(false),
        _ => Err("not on or off".into()),
    }
}

fn value(knob: Knob, v: &str) -> std::result::Result<Value, String> {
    match knob {
        Knob::Gro | Knob::Tso | Knob::Gso | Knob::Nodelay | Knob::Proxy => flag(v).map(Value::Flag),
        Knob::Conntrack => match v {
            "notrack" | "off" => Ok(Value::Flag(false)),
            "track" | "on" | "default" => Ok(Value::Flag(true)),
            _ => Err("not notrack or track".into()),
        },
        Knob::Rps => rps_mask(v).map(Value::Mask),
        Knob::Mtu => match v.parse::<u32>() {
            Ok(m) if (68..=65535).contains(&m) => Ok(Value::Mtu(m)),
            _ => Err("not a number from 68 to 65535".into()),
        },
        Knob::Qdisc => match v {
            "noqueue" | "pfifo_fast" | "pfifo" | "fq" | "fq_codel" => {
                Ok(Value::Qdisc(v.to_string()))
            }
            _ => Err("not a qdisc netpath sets".into()),
        },
        Knob::Wait => match v {
            "block" => Ok(Value::Wait(WaitMode::Block)),
            "spin" => Ok(Value::Wait(WaitMode::Spin)),
            "busy-poll" => Ok(Value::Wait(WaitMode::BusyPoll)),
            _ => Err("not a wait mode".into()),
        },
        Knob::Cpus => {
            let c: Cpus = v.parse()?;
            c.resolve().map_err(|e| format!("{e:#}"))?;
            Ok(Value::Cpus(c))
        }
        Knob::Idle => match v {
            "deep" => Ok(Value::Idle(crate::sys::pmqos::Idle::Deep)),
            "poll" => Ok(Value::Idle(crate::sys::pmqos::Idle::Poll)),
            _ => Err("not deep or poll".into()),
        },
    }
}

/// `all` (every CPU this process may use), `off` (0) or a hex mask of CPUs that exist here.
fn rps_mask(v: &str) -> std::result::Result<u64, String> {
    let allowed = crate::sys::runmode::allowed_cpus().map_err(|e| format!("{e:#}"))?;
    let all: u64 = allowed
        .iter()
        .filter(|&&c| c < 64)
        .fold(0, |m, &c| m | (1 << c));
    let m = match v {
        "all" => all,
        "off" | "0" => 0,
        _ => u64::from_str_radix(v.trim_start_matches("0x"), 16)
            .map_err(|_| "not a hex CPU mask".to_string())?,
    };
    if m & !all != 0 {
        return Err(format!(
            "it names CPUs this process may not use (mask {all:x})"
        ));
    }
    Ok(m)
}

/// Whether `knob` applies to `driver`'s lab: one line saying why not, before anything is
/// built.
pub fn check_driver(spec: &KnobSpec, driver: Driver) -> Result<()> {
    let k = spec.name;
    let f = driver.facts();
    let why = match spec.knob {
        Knob::Rps | Knob::Gro | Knob::Tso | Knob::Gso | Knob::Mtu | Knob::Qdisc
            if f.loopback_only =>
        {
            Some(format!(
                "{driver} runs over loopback alone; {k} applies to the lab's links (try -d bridge)"
            ))
        }
        Knob::Gro | Knob::Tso | Knob::Gso => f
            .offloads_refused
            .map(|w| format!("{w}; {k} applies to veth pairs (try -d bridge)")),
        Knob::Mtu => f.mtu_refused.map(str::to_string),
        Knob::Conntrack if !f.conntrack_knob => Some(format!(
            "on {driver} the path's packets either pass no conntrack of netpath's (bridged, no br_netfilter) or need it for NAT; conntrack applies to gateway and host-egress"
        )),
        Knob::Proxy if !f.published => Some(
            "proxy compares published-proxy with published-nat: use -d published-proxy".to_string(),
        ),
        _ => None,
    };
    match why {
        Some(w) => bail!("--knob {k} does not apply to -d {driver}: {w}"),
        None => Ok(()),
    }
}

/// Whether both sides' paths carry `proto` the way netpath measures it, and the knob means
/// something for it: one line before anything is built.
pub fn check_proto(spec: &KnobSpec, driver: Driver, proto: Proto) -> Result<()> {
    if proto != Proto::Tcp && spec.knob == Knob::Nodelay {
        bail!(
            "--knob nodelay sets TCP_NODELAY, which --proto {proto} does not have: use --proto tcp"
        );
    }
    for v in [&spec.a, &spec.b] {
        crate::harness::supported::check(side_driver(spec, driver, v), proto)?;
    }
    Ok(())
}

/// What the kernel must have for the knob's settings, checked before anything is built: a
/// qdisc kind this kernel lacks is one line.
pub fn check_kernel(spec: &KnobSpec) -> Result<()> {
    for v in [&spec.a, &spec.b] {
        if let Value::Qdisc(q) = v
            && q != "noqueue"
            && let Err(e) = crate::lab::netem::try_qdisc(q, None)
        {
            if e.downcast_ref::<crate::sys::nl::UnknownQdisc>().is_some() {
                let release =
                    std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
                bail!(
                    "--knob qdisc: this kernel ({}) has no {q} qdisc (CONFIG_NET_SCH_{}): pick another, e.g. qdisc=pfifo_fast,noqueue",
                    release.trim(),
                    q.to_uppercase()
                );
            }
            return Err(e);
        }
    }
    Ok(())
}

/// The driver whose lab a side measures: the knob's driver, except `proxy`, whose two
/// settings are two drivers.
pub fn side_driver(spec: &KnobSpec, driver: Driver, v: &Value) -> Driver {
    match (spec.knob, v) {
        (Knob::Proxy, Value::Flag(true)) => Driver::PublishedProxy,
        (Knob::Proxy, Value::Flag(false)) => Driver::PublishedNat,
        _ => driver,
    }
}

/// One side's options: the run's, with a harness knob's setting.
pub fn side_options(spec: &KnobSpec, base: &CompareOptions, v: &Value) -> Result<CompareOptions> {
    let mut o = base.clone();
    o.mode.also_block = false;
    match (spec.knob, v) {
        (Knob::Nodelay, Value::Flag(on)) => {
            o.rr.nodelay = *on;
            o.rr.split_request = true;
        }
        (Knob::Wait, Value::Wait(w)) => o.mode.wait = *w,
        (Knob::Cpus, Value::Cpus(c)) => {
            o.mode.cpus = *c;
            o.mode.pin = c.resolve()?;
        }
        // Spinning receivers never let a CPU idle: the knob is about blocked ones waking.
        (Knob::Idle, Value::Idle(i)) => {
            o.mode.idle = *i;
            if o.mode.wait == WaitMode::Spin {
                o.mode.wait = WaitMode::Block;
            }
        }
        _ => {}
    }
    Ok(o)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn knobs_parse_with_defaults_and_pairs() {
        let k = parse("gro").unwrap();
        assert_eq!(
            (k.knob, &k.a, &k.b),
            (Knob::Gro, &Value::Flag(true), &Value::Flag(false))
        );
        assert_eq!(
            (k.a_label.as_str(), k.b_label.as_str()),
            ("gro=on", "gro=off")
        );
        let k = parse("mtu=1450,9000").unwrap();
        assert_eq!((k.a, k.b), (Value::Mtu(1450), Value::Mtu(9000)));
        let k = parse("cpus=0,1/same").unwrap();
        assert_eq!(k.a, Value::Cpus(Cpus::Pair(0, 1)));
        assert_eq!(parse("rps=all,off").unwrap().b, Value::Mask(0));
        assert_eq!(parse("qdisc").unwrap().a, Value::Qdisc("pfifo_fast".into()));
    }

    #[test]
    fn bad_knobs_are_one_line_each() {
        let e = |s: &str| format!("{:#}", parse(s).unwrap_err());
        // (knob, what its error says)
        let cases = [
            ("turbo", "unknown knob \"turbo\": use one of rps, gro"),
            ("mtu=12,1500", "68 to 65535"),
            ("gro=on,on", "both settings are the same"),
            ("gro=on", "give two settings"),
            ("rfs", "refused"),
            ("rfs", "whole host"),
            ("qdisc=htb,fq", "noqueue, pfifo_fast, pfifo, fq or fq_codel"),
            ("cpus=7000,same", "7000"),
            ("rps=ffffffff,0", "may not use"),
        ];
        for (knob, says) in cases {
            let err = e(knob);
            assert!(err.contains(says), "{knob}: want {says:?} in {err:?}");
        }
        for s in ["turbo", "mtu=12,1500", "rfs"] {
            assert!(!e(s).contains('\n'));
        }
    }

    #[test]
    fn knobs_that_do_not_fit_the_driver_are_refused() {
        let e = |k: &str, d| format!("{:#}", check_driver(&parse(k).unwrap(), d).unwrap_err());
        assert!(e("rps", Driver::Host).contains("loopback"));
        assert!(e("mtu", Driver::Overlay).contains("VXLAN"));
        assert!(e("proxy", Driver::Bridge).contains("published-proxy"));
        assert!(check_driver(&parse("gro").unwrap(), Driver::Bridge).is_ok());
        assert!(check_driver(&parse("wait").unwrap(), Driver::Host).is_ok());
    }
}
