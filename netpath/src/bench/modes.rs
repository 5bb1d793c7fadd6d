//! Request/response per wait mode: untraced, traced, and attached-but-not-following (probes on,
//! no thread of this pair followed: what netpath costs traffic it does not trace), in an order
//! rotated per round so drift spreads over all three.

use super::*;

/// The order of a round's three runs (0, 1, 2 as the caller numbers them), rotated by
/// `round` so that each run goes first, second and last in turn.
pub(super) fn rotated(round: usize) -> [u8; 3] {
    match round % 3 {
        0 => [0, 1, 2],
        1 => [2, 0, 1],
        _ => [1, 2, 0],
    }
}

/// One wait mode's runs and their ratios.
#[derive(Clone, Debug, Serialize, schemars::JsonSchema)]
pub struct ModeLatency {
    pub wait: WaitMode,
    #[serde(skip)]
    pub cpus: Cpus,
    /// CPU placement, as given to `--cpus`.
    pub placement: String,
    pub untraced: Vec<Rtt>,
    pub traced: Vec<Rtt>,
    pub attached: Vec<Rtt>,
    pub untraced_median: Rtt,
    pub traced_median: Rtt,
    pub attached_median: Rtt,
    /// Medians of the per-round ratios.
    pub traced_vs_untraced: Ratios,
    pub attached_vs_untraced: Ratios,
    pub traced_vs_untraced_rounds: Vec<Ratios>,
    pub attached_vs_untraced_rounds: Vec<Ratios>,
    /// Hop events the kernel recorded per traced round trip (median).
    pub hop_events_per_rtt: f64,
    #[serde(skip)]
    hop_events: Vec<f64>,
}

impl ModeLatency {
    pub fn new(wait: WaitMode, cpus: Cpus) -> ModeLatency {
        ModeLatency {
            wait,
            cpus,
            placement: format!("{cpus:?}").to_lowercase(),
            untraced: Vec::new(),
            traced: Vec::new(),
            attached: Vec::new(),
            untraced_median: Rtt::default(),
            traced_median: Rtt::default(),
            attached_median: Rtt::default(),
            traced_vs_untraced: Ratios::default(),
            attached_vs_untraced: Ratios::default(),
            traced_vs_untraced_rounds: Vec::new(),
            attached_vs_untraced_rounds: Vec::new(),
            hop_events_per_rtt: f64::NAN,
            hop_events: Vec::new(),
        }
    }

    /// The configuration of this mode's runs.
    pub fn config(&self, base: &RrConfig) -> Result<RrConfig> {
        Ok(RrConfig {
            wait: self.wait,
            pin: self.cpus.resolve()?,
            ..base.clone()
        })
    }

    /// One round: the three runs, in an order rotated by `round`.
    pub fn round(
        &mut self,
        tracer: &mut Tracer,
        lab: &NetPath,
        base: &RrConfig,
        round: usize,
    ) -> Result<()> {
        let rr = self.config(base)?;
        let order = rotated(round);
        let mut got: [Option<Rtt>; 3] = [None; 3];
        for k in order {
            got[k as usize] = Some(match k {
                0 => Rtt::of(&harness::run_rr(lab, &rr, &NoPhases).context("untraced run")?),
                1 => {
                    let (t, ev) = rr_traced(tracer, lab, &rr, false)?;
                    self.hop_events.push(ev as f64 / t.count.max(1) as f64);
                    Rtt::of(&t)
                }
                _ => Rtt::of(&rr_attached(tracer, lab, &rr)?),
            });
        }
        self.untraced.push(got[0].unwrap());
        self.traced.push(got[1].unwrap());
        self.attached.push(got[2].unwrap());
        Ok(())
    }

    /// Medians and ratios once all rounds ran.
    pub fn finish(&mut self) {
        self.untraced_median = Rtt::median(&self.untraced);
        self.traced_median = Rtt::median(&self.traced);
        self.attached_median = Rtt::median(&self.attached);
        let vs = |a: &[Rtt], b: &[Rtt]| -> Vec<Ratios> {
            a.iter().zip(b).map(|(a, b)| Ratios::of(a, b)).collect()
        };
        self.traced_vs_untraced_rounds = vs(&self.traced, &self.untraced);
        self.attached_vs_untraced_rounds = vs(&self.attached, &self.untraced);
        self.traced_vs_untraced = Ratios::median(&self.traced_vs_untraced_rounds);
        self.attached_vs_untraced = Ratios::median(&self.attached_vs_untraced_rounds);
        self.hop_events_per_rtt = median(self.hop_events.iter().copied());
    }
}

/// A request/response run with the probes attached and no thread followed.
pub fn rr_attached(tracer: &mut Tracer, lab: &NetPath, rr: &RrConfig) -> Result<RrResult> {
    tracer.reset()?;
    tracer.attach()?;
    let r = harness::run_rr(lab, rr, &NoPhases);
    tracer.detach()?;
    r.context("run with probes attached, not followed")
}
