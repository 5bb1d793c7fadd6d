//! `netpath validate --rules N --chain C`: does a known netfilter cost come back at its part?
//! N rules no packet of the path matches (`ip daddr 192.0.2.x tcp dport p counter`: TEST-NET-1
//! is never on a path) go into a base chain of a table of netpath's own (`np_val_<run id>`) on
//! one hook of one lab namespace. The table and its empty chain stay for the whole lab, so the
//! reference (0 rules) has the same part, boundaries and chain dispatch: only the rules differ,
//! and a part's difference is their cost alone. Rounds interleave the counts like delays, each
//! arm with an untraced run and a traced run with `--parts`.
//!
//! Removal: the table is deleted explicitly after the rounds, whatever they returned; on
//! Ctrl-C, SIGTERM or a panic the lab's cleanup deletes the lab's namespaces, and the table
//! goes with its namespace (the chain is always in one of the lab's own, see [`Chain::netns`]).
use std::collections::BTreeMap;

use anyhow::{Result, bail};
use serde::Serialize;

pub use super::table::Chain;
use super::{Verdict, hops_of, table::Place};
use crate::{
    harness::RrConfig,
    measure::interleave::CompareOptions,
    path::{NetPath, parts::NfHook},
    probe::tracer::Tracer,
    record::{DriverReport, Spread},
};

/// The rule counts asked when `--chain` is given alone.
pub const DEFAULT_RULES: usize = 400;
/// The most rules an arm may add (a few ms of netfilter per packet beyond it).
pub const MAX_RULES: usize = 100_000;

/// One driver at one rule count, against 0 rules of the same rounds.
#[derive(Clone, Debug, Serialize, schemars::JsonSchema)]
pub struct RuleCase {
    pub driver: String,
    pub netns: String,
    /// The part the rules are in: `np_val_<run id>/<chain>`.
    pub part: String,
    pub hook: NfHook,
    /// Rules added (none of them matches a packet of the path).
    pub rules: usize,
    /// Rules the part read in each traced run with them, and with none (the placement's
    /// count from the live ruleset: the check that they were in and out).
    pub part_rules: Vec<usize>,
    pub reference_rules: Vec<usize>,
    /// The directions the part was seen in and the hop it lay in for each
    /// (`request:sender-stack`); the expected hop is `hop`.
    pub seen: Vec<String>,
    pub hop: &'static str,
    /// The part's p50 with the rules and with none (summed over its directions), median over
    /// rounds.
    pub part_us: f64,
    pub reference_us: f64,
    /// The change of the part's p50, median of the per-round changes, and its spread.
    pub recovered_us: f64,
    pub recovered_spread: Spread,
    /// Untraced RTT p50 change, median of the per-round changes, and its spread.
    pub untraced_rtt_delta_us: f64,
    pub untraced_spread: Spread,
    /// `recovered_us − untraced_rtt_delta_us`.
    pub error_us: f64,
    /// What the error may be: 10% of the untraced change + 0.2 µs.
    pub tolerance_us: f64,
    /// The change of the hop the part lies in less the part's: the rest of that hop.
    pub hop_rest_us: f64,
    /// Its noise: how far it wandered between rounds within an arm (the larger of the two
    /// arms' ranges), at least `tolerance_us`.
    pub hop_rest_noise_us: f64,
    /// The other hop or part that moved most beyond its noise (or least within it), its
    /// change and its noise (as `hop_rest_noise_us`).
    pub largest_other: String,
    pub largest_other_us: f64,
    pub largest_other_noise_us: f64,
    pub verdict: Verdict,
}

/// One driver's runs at one rule count, per round.
#[derive(Default)]
struct Runs {
    traced: Vec<DriverReport>,
    untraced_p50_us: Vec<f64>,
}

/// The counts, 0 first (the reference), checked before anything is built.
pub fn counts(asked: &[usize]) -> Result<Vec<usize>> {
    let mut c = asked.to_vec();
    if c.is_empty() {
        c.push(DEFAULT_RULES);
    }
    if !c.contains(&0) {
        c.insert(0, 0);
    }
    if let Some(n) = c.iter().find(|&&n| n > MAX_RULES) {
        bail!("--rules {n}: use 0 to {MAX_RULES} rules");
    }
    Ok(c)
}

/// Every count on one lab, interleaved in rounds; the table deleted whatever they returned.
pub fn measure_driver(
    tracer: &mut Tracer,
    lab: &NetPath,
    chain: Chain,
    counts: &[usize],
    opts: &CompareOptions,
) -> Result<Vec<RuleCase>> {
    let ns = chain.netns(lab).map_err(|why| {
        anyhow::anyhow!(
            "--chain {} is not available on {}: {why}",
            chain.name(),
            lab.driver
        )
    })?;
    let place = Place {
        ns,
        table: format!("np_val_{}", lab.run_id),
        chain,
    };
    place.create()?;
    let result = rounds(tracer, lab, &place, counts, opts);
    let removed = place.delete();
    let runs = result?;
    removed?;
    Ok((1..counts.len())
        .map(|i| case(lab, &place, counts[i], &runs[i], &runs[0]))
        .collect())
}

fn rounds(
    tracer: &mut Tracer,
    lab: &NetPath,
    place: &Place,
    counts: &[usize],
    opts: &CompareOptions,
) -> Result<Vec<Runs>> {
    let rr = RrConfig {
        load: opts.rr.clone(),
        wait: opts.mode.wait,
        pin: opts.mode.pin,
        ..RrConfig::default()
    };
    let n = opts.rounds.max(1);
    let mut runs: Vec<Runs> = counts.iter().map(|_| Runs::default()).collect();
    let bar = crate::progress::Bar::new(lab.driver.name(), n as u64);
    for r in 0..n {
        bar.phase(format!("round {}/{n}", r + 1));
        // The order reversed every other round, as the delays' is.
        let mut order: Vec<usize> = (0..counts.len()).collect();
        if r % 2 == 1 {
            order.reverse();
        }
        for i in order {
            place.set_rules(counts[i])?;
            let label = format!("{} {} rules", lab.driver, counts[i]);
            let (u, t) = super::untraced_then_traced(tracer, lab, &label, opts, &rr)?;
            runs[i].untraced_p50_us.push(u);
            runs[i].traced.push(t);
        }
        bar.done();
    }
    bar.finish();
    Ok(runs)
}

/// A traced run's figures by name: every hop (`hop (dir)`) and every part
/// (`part@netns HOOK (dir)`), p50, netpath's own time taken out of the hops.
fn figures(r: &DriverReport) -> BTreeMap<String, f64> {
    let hops = hops_of(r)
        .into_iter()
        .map(|((d, h), v)| (format!("{h} ({d})"), v));
    let parts = r.parts.iter().map(|p| {
        let k = format!("{}@{} {} ({})", p.name, p.netns, p.hook.name(), p.dir);
        (k, p.p50_us)
    });
    hops.chain(parts).collect()
}

/// Every traced run's figures, in the arm with the rules and in the reference, per round.
struct Figures {
    run: Vec<BTreeMap<String, f64>>,
    base: Vec<BTreeMap<String, f64>>,
}

type Of<'a> = &'a dyn Fn(&BTreeMap<String, f64>) -> f64;

impl Figures {
    fn of(run: &Runs, base: &Runs) -> Figures {
        Figures {
            run: run.traced.iter().map(figures).collect(),
            base: base.traced.iter().map(figures).collect(),
        }
    }

    /// The per-round changes of `f` against the reference of the same round.
    fn delta(&self, f: Of) -> Spread {
        Spread::of(
            self.run
                .iter()
                .zip(&self.base)
                .map(|(r, b)| f(r) - f(b))
                .collect(),
        )
    }

    /// How far `f` wanders between rounds within one arm, nothing changed: the larger range
    /// of the two arms. A change inside it is not told from the machine's noise.
    fn noise(&self, f: Of) -> f64 {
        let range = |arm: &[BTreeMap<String, f64>]| {
            let s = Spread::of(arm.iter().map(f).collect());
            s.max - s.min
        };
        range(&self.run).max(range(&self.base))
    }

    fn keys(&self) -> std::collections::BTreeSet<String> {
        (self.run.iter().chain(&self.base))
            .flat_map(|m| m.keys().cloned())
            .collect()
    }
}

fn sum_of(m: &BTreeMap<String, f64>, keys: &[String]) -> f64 {
    keys.iter().map(|k| m.get(k).copied().unwrap_or(0.0)).sum()
}

/// The names of the rules' part (per direction) and of the hop it must lie in.
fn own_keys(place: &Place) -> (Vec<String>, Vec<String>) {
    let (dirs, hop) = place.chain.expect();
    let part = |d: &str| {
        format!(
            "{}@{} {} ({d})",
            place.part(),
            place.ns.name,
            place.chain.hook().name()
        )
    };
    let parts = dirs.iter().map(|d| part(d)).collect();
    let hops = dirs.iter().map(|d| format!("{hop} ({d})")).collect();
    (parts, hops)
}

fn case(lab: &NetPath, place: &Place, rules: usize, run: &Runs, base: &Runs) -> RuleCase {
    let (_, hop) = place.chain.expect();
    let (part_keys, hop_keys) = own_keys(place);
    let fig = Figures::of(run, base);
    let part = |m: &BTreeMap<String, f64>| sum_of(m, &part_keys);
    let rest = |m: &BTreeMap<String, f64>| sum_of(m, &hop_keys) - sum_of(m, &part_keys);
    let recovered = fig.delta(&part);
    let untraced = Spread::of(
        (run.untraced_p50_us.iter().zip(&base.untraced_p50_us))
            .map(|(a, b)| a - b)
            .collect(),
    );
    let tolerance_us = 0.1 * untraced.median.abs() + 0.2;
    // Every other hop and part: its change, and how much more than its noise it moved.
    let mut others: Vec<(String, f64, f64)> = (fig.keys().into_iter())
        .filter(|k| !part_keys.contains(k) && !hop_keys.contains(k))
        .map(|k| {
            let f = |m: &BTreeMap<String, f64>| m.get(&k).copied().unwrap_or(0.0);
            (
                k.clone(),
                fig.delta(&f).median,
                fig.noise(&f).max(tolerance_us),
            )
        })
        .collect();
    others.sort_by(|a, b| (b.1.abs() - b.2).total_cmp(&(a.1.abs() - a.2)));
    let (largest_other, largest_other_us, largest_other_noise_us) =
        others.into_iter().next().unwrap_or_default();
    let level = |arm: &[BTreeMap<String, f64>]| Spread::of(arm.iter().map(part).collect()).median;
    let mut c = RuleCase {
        driver: lab.driver.name().to_string(),
        netns: place.ns.name.clone(),
        part: place.part(),
        hook: place.chain.hook(),
        rules,
        part_rules: rules_read(run, place),
        reference_rules: rules_read(base, place),
        seen: seen(run, place),
        hop,
        part_us: level(&fig.run),
        reference_us: level(&fig.base),
        recovered_us: recovered.median,
        recovered_spread: recovered,
        untraced_rtt_delta_us: untraced.median,
        untraced_spread: untraced,
        error_us: recovered.median - untraced.median,
        tolerance_us,
        hop_rest_us: fig.delta(&rest).median,
        hop_rest_noise_us: fig.noise(&rest).max(tolerance_us),
        largest_other,
        largest_other_us,
        largest_other_noise_us,
        verdict: Verdict::default(),
    };
    c.verdict = verdict(&c, place);
    c
}

/// The rules' part rows of a set of runs: each run's first row of the part.
fn part_rows<'a>(
    runs: &'a Runs,
    place: &'a Place,
) -> impl Iterator<Item = &'a crate::record::parts::PartRow> + 'a {
    runs.traced.iter().flat_map(move |t| {
        (t.parts.iter())
            .filter(move |p| p.name == place.part() && p.netns == place.ns.name)
            .take(1)
    })
}

fn rules_read(runs: &Runs, place: &Place) -> Vec<usize> {
    part_rows(runs, place).map(|p| p.rules).collect()
}

/// `dir:hop` of every row of the part in any run, each once.
fn seen(runs: &Runs, place: &Place) -> Vec<String> {
    let mut out: Vec<String> = (runs.traced.iter())
        .flat_map(|t| t.parts.iter())
        .filter(|p| p.name == place.part() && p.netns == place.ns.name)
        .map(|p| format!("{}:{}", p.dir, p.hop))
        .collect();
    out.sort();
    out.dedup();
    out
}

/// Pass: the part is where it must be with the rules counted, the change it recovered is
/// the untraced change within the tolerance, and nothing else (the rest of the part's hop,
/// every other hop and part) moved by more than its noise.
fn verdict(c: &RuleCase, place: &Place) -> Verdict {
    let (dirs, hop) = place.chain.expect();
    let mut failed = Vec::new();
    let expected: Vec<String> = dirs.iter().map(|d| format!("{d}:{hop}")).collect();
    if c.seen != expected {
        failed.push(format!(
            "the part was seen as {:?}, expected {:?}",
            c.seen, expected
        ));
    }
    let runs = c.reference_rules.len().max(c.part_rules.len());
    if c.part_rules.iter().any(|&n| n != c.rules) || c.part_rules.len() < runs {
        failed.push(format!(
            "the part read {:?} rules, {} added",
            c.part_rules, c.rules
        ));
    }
    if c.error_us.abs() > c.tolerance_us {
        let u = &c.untraced_spread;
        // An untraced change that itself wandered more than the tolerance is the likelier
        // culprit: say so, with what reduces it.
        let why = if u.max - u.min > c.tolerance_us {
            format!(
                "; the untraced change itself ranged {:+.2} to {:+.2} µs over rounds (more requests or rounds narrow it)",
                u.min, u.max
            )
        } else {
            String::new()
        };
        failed.push(format!(
            "recovered {:+.2} µs of an untraced {:+.2} µs (more than ±{:.2} µs apart){why}",
            c.recovered_us, c.untraced_rtt_delta_us, c.tolerance_us
        ));
    }
    if c.hop_rest_us.abs() > c.hop_rest_noise_us {
        failed.push(format!(
            "{hop} less the part moved {:+.2} µs (noise {:.2})",
            c.hop_rest_us, c.hop_rest_noise_us
        ));
    }
    if c.largest_other_us.abs() > c.largest_other_noise_us {
        failed.push(format!(
            "{} moved {:+.2} µs (noise {:.2})",
            c.largest_other, c.largest_other_us, c.largest_other_noise_us
        ));
    }
    Verdict {
        pass: failed.is_empty(),
        failed,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_lead_with_the_reference() {
        assert_eq!(counts(&[]).unwrap(), vec![0, DEFAULT_RULES]);
        assert_eq!(counts(&[200]).unwrap(), vec![0, 200]);
        // A second 0 stays: it reads the noise.
        assert_eq!(counts(&[0, 0, 400]).unwrap(), vec![0, 0, 400]);
        assert!(counts(&[MAX_RULES + 1]).is_err());
    }
}
