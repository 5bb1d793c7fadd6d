//! The per-round records of an interleaved run (`rounds` measures them) and the ratios
//! between two paths taken from them, round by round.
use serde::Serialize;

use super::{DriverReport, HopFigures, Spread};

/// One round of one path.
#[derive(Clone, Debug, Serialize, serde::Deserialize, schemars::JsonSchema)]
// Its `&'static str` names borrow from the JSON read (`render::saved::Saved`).
#[serde(bound(deserialize = "'de: 'static"))]
pub struct RoundRow {
    #[serde(default)]
    pub round: usize,
    pub untraced_p50_us: Option<f64>,
    pub traced_p50_us: f64,
    /// p50 of the request's whole wakeup (socket woken → receive returns: `wakeup` and its
    /// parts, see `wakeup_p50`).
    pub wakeup_p50_us: Option<f64>,
    /// Request one-way p50 minus its wakeup p50: every hop but the wakeup and its parts.
    pub data_path_p50_us: Option<f64>,
    #[serde(default)]
    pub mode_change: bool,
    /// The round's traced run in brief, so a difference between two results (`diff`, `tune`)
    /// has a spread over rounds, not only the median round's table.
    #[serde(default)]
    pub traced_p99_us: f64,
    /// One-way p50 per direction.
    #[schemars(schema_with = "super::schema_parts::by_dir::<f64>")]
    #[serde(default)]
    pub one_way_p50_us: std::collections::BTreeMap<&'static str, f64>,
    /// The round's hops: `HopRow`'s figures, without the shares.
    #[serde(default)]
    pub hops: Vec<HopFigures>,
    /// Receive passes and NET_RX softirq runs per packet, per direction.
    #[serde(default)]
    pub passes: Vec<RoundPasses>,
    /// The round's netfilter parts (`--parts`), for an A/B's spread per part.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub parts: Vec<super::parts::PartRow>,
    /// The round's bulk throughput (all streams), when bulk ran.
    pub bulk_gbit_per_s: Option<f64>,
    /// The round's hop sum, netpath's own time taken out, against its untraced RTT mean, %
    /// (`Consistency`), and the two figures, the round's stalls taken out of both (`stalls`).
    pub consistency_error_pct: Option<f64>,
    pub compensated_sum_us: Option<f64>,
    pub untraced_mean_us: Option<f64>,
    /// The machine's speed before the round's runs: a loopback ping-pong's p50 on the same
    /// CPUs, µs (`harness::speed`). Two paths' rounds pair only where it agrees.
    #[serde(default)]
    pub machine_speed_us: Option<f64>,
}

#[derive(Clone, Debug, Serialize, serde::Deserialize, schemars::JsonSchema)]
pub struct RoundPasses {
    #[schemars(schema_with = "super::schema_parts::dir")]
    pub dir: &'static str,
    pub rx_passes_per_packet: f64,
    pub softirqs_per_packet: f64,
}

/// A ratio of untraced p50s between two paths, per round and summarised.
#[derive(Clone, Debug, Serialize, schemars::JsonSchema)]
pub struct RoundRatio {
    pub name: String,
    pub per_round: Vec<f64>,
    pub spread: Spread,
    /// A round of either side was marked a mode change.
    pub mode_change: bool,
}

/// `a/b` untraced p50 per round where both were measured.
pub fn ratio(reports: &[DriverReport], a: &str, b: &str) -> Option<RoundRatio> {
    let find = |d: &str| reports.iter().find(|r| r.driver == d);
    let (ra, rb) = (find(a)?, find(b)?);
    let per_round: Vec<f64> = ra
        .round_detail
        .iter()
        .zip(&rb.round_detail)
        .filter_map(|(x, y)| {
            let (x, y) = (x.untraced_p50_us?, y.untraced_p50_us?);
            (y > 0.0).then(|| x / y)
        })
        .collect();
    if per_round.is_empty() {
        return None;
    }
    let mode_change = ra
        .round_detail
        .iter()
        .chain(&rb.round_detail)
        .any(|r| r.mode_change);
    Some(RoundRatio {
        name: format!("{a}/{b} p50"),
        spread: Spread::of(per_round.clone()),
        per_round,
        mode_change,
    })
}

/// Ratios between neighbours in the order measured.
pub fn neighbour_ratios(reports: &[DriverReport]) -> Vec<RoundRatio> {
    reports
        .windows(2)
        .filter_map(|w| ratio(reports, &w[1].driver, &w[0].driver))
        .collect()
}
