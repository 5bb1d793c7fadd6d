//! The A/B seam of `diff` and `tune`: turns two sides' measurements into `delta::Figure`s,
//! each with its values per round, and says what differed in the two sides' context
//! (backend, kernel, wait mode, placement, machine state, netpath version).
//!
//! Both sides are `DriverReport`s, a live run's as measured and a saved `compare --json`'s
//! as read back (`record::saved`), so a live run and a saved file give the same figures. Per-round values come from the untraced rounds (`rounds`), and from each round's
//! traced run in brief (`round_detail`: its p50 and p99, one-way p50, per-hop table, receive
//! passes, bulk); a file saved before rounds kept their hop tables has only the median round's
//! table, and its hop figures then have one value: `delta` says their noise is unknown.
//! The noise rule, ranking and verdict are `delta`'s.
mod context;

pub use context::{Side, conditions, context_warnings};

use serde::Serialize;

use crate::measure::delta::{self, Delta, Figure, Unit};
use crate::path::parts::NfHook;
use crate::record::saved::Stat;
use crate::record::{DriverReport, HopFigures, Spread, parts::PartRow};

/// One side's figures, grouped: a ranking and its shares mean something within a group only
/// (µs of a hop's p50 do not add to its p99 or to a throughput).
#[derive(Debug, Default)]
pub struct Figures {
    /// RTT p50 and p99, untraced (the headline's) then traced.
    pub rtt: Vec<Figure>,
    /// Per hop and direction: time added to one packet, its p50, p99 and mean.
    pub hops_p50: Vec<Figure>,
    pub hops_p99: Vec<Figure>,
    pub hops_mean: Vec<Figure>,
    /// One-way p50 per direction (traced).
    pub one_way: Vec<Figure>,
    /// Bulk Gbit/s, when both sides ran bulk.
    pub bulk: Option<Figure>,
    /// Receive passes and softirq runs per packet, per direction.
    pub passes: Vec<Figure>,
    /// Netfilter parts (`--parts`), mean per packet, per part and direction.
    pub parts: Vec<Figure>,
    /// Per part figure (by name): the hop and direction it lies in, "bridge (request)".
    pub part_hops: Vec<(String, String)>,
    /// Each side's hop figures have one value per round (not only the median round's).
    pub hops_per_round: (bool, bool),
}

impl Figures {
    /// Every figure, in group order.
    pub fn all(&self) -> Vec<&Figure> {
        self.rtt
            .iter()
            .chain(&self.hops_p50)
            .chain(&self.hops_p99)
            .chain(&self.hops_mean)
            .chain(&self.one_way)
            .chain(&self.bulk)
            .chain(&self.passes)
            .chain(&self.parts)
            .collect()
    }
}

/// The rounds' hop tables, or the median round's when the file has no per-round ones.
fn hop_rounds(d: &DriverReport) -> (Vec<Round<'_>>, bool) {
    let per_round = !d.round_detail.is_empty() && d.round_detail.iter().all(|r| !r.hops.is_empty());
    if per_round {
        (
            d.round_detail
                .iter()
                .map(|r| r.hops.iter().collect())
                .collect(),
            true,
        )
    } else if d.hops.is_empty() {
        (Vec::new(), false)
    } else {
        (vec![d.hops.iter().map(|h| &h.at).collect()], false)
    }
}

/// One round's hop table: a round's own (`RoundRow::hops`) or the run's (`HopRow::at`).
type Round<'a> = Vec<&'a HopFigures>;

/// One hop's figure per round: 0 in a round that did not cross it (idle-exit and runqueue
/// are alternatives), none at all when the side never crossed it (then `delta` counts it as
/// 0 in every round: the hop is all the other side's).
fn hop_values(rounds: &[Round], hop: &str, dir: &str, f: fn(&HopFigures) -> f64) -> Vec<f64> {
    let find = |r: &Round| {
        r.iter()
            .find(|h| h.hop == hop && h.dir == dir)
            .map(|h| f(h))
    };
    if rounds.iter().all(|r| find(r).is_none()) {
        return Vec::new();
    }
    rounds.iter().map(|r| find(r).unwrap_or(0.0)).collect()
}

/// "×2 more" when one side crosses the hop notably more often per packet than the other.
fn crossings_note(a: &[Round], b: &[Round], hop: &str, dir: &str) -> Option<String> {
    let per_pkt = |h: &HopFigures| {
        if h.mean_us > 0.0 {
            h.per_packet_us / h.mean_us
        } else {
            0.0
        }
    };
    let med = |r: &[Round]| Spread::of(hop_values(r, hop, dir, per_pkt)).median;
    let (ca, cb) = (med(a), med(b));
    if ca <= 0.0 || cb <= 0.0 {
        return None;
    }
    let fmt = |r: f64| {
        if (r - r.round()).abs() < 0.1 {
            format!("×{r:.0}")
        } else {
            format!("×{r:.1}")
        }
    };
    let r = ca / cb;
    if r >= 1.5 {
        Some(format!("{} more", fmt(r)))
    } else if r <= 1.0 / 1.5 {
        Some(format!("{} fewer", fmt(1.0 / r)))
    } else {
        None
    }
}

/// Hop and direction of every row either side has, A's order first.
fn hop_keys(a: &[Round], b: &[Round]) -> Vec<(&'static str, &'static str)> {
    let mut keys: Vec<(&'static str, &'static str)> = Vec::new();
    for h in a.iter().chain(b).flat_map(|r| r.iter()) {
        let k = (h.hop, h.dir);
        if !keys.contains(&k) {
            keys.push(k);
        }
    }
    // Request hops before response hops, each in the path order they were first seen.
    keys.sort_by_key(|(_, dir)| *dir != "request");
    keys
}

fn hop_figures(a: &DriverReport, b: &DriverReport, paired: bool, out: &mut Figures) {
    let ((ra, pa), (rb, pb)) = (hop_rounds(a), hop_rounds(b));
    out.hops_per_round = (pa, pb);
    for (hop, dir) in hop_keys(&ra, &rb) {
        let name = format!("{hop} ({dir})");
        let note = crossings_note(&ra, &rb, hop, dir);
        let fig = |f: fn(&HopFigures) -> f64| {
            Figure::new(
                name.clone(),
                hop_values(&ra, hop, dir, f),
                hop_values(&rb, hop, dir, f),
            )
            .paired(paired)
            .note(note.clone())
        };
        out.hops_p50
            .push(fig(|h| h.per_packet(Stat::P50)).histogram_percentile());
        out.hops_p99
            .push(fig(|h| h.per_packet(Stat::P99)).histogram_percentile());
        out.hops_mean.push(fig(|h| h.per_packet(Stat::Mean)));
    }
}

/// Per netfilter part and direction (by name and hook: a table's name carries the lab's id,
/// so its figure pairs only where both sides ran on one lab, as with `--apply`), the mean per
/// packet per round; a part one side lacks reads 0 there (its chains were not in place).
fn part_figures(
    a: &DriverReport,
    b: &DriverReport,
    paired: bool,
) -> (Vec<Figure>, Vec<(String, String)>) {
    let rounds = |d: &DriverReport| -> Vec<Vec<PartRow>> {
        match d.round_detail.iter().any(|r| !r.parts.is_empty()) {
            true => d.round_detail.iter().map(|r| r.parts.clone()).collect(),
            false => vec![d.parts.clone()],
        }
    };
    let (ra, rb) = (rounds(a), rounds(b));
    if ra.iter().chain(&rb).all(Vec::is_empty) {
        return (Vec::new(), Vec::new());
    }
    let key = part_key;
    let mut keys: Vec<_> = ra.iter().chain(&rb).flatten().map(key).collect();
    keys.sort();
    keys.dedup();
    let values = |rounds: &[Vec<PartRow>], k: &(String, NfHook, String)| -> Vec<f64> {
        let one = |r: &Vec<PartRow>| {
            r.iter()
                .find(|p| &key(p) == k)
                .map_or(0.0, |p| p.per_packet_us)
        };
        rounds.iter().map(one).collect()
    };
    let find = |d: &DriverReport, k: &(String, NfHook, String)| {
        d.parts.iter().find(|p| &key(p) == k).cloned()
    };
    keys.iter()
        .map(|k| {
            let name = match k.1 {
                NfHook::Qdisc => format!("{} ({})", k.0, k.2),
                h => format!("{} {} ({})", k.0, h.name(), k.2),
            };
            let (pa, pb) = (find(a, k), find(b, k));
            let note = match k.1 {
                NfHook::Qdisc => qdisc_note(pa.as_ref(), pb.as_ref()),
                _ => rules_note(pa.as_ref(), pb.as_ref()),
            };
            let hop = pa
                .or(pb)
                .map_or(String::new(), |p| format!("{} ({})", p.hop, p.dir));
            let fig = Figure::new(name.clone(), values(&ra, k), values(&rb, k))
                .paired(paired)
                .note(note);
            (fig, (name, hop))
        })
        .unzip()
}

/// What differs in a part's rules between the sides: "DOCKER-USER +400 rules" (the regular
/// chains it reaches, then its base chains' own), none when nothing does.
/// What pairs a part across two runs, with its hook and direction: a netfilter part its
/// name; a qdisc part the kind of device it is on (the kernel keeps one per kind and
/// direction), since its qdisc may be the very change.
fn part_key(p: &PartRow) -> (String, NfHook, String) {
    let name = match p.hook {
        NfHook::Qdisc => {
            let kind = p
                .after
                .trim_start_matches("dev_queue (")
                .trim_end_matches(')');
            format!("qdisc on {kind}")
        }
        _ => p.name.clone(),
    };
    (name, p.hook, p.dir.clone())
}

/// A qdisc part's note: its qdisc on each side, when they differ.
fn qdisc_note(a: Option<&PartRow>, b: Option<&PartRow>) -> Option<String> {
    let (ka, kb) = (a.map_or("none", |p| &p.name), b.map_or("none", |p| &p.name));
    (ka != kb).then(|| format!("A {ka}, B {kb}"))
}

fn rules_note(a: Option<&PartRow>, b: Option<&PartRow>) -> Option<String> {
    let of = |p: Option<&PartRow>| -> Vec<(String, i64)> {
        let Some(p) = p else { return Vec::new() };
        let reached: i64 = p.reached.iter().map(|c| c.rules as i64).sum();
        let mut v: Vec<_> = (p.reached.iter())
            .map(|c| (c.chain.clone(), c.rules as i64))
            .collect();
        v.push((String::new(), p.rules as i64 - reached));
        v
    };
    let (va, vb) = (of(a), of(b));
    let mut names: Vec<&String> = va.iter().chain(&vb).map(|(n, _)| n).collect();
    names.sort();
    names.dedup();
    let get = |v: &[(String, i64)], n: &String| v.iter().find(|(m, _)| m == n).map_or(0, |x| x.1);
    let diffs: Vec<String> = (names.iter())
        .filter_map(|n| {
            let d = get(&va, n) - get(&vb, n);
            (d != 0).then(|| match n.is_empty() {
                true => format!("{d:+} rules"),
                false => format!("{n} {d:+} rules"),
            })
        })
        .collect();
    (!diffs.is_empty()).then(|| diffs.join(", "))
}

/// A figure both sides measured (a side without it did not run it: not a 0).
fn both(name: &str, a: Vec<f64>, b: Vec<f64>, paired: bool) -> Option<Figure> {
    (!a.is_empty() && !b.is_empty()).then(|| Figure::new(name, a, b).paired(paired))
}

/// The traced RTT percentile per round, or the median round's alone in an older file.
fn traced_rtt(d: &DriverReport, p99: bool) -> Vec<f64> {
    // A round's p99 reads 0 in a file saved before rounds kept it: no round trip takes 0 µs.
    let per_round: Option<Vec<f64>> = d
        .round_detail
        .iter()
        .map(|r| {
            if p99 {
                (r.traced_p99_us > 0.0).then_some(r.traced_p99_us)
            } else {
                Some(r.traced_p50_us)
            }
        })
        .collect();
    match per_round {
        Some(v) if !v.is_empty() => v,
        _ => vec![if p99 {
            d.traced.p99_us
        } else {
            d.traced.p50_us
        }],
    }
}

fn rtt_figures(a: &DriverReport, b: &DriverReport, paired: bool) -> Vec<Figure> {
    let untraced = |d: &DriverReport, p99: bool| -> Vec<f64> {
        let f = |r: &crate::record::RttSummary| if p99 { r.p99_us } else { r.p50_us };
        d.rounds.iter().map(f).collect()
    };
    [
        both("RTT p50", untraced(a, false), untraced(b, false), paired),
        both("RTT p99", untraced(a, true), untraced(b, true), paired),
        both(
            "RTT p50 traced",
            traced_rtt(a, false),
            traced_rtt(b, false),
            paired,
        ),
        both(
            "RTT p99 traced",
            traced_rtt(a, true),
            traced_rtt(b, true),
            paired,
        ),
    ]
    .into_iter()
    .flatten()
    .collect()
}

fn one_way_values(d: &DriverReport, dir: &str) -> Vec<f64> {
    let per_round: Option<Vec<f64>> = d
        .round_detail
        .iter()
        .map(|r| r.one_way_p50_us.get(dir).copied())
        .collect();
    match per_round {
        Some(v) if !v.is_empty() => v,
        _ => d
            .one_way
            .get(dir)
            .map(|o| vec![o.p50_us])
            .unwrap_or_default(),
    }
}

/// Bulk Gbit/s per round: the rounds' own figure, else the saved streams summed per round.
fn bulk_values(d: &DriverReport) -> Vec<f64> {
    let Some(b) = &d.bulk else {
        return Vec::new();
    };
    let per_round: Option<Vec<f64>> = d.round_detail.iter().map(|r| r.bulk_gbit_per_s).collect();
    match per_round {
        Some(v) if !v.is_empty() => v,
        _ => b
            .per_round
            .chunks(b.streams.max(1))
            .map(|c| c.iter().map(|s| s.gbit_per_s).sum())
            .collect(),
    }
}

fn passes_values(d: &DriverReport, dir: &str, softirq: bool) -> Vec<f64> {
    d.round_detail
        .iter()
        .filter_map(|r| r.passes.iter().find(|p| p.dir == dir))
        .map(|p| {
            if softirq {
                p.softirqs_per_packet
            } else {
                p.rx_passes_per_packet
            }
        })
        .collect()
}

/// A against B. `paired`: the two were measured in one interleaved run (round i of A beside
/// round i of B); `delta` pairs them only where both have as many rounds.
pub fn figures(a: &DriverReport, b: &DriverReport, paired: bool) -> Figures {
    let mut out = Figures {
        rtt: rtt_figures(a, b, paired),
        ..Default::default()
    };
    hop_figures(a, b, paired, &mut out);
    (out.parts, out.part_hops) = part_figures(a, b, paired);
    for dir in ["request", "response"] {
        let name = format!("one-way p50 ({dir})");
        let f = both(
            &name,
            one_way_values(a, dir),
            one_way_values(b, dir),
            paired,
        );
        out.one_way.extend(f.map(Figure::histogram_percentile));
        for (what, softirq) in [("receive passes", false), ("softirq runs", true)] {
            let name = format!("{what} per packet ({dir})");
            let (va, vb) = (
                passes_values(a, dir, softirq),
                passes_values(b, dir, softirq),
            );
            out.passes
                .extend(both(&name, va, vb, paired).map(|f| f.unit(Unit::Count)));
        }
    }
    out.bulk = both("bulk", bulk_values(a), bulk_values(b), paired).map(|f| f.unit(Unit::GbitPerS));
    out
}

/// Every figure's delta: the hop groups ranked by share of the difference, the others in
/// order; the headline is the first RTT figure (untraced p50 when the runs had untraced
/// rounds).
#[derive(Clone, Debug, Serialize, schemars::JsonSchema)]
pub struct Deltas {
    pub paired: bool,
    pub headline: Option<Delta>,
    /// One sentence: the headline, then the hops (p50 per packet) that are a result.
    pub verdict: String,
    pub rtt: Vec<Delta>,
    pub hops_p50: Vec<Delta>,
    pub hops_p99: Vec<Delta>,
    pub hops_mean: Vec<Delta>,
    pub one_way: Vec<Delta>,
    pub bulk: Option<Delta>,
    pub passes: Vec<Delta>,
    /// Netfilter parts, ranked like the hops (empty without `--parts`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub parts: Vec<Delta>,
}

/// The deltas of `f`, with the verdict naming the sides `a` and `b`.
pub fn deltas(a: &str, b: &str, f: &Figures) -> Deltas {
    let each = |v: &[Figure]| v.iter().map(delta::delta).collect::<Vec<_>>();
    let rtt = each(&f.rtt);
    let hops_p50 = delta::rank(&f.hops_p50);
    let headline = rtt.first().cloned();
    let verdict = match &headline {
        Some(h) => {
            let what = if h.name.contains("traced") {
                "at traced p50"
            } else {
                "at p50"
            };
            delta::verdict(a, b, what, h, &hops_p50)
        }
        None => format!("{a} and {b}: no RTT figure both measured"),
    };
    let parts = delta::rank(&f.parts);
    let verdict = verdict + &parts_sentence(&parts, &f.part_hops);
    Deltas {
        paired: f.all().iter().any(|x| x.paired),
        headline,
        verdict,
        rtt,
        hops_p50,
        hops_p99: delta::rank(&f.hops_p99),
        hops_mean: delta::rank(&f.hops_mean),
        one_way: each(&f.one_way),
        bulk: f.bulk.as_ref().map(delta::delta),
        passes: each(&f.passes),
        parts,
    }
}

/// "; netfilter parts: filter/FORWARD FORWARD (request) DOCKER-USER +400 rules +7.0 in bridge
/// (request)" for the parts whose difference is a result (none: nothing).
fn parts_sentence(ranked: &[Delta], hops: &[(String, String)]) -> String {
    let results: Vec<String> = (ranked.iter())
        .filter(|d| !d.within_noise && d.delta != 0.0)
        .map(|d| match hops.iter().find(|(n, _)| *n == d.name) {
            Some((_, hop)) if !hop.starts_with(' ') => format!("{} in {hop}", d.short()),
            _ => d.short(),
        })
        .collect();
    match results.is_empty() {
        true => String::new(),
        false => format!("; parts: {}", results.join(", ")),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::Value;

    use super::*;

    fn hop(name: &str, dir: &str, per_packet: f64, crossings_per_packet: f64) -> Value {
        let mean = per_packet / crossings_per_packet;
        serde_json::json!({"hop": name, "dir": dir, "crossings": 100, "per_packet_us": per_packet,
            "mean_us": mean, "p50_us": mean, "p99_us": mean * 2.0})
    }

    /// A driver's record as a saved file holds it (only what these figures read).
    fn side(p50s: &[f64], hops: &[Vec<Value>]) -> DriverReport {
        let rounds: Vec<Value> = p50s
            .iter()
            .map(|p| serde_json::json!({"count": 10, "p50_us": p, "p99_us": p * 2.0, "mean_us": p}))
            .collect();
        let detail: Vec<Value> = p50s
            .iter()
            .zip(hops)
            .map(|(p, h)| serde_json::json!({"traced_p50_us": p + 1.0, "traced_p99_us": p * 3.0, "hops": h}))
            .collect();
        let v = serde_json::json!({
            "driver": "x", "backend": "tracepoint",
            "traced": {"count": 10, "p50_us": 1.0, "p99_us": 2.0, "mean_us": 1.0},
            "untraced": null, "rr": null, "bulk": null,
            "rounds": rounds, "round_detail": detail, "hops": hops[0],
        });
        // The record's names borrow from the text, as from a saved file's.
        serde_json::from_str(Box::leak(v.to_string().into_boxed_str())).unwrap()
    }

    #[test]
    fn per_round_hops_give_each_hop_a_spread_and_a_one_sided_hop_counts_fully() {
        let a = side(
            &[30.0, 31.0, 30.5],
            &[
                vec![
                    hop("veth", "request", 2.0, 2.0),
                    hop("vxlan-decap", "request", 1.3, 1.0),
                ],
                vec![
                    hop("veth", "request", 2.1, 2.0),
                    hop("vxlan-decap", "request", 1.4, 1.0),
                ],
                vec![hop("veth", "request", 2.0, 2.0)],
            ],
        );
        let b = side(
            &[25.0, 26.0, 25.5],
            &[
                vec![hop("veth", "request", 1.0, 1.0)],
                vec![hop("veth", "request", 1.0, 1.0)],
                vec![hop("veth", "request", 1.1, 1.0)],
            ],
        );
        let f = figures(&a, &b, true);
        assert_eq!(f.hops_per_round, (true, true));
        let decap = f
            .hops_mean
            .iter()
            .find(|x| x.name == "vxlan-decap (request)")
            .unwrap();
        // A round without the hop is 0 there; B never crossed it.
        assert_eq!(
            (decap.a.clone(), decap.b.clone()),
            (vec![1.3, 1.4, 0.0], vec![])
        );
        let veth = f
            .hops_mean
            .iter()
            .find(|x| x.name == "veth (request)")
            .unwrap();
        assert_eq!(veth.note.as_deref(), Some("×2 more"));
        let d = deltas("overlay", "bridge", &f);
        let head = d.headline.as_ref().unwrap();
        assert_eq!(head.name, "RTT p50");
        assert!((head.delta - 5.0).abs() < 1e-9 && head.noise_known && !head.within_noise);
        assert!(
            d.verdict
                .starts_with("overlay is 5.0 µs slower than bridge at p50"),
            "{}",
            d.verdict
        );
        assert_eq!(f.rtt.len(), 4);
    }

    #[test]
    fn a_file_without_per_round_hops_has_one_value_and_unknown_noise() {
        let a = side(
            &[30.0, 31.0],
            &[vec![hop("veth", "request", 2.0, 1.0)], vec![]],
        );
        let b = side(
            &[25.0, 26.0],
            &[
                vec![hop("veth", "request", 1.0, 1.0)],
                vec![hop("veth", "request", 1.0, 1.0)],
            ],
        );
        let f = figures(&a, &b, false);
        assert_eq!(f.hops_per_round, (false, true));
        let d = delta::delta(&f.hops_mean[0]);
        assert_eq!(d.a_rounds, 1);
        assert!(!d.noise_known, "{d:?}");
    }
}
