//! `--parts` in the answer: the part that makes most of a named hop's difference between a
//! driver and its reference ("bridge +1.5, of which conntrack +0.9"). A part is taken per
//! round trip (its per-packet mean times the packets that crossed it per one-way journey),
//! keyed across the two runs by its name without run ids, its hook and direction.
use serde::Serialize;

use crate::path::parts::NfHook;
use crate::record::DriverReport;
use crate::record::parts::PartRow;

/// A part of a hop's difference.
#[derive(Clone, Debug, Serialize, serde::Deserialize, schemars::JsonSchema)]
pub struct PartShare {
    /// `table/chain` (run ids left out), `conntrack`, or `qdisc <kind>`.
    pub name: String,
    pub hook: NfHook,
    /// A − B, µs per round trip.
    pub delta_us: f64,
}

/// A part's name as two runs can share it: netpath's own tables carry the run id
/// (`netpath_5f6e0d/prerouting` → `netpath/prerouting`); a qdisc part is its kind of device
/// (what pairs it across runs) and its qdisc.
fn key(p: &PartRow) -> (String, NfHook, String) {
    let name = match p.hook {
        NfHook::Qdisc => format!("qdisc {}", p.name),
        _ => match p.name.split_once('/') {
            Some((t, c)) if t.starts_with("netpath_") => format!("netpath/{c}"),
            _ => p.name.clone(),
        },
    };
    (name, p.hook, p.dir.clone())
}

/// µs per round trip each part of hop `hop` (direction `dir`, or `both`) adds in `r`.
fn per_rt(r: &DriverReport, hop: &str, dir: &str) -> Vec<(Key, f64)> {
    (r.parts.iter())
        .filter(|p| p.hop == hop && (dir == "both" || p.dir == dir))
        .filter_map(|p| {
            let n = r.one_way.get(p.dir.as_str())?.count;
            (n > 0).then(|| (key(p), p.per_packet_us * p.packets as f64 / n as f64))
        })
        .collect()
}

type Key = (String, NfHook, String);

/// The part that makes half or more of the difference `delta_us` of hop `hop` (direction
/// `dir`, or `both`) between `a` and `b`, if one does.
pub fn part_of(
    hop: &str,
    dir: &str,
    delta_us: f64,
    a: &DriverReport,
    b: &DriverReport,
) -> Option<PartShare> {
    if a.parts.is_empty() && b.parts.is_empty() {
        return None;
    }
    share(delta_us, &per_rt(a, hop, dir), &per_rt(b, hop, dir))
}

/// The part of a hop's difference `delta` that makes half or more of it, of the parts `a` and `b`
/// have in that hop (µs per round trip each; a part one side lacks counts 0 there).
fn share(delta: f64, a: &[(Key, f64)], b: &[(Key, f64)]) -> Option<PartShare> {
    // Directions of one part together, as the hop's are.
    let mut by_name: Vec<(String, NfHook, f64)> = Vec::new();
    let signed = (a.iter().map(|(k, v)| (k, *v))).chain(b.iter().map(|(k, v)| (k, -v)));
    for ((name, hook, _), v) in signed {
        match by_name.iter_mut().find(|(n, k, _)| n == name && k == hook) {
            Some((_, _, d)) => *d += v,
            None => by_name.push((name.clone(), *hook, v)),
        }
    }
    (by_name.into_iter())
        .filter(|(_, _, d)| d.signum() == delta.signum())
        .filter(|(_, _, d)| d.abs() >= delta.abs() / 2.0)
        .max_by(|x, y| x.2.abs().total_cmp(&y.2.abs()))
        .map(|(name, hook, delta_us)| PartShare {
            name,
            hook,
            delta_us,
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn k(name: &str, hook: NfHook, dir: &str) -> Key {
        (name.into(), hook, dir.into())
    }

    #[test]
    fn a_part_is_named_when_it_makes_half_the_hops_difference() {
        let fwd = |d| k("filter/FORWARD", NfHook::Forward, d);
        let ct = |d| k("conntrack", NfHook::Prerouting, d);
        // FORWARD +3.0 +3.0 (both directions) of a +7.0 hop; conntrack unchanged.
        let a = [
            (fwd("request"), 3.2),
            (fwd("response"), 3.1),
            (ct("request"), 0.4),
        ];
        let b = [
            (fwd("request"), 0.2),
            (fwd("response"), 0.1),
            (ct("request"), 0.4),
        ];
        let s = share(7.0, &a, &b).unwrap();
        assert_eq!(
            (s.name.as_str(), s.hook),
            ("filter/FORWARD", NfHook::Forward)
        );
        assert!((s.delta_us - 6.0).abs() < 1e-9, "{s:?}");
        // Less than half, or the other sign: not named.
        assert!(share(13.0, &a, &b).is_none());
        assert!(share(-7.0, &a, &b).is_none());
        // A part only one side has counts whole.
        let only_b = [(ct("request"), 0.9)];
        let s = share(-1.0, &[], &only_b).unwrap();
        assert!((s.delta_us + 0.9).abs() < 1e-9, "{s:?}");
    }

    #[test]
    fn run_ids_stay_out_of_the_key() {
        let row = |name: &str, hook| PartRow {
            place: crate::path::parts::PartPlace {
                name: name.into(),
                netns: "np5f6e0d-node".into(),
                hook,
                prio_from: 0,
                prio_to: 0,
                rules: 0,
                reached: Vec::new(),
                device: String::new(),
            },
            dir: "request".into(),
            hop: "bridge".into(),
            after: String::new(),
            packets: 1,
            per_packet_us: 0.1,
            p50_us: 0.1,
            p99_us: 0.1,
        };
        assert_eq!(
            key(&row("netpath_5f6e0d/prerouting", NfHook::Prerouting)).0,
            "netpath/prerouting"
        );
        assert_eq!(
            key(&row("filter/DOCKER-USER", NfHook::Forward)).0,
            "filter/DOCKER-USER"
        );
        assert_eq!(key(&row("noqueue", NfHook::Qdisc)).0, "qdisc noqueue");
    }
}
