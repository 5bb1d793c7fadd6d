//! `netpath tune --apply CMD --revert CMD`: one path (a lab driver's, or between two running
//! containers) measured with an outside change in place (side A) and reverted (side B).
//!
//! Both sides are the same path, so the rounds engine is handed two sides on it, each with an
//! `enter` hook: A's puts the change in place if it is not, B's reverts it if it is. Rounds
//! alternate the order (A, B, then B, A, …), so each command runs once per change of side and
//! neither side always comes first. Figures, noise and verdicts are knob tune's (`judge`).

use std::collections::BTreeMap;

use anyhow::{Context as _, Result};
use serde::Serialize;

use super::outside::{self, Change, Commands, Tally};
use super::{TuneResult, TuneSide};
use crate::measure::compare::CompareOptions;
use crate::measure::interleave::{self, Side};
use crate::path::NetPath;
use crate::probe::tracer::Tracer;

/// What `--apply`/`--revert` did, for the JSON and the text.
#[derive(Clone, Debug, Serialize, schemars::JsonSchema)]
pub struct ChangeInfo {
    #[serde(flatten)]
    pub commands: Commands,
    /// The path measured: a lab driver, or `CLIENT→SERVER (driver via network)`.
    pub path: String,
    /// The variables the commands saw (`NP_…`).
    pub environment: BTreeMap<String, String>,
    #[serde(flatten)]
    pub tally: Tally,
}

/// The sides' labels: `A (CMD)` and `B (CMD)`, each command shortened.
pub fn labels(cmds: &Commands) -> (String, String) {
    (
        format!("A ({})", outside::short(strip_wrapper(&cmds.apply), 60)),
        format!("B ({})", outside::short(strip_wrapper(&cmds.revert), 60)),
    )
}

/// The command without the namespace wrapper that most of them start with (`ip netns exec
/// NS`, `nsenter --net=…`), which says nothing about the change.
fn strip_wrapper(cmd: &str) -> &str {
    let mut rest = cmd.trim_start();
    if let Some(r) = rest.strip_prefix("ip netns exec ") {
        rest = r.trim_start();
        rest = rest.split_once(char::is_whitespace).map_or("", |x| x.1);
    }
    if let Some(r) = rest.strip_prefix("nsenter ") {
        rest = r.trim_start();
        while rest.starts_with('-') {
            rest = rest
                .split_once(char::is_whitespace)
                .map_or("", |x| x.1.trim_start());
        }
    }
    let rest = rest.trim_start();
    if rest.is_empty() { cmd.trim() } else { rest }
}

/// Measures `path` (named `name`) with the change in place for A and reverted for B, then
/// reverts (if in place) and tears the path down, whatever happened.
pub fn run(
    mut tracer: Tracer,
    (path, name): (NetPath, String),
    cmds: &Commands,
    base: &CompareOptions,
) -> Result<TuneResult> {
    let env = outside::environment(&path);
    let netns = match outside::netns_of(&path, cmds.run_in) {
        Ok(n) => n,
        Err(e) => {
            let _ = path.teardown();
            return Err(e);
        }
    };
    let change = Change::arm(cmds, env.clone(), netns);
    let (la, lb) = labels(cmds);
    let mut opts = base.clone();
    opts.mode.also_block = false;
    let (ea, eb) = (|| change.enter(true), || change.enter(false));
    let sides = [
        Side {
            path: &path,
            label: la.clone(),
            proto: opts.proto(),
            opts: &opts,
            enter: Some(&ea),
        },
        Side {
            path: &path,
            label: lb.clone(),
            proto: opts.proto(),
            opts: &opts,
            enter: Some(&eb),
        },
    ];
    let measured = interleave::run_sides(&mut tracer, &sides);
    drop(sides);
    // Reverted first (the commands may use the lab's namespaces), then the lab goes.
    let tally = change.finish();
    let driver = path.driver;
    let torn = path.teardown();
    let mut reports = measured.with_context(|| format!("measuring {name}"))?;
    let tally = tally?;
    torn?;
    let rb = reports.pop().context("no report for B")?;
    let ra = reports.pop().context("no report for A")?;
    let (deltas, verdicts, warnings) = super::judge((&la, &lb), &ra, &rb);
    let side = |label: &str, report| TuneSide {
        label: label.to_string(),
        driver,
        setting: None,
        applied: Default::default(),
        restored: Vec::new(),
        segments_per_request: super::segments(&report, &opts),
        report,
    };
    Ok(TuneResult {
        driver,
        knob: None,
        change: Some(ChangeInfo {
            commands: cmds.clone(),
            path: name,
            environment: env.into_iter().collect(),
            tally,
        }),
        a: side(&la, ra),
        b: side(&lb, rb),
        deltas,
        verdicts,
        warnings,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sides_are_named_by_their_commands_without_the_namespace_wrapper() {
        let c = Commands {
            apply: "ip netns exec $NP_NODE_NS iptables -I FORWARD -p udp --dport 9 -j DROP".into(),
            revert: "nsenter --net=$NP_NODE_NS_PATH  iptables -D FORWARD 1".into(),
            run_in: outside::RunIn::Host,
        };
        assert_eq!(
            labels(&c),
            (
                "A (iptables -I FORWARD -p udp --dport 9 -j DROP)".to_string(),
                "B (iptables -D FORWARD 1)".to_string()
            )
        );
        assert_eq!(strip_wrapper("ip netns exec x"), "ip netns exec x");
        assert_eq!(strip_wrapper("sysctl -w a=1"), "sysctl -w a=1");
    }
}
