//! Knobs on the lab's own devices: applied to a built path, read back from the kernel to
//! prove they took effect, and restored to what was read before (also what teardown does:
//! every device here lives in a namespace netpath created, so Ctrl-C's teardown of the lab
//! takes any setting with it; nothing outside those namespaces is ever touched).

use anyhow::{Context, Result, bail};
use netpath_common::DevKind;
use serde::Serialize;

use super::ethtool::{self, Offload};
use super::knobs::{Knob, KnobSpec, Value};
use super::readback::ReadBack;
use crate::path::{Device, NetPath};
use crate::sys::netns::Netns;
use crate::sys::nl::{self, Nl};

/// What applying a knob changed: the values before (for restore) and after.
#[derive(Clone, Debug, Default, Serialize, schemars::JsonSchema)]
pub struct Applied {
    pub before: Vec<ReadBack>,
    pub after: Vec<ReadBack>,
    /// Devices set, in the order they were set (restore goes backwards).
    #[serde(skip)]
    done: Vec<(Device, Value)>,
    /// conntrack: the notrack chains were added.
    #[serde(skip)]
    notrack: bool,
}

fn ns_of(path: &NetPath, d: &Device) -> Result<Netns> {
    path.namespaces()
        .into_iter()
        .find(|n| n.name == d.netns)
        .with_context(|| format!("netns {} of {} is not part of this path", d.netns, d.name))
}

/// The devices a lab knob acts on, in the order to set them.
pub fn targets(path: &NetPath, spec: &KnobSpec, v: &Value) -> Result<Vec<Device>> {
    let not_lo = |d: &&Device| d.kind != DevKind::Loopback;
    let mut devs: Vec<Device> = match spec.knob {
        // The devices that receive into the two sockets' namespaces.
        Knob::Rps => path
            .devices
            .iter()
            .filter(not_lo)
            .filter(|d| d.netns == path.client_ns.name || d.netns == path.server_ns.name)
            .cloned()
            .collect(),
        Knob::Gro | Knob::Tso | Knob::Gso => veths(path)?,
        Knob::Mtu | Knob::Qdisc => path.devices.iter().filter(not_lo).cloned().collect(),
        _ => Vec::new(),
    };
    if spec.knob == Knob::Mtu {
        // Lower devices (a bridge, a parent, the wire) first when raising, last when lowering,
        // so no child is ever larger than what carries it.
        let lower = |d: &Device| {
            !matches!(
                d.kind,
                DevKind::Bridge | DevKind::MacvlanParent | DevKind::Underlay | DevKind::Uplink
            )
        };
        devs.sort_by_key(|d| lower(d));
        if let Value::Mtu(m) = v
            && devs.iter().any(|d| *m < d.mtu)
        {
            devs.reverse();
        }
    }
    if devs.is_empty() {
        bail!(
            "--knob {}: the {} lab has no device it applies to",
            spec.name,
            path.driver
        );
    }
    Ok(devs)
}

/// The path's devices that are veth ends (netlink's kind, whatever role the path gives them).
fn veths(path: &NetPath) -> Result<Vec<Device>> {
    let mut out = Vec::new();
    for ns in path.namespaces() {
        let links = nl::links_in(&ns)?;
        out.extend(
            path.devices
                .iter()
                .filter(|d| d.netns == ns.name)
                .filter(|d| {
                    links
                        .iter()
                        .any(|l| l.ifindex == d.ifindex && l.kind == "veth")
                })
                .cloned(),
        );
    }
    Ok(out)
}

/// Reads the knob's setting of `d` (on a thread inside its namespace).
pub fn read(path: &NetPath, knob: Knob, d: &Device) -> Result<Vec<ReadBack>> {
    let ns = ns_of(path, d)?;
    let rb = |what: String, value: String| ReadBack {
        netns: d.netns.clone(),
        device: d.name.clone(),
        what,
        value,
    };
    let name = d.name.clone();
    let ifindex = d.ifindex;
    ns.run(move || -> Result<Vec<ReadBack>> {
        Ok(match knob {
            Knob::Rps => {
                crate::harness::context::private_sysfs()?;
                let (_, masks) = crate::harness::context::read_dev(&name)?;
                masks
                    .into_iter()
                    .enumerate()
                    .map(|(i, m)| rb(format!("rps_cpus rx-{i}"), m))
                    .collect()
            }
            Knob::Gro | Knob::Tso | Knob::Gso => {
                let f = offload(knob);
                let on = ethtool::get(&name, f)?;
                vec![rb(f.feature().into(), if on { "on" } else { "off" }.into())]
            }
            Knob::Mtu => {
                let l = Nl::new()?.require_link(&name)?;
                vec![rb("mtu".into(), l.mtu.to_string())]
            }
            Knob::Qdisc => {
                let q = Nl::new()?
                    .root_qdisc(ifindex)?
                    .unwrap_or_else(|| "none".into());
                vec![rb("root qdisc".into(), q)]
            }
            _ => Vec::new(),
        })
    })
    .with_context(|| format!("reading {} of {} in {}", knob.name(), d.name, d.netns))
}

fn offload(k: Knob) -> Offload {
    match k {
        Knob::Tso => Offload::Tso,
        Knob::Gso => Offload::Gso,
        _ => Offload::Gro,
    }
}

/// Sets `v` on `d` (on a thread inside its namespace).
fn set(path: &NetPath, knob: Knob, d: &Device, v: &Value) -> Result<()> {
    let ns = ns_of(path, d)?;
    let name = d.name.clone();
    let ifindex = d.ifindex;
    let v = v.clone();
    ns.run(move || -> Result<()> {
        match (knob, &v) {
            (Knob::Rps, Value::Mask(m)) => write_rps(&name, *m),
            (Knob::Gro | Knob::Tso | Knob::Gso, Value::Flag(on)) => {
                ethtool::set(&name, offload(knob), *on)
            }
            (Knob::Mtu, Value::Mtu(m)) => Nl::new()?.set_mtu(ifindex, *m),
            (Knob::Qdisc, Value::Qdisc(q)) if q == "noqueue" || q == "none" => {
                Nl::new()?.del_root_qdisc(ifindex)
            }
            (Knob::Qdisc, Value::Qdisc(q)) => Nl::new()?.replace_root_qdisc(ifindex, q),
            _ => bail!("{} cannot take {v:?}", knob.name()),
        }
    })
    .with_context(|| format!("setting {} on {} in {}", knob.name(), d.name, d.netns))
}

/// Every rx queue's `rps_cpus` of `dev`, through a writable sysfs of this namespace.
fn write_rps(dev: &str, mask: u64) -> Result<()> {
    crate::harness::context::private_sysfs()?;
    let qdir = std::path::Path::new("/sys/class/net")
        .join(dev)
        .join("queues");
    let mut n = 0;
    for e in std::fs::read_dir(&qdir).with_context(|| format!("listing {}", qdir.display()))? {
        let e = e?;
        if !e.file_name().to_string_lossy().starts_with("rx-") {
            continue;
        }
        let p = e.path().join("rps_cpus");
        std::fs::write(&p, format!("{mask:x}"))
            .with_context(|| format!("writing {mask:x} to {}", p.display()))?;
        n += 1;
    }
    if n == 0 {
        bail!("{dev} has no rx queue with rps_cpus (a kernel without CONFIG_RPS?)");
    }
    Ok(())
}

/// The value a read-back should show once `v` is set.
fn expected(v: &Value) -> String {
    match v {
        Value::Flag(b) => if *b { "on" } else { "off" }.into(),
        Value::Mask(m) => format!("{m:x}"),
        Value::Mtu(m) => m.to_string(),
        Value::Qdisc(q) => q.clone(),
        Value::Wait(w) => w.name().into(),
        Value::Cpus(c) => c.to_string(),
        Value::Idle(i) => i.name().into(),
    }
}

/// Whether a read-back shows `want` (RPS masks compare as numbers: the kernel pads them).
fn shows(r: &ReadBack, want: &str) -> bool {
    if r.what.starts_with("rps_cpus") {
        let n = |s: &str| u64::from_str_radix(&s.replace(',', ""), 16).ok();
        return n(&r.value).is_some() && n(&r.value) == n(want);
    }
    r.value == want
}

/// The value a device had before, as a setting to restore.
fn before_value(knob: Knob, r: &[ReadBack]) -> Option<Value> {
    let v = &r.first()?.value;
    Some(match knob {
        Knob::Rps => Value::Mask(u64::from_str_radix(&v.replace(',', ""), 16).ok()?),
        Knob::Gro | Knob::Tso | Knob::Gso => Value::Flag(v == "on"),
        Knob::Mtu => Value::Mtu(v.parse().ok()?),
        Knob::Qdisc => Value::Qdisc(v.clone()),
        _ => return None,
    })
}

/// Applies `v` of a lab knob to every device it acts on, reads each back (an error when the
/// kernel shows something else) and keeps what was there for [`restore`]. On an error what
/// was already set is restored before returning.
pub fn apply(path: &mut NetPath, spec: &KnobSpec, v: &Value) -> Result<Applied> {
    if let (Knob::Conntrack, Value::Flag(track)) = (spec.knob, v) {
        let (before, after, notrack) = super::conntrack::apply(path, *track)?;
        return Ok(Applied {
            before,
            after,
            done: Vec::new(),
            notrack,
        });
    }
    let mut ap = Applied::default();
    let r = apply_into(path, spec, v, &mut ap);
    if let Err(e) = r {
        let _ = restore(path, spec.knob, &mut ap);
        return Err(e);
    }
    Ok(ap)
}

fn apply_into(path: &mut NetPath, spec: &KnobSpec, v: &Value, ap: &mut Applied) -> Result<()> {
    let want = expected(v);
    for d in targets(path, spec, v)? {
        let before = read(path, spec.knob, &d)?;
        let old = before_value(spec.knob, &before)
            .with_context(|| format!("{} of {} could not be read", spec.name, d.name))?;
        ap.before.extend(before);
        set(path, spec.knob, &d, v)?;
        ap.done.push((d.clone(), old));
        let after = read(path, spec.knob, &d)?;
        if let Some(r) = after.iter().find(|r| !shows(r, &want)) {
            bail!(
                "set {} to {want}, but the kernel shows {}",
                spec.name,
                r.line()
            );
        }
        ap.after.extend(after);
        if let Value::Mtu(m) = v
            && let Some(x) = path
                .devices
                .iter_mut()
                .find(|x| x.ifindex == d.ifindex && x.netns == d.netns)
        {
            // The run context reads the path's MTUs.
            x.mtu = *m;
        }
    }
    Ok(())
}

/// Puts back what [`apply`] found, last device first, and reads it back.
pub fn restore(path: &mut NetPath, knob: Knob, ap: &mut Applied) -> Result<Vec<ReadBack>> {
    if knob == Knob::Conntrack {
        let added = std::mem::take(&mut ap.notrack);
        return super::conntrack::restore(path, added);
    }
    let mut out = Vec::new();
    let mut first_err = None;
    while let Some((d, old)) = ap.done.pop() {
        let r = set(path, knob, &d, &old).and_then(|()| read(path, knob, &d));
        match r {
            Ok(rb) => out.extend(rb),
            Err(e) => {
                first_err.get_or_insert(e);
            }
        }
        if let Value::Mtu(m) = old
            && let Some(x) = path
                .devices
                .iter_mut()
                .find(|x| x.ifindex == d.ifindex && x.netns == d.netns)
        {
            x.mtu = m;
        }
    }
    match first_err {
        Some(e) => Err(e.context(format!("restoring {}", knob.name()))),
        None => Ok(out),
    }
}
