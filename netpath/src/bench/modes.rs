//! Request/response per wait mode: untraced, traced, attached-but-not-following (probes on,
//! no thread of this pair followed: what netpath costs traffic it does not trace), and one
//! empty program on each of those hooks instead (what any program there costs), in an order
//! rotated per round so drift spreads over all four.

use super::*;

/// The order of a round's `N` runs (0..N as the caller numbers them), rotated by `round` so
/// that each run takes every place in turn.
pub(super) fn rotated<const N: usize>(round: usize) -> [u8; N] {
    std::array::from_fn(|i| ((i + N - round % N) % N) as u8)
}

/// One wait mode's runs and their ratios.
#[derive(Clone, Debug, Default, Serialize, schemars::JsonSchema)]
pub struct ModeLatency {
    pub wait: WaitMode,
    #[serde(skip)]
    pub cpus: Cpus,
    /// CPU placement, as given to `--cpus`.
    pub placement: String,
    pub untraced: Rounds<Rtt>,
    pub traced: Rounds<Rtt>,
    pub attached: Rounds<Rtt>,
    /// One empty program on each hook `attached` uses, instead of netpath's: the hooks'
    /// dispatch alone, the least any program there would cost.
    pub empty: Rounds<Rtt>,
    /// Each run against the untraced run of its own round.
    pub traced_vs_untraced: Rounds<Ratios>,
    pub attached_vs_untraced: Rounds<Ratios>,
    pub empty_vs_untraced: Rounds<Ratios>,
    /// Hop events the kernel recorded per traced round trip.
    pub hop_events_per_rtt: Rounds<f64>,
}

impl ModeLatency {
    pub fn new(wait: WaitMode, cpus: Cpus) -> ModeLatency {
        ModeLatency {
            wait,
            cpus,
            placement: format!("{cpus:?}").to_lowercase(),
            ..Default::default()
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

    /// One round: the four runs, in an order rotated by `round`.
    pub fn round(
        &mut self,
        tracer: &mut Tracer,
        lab: &NetPath,
        base: &RrConfig,
        round: usize,
    ) -> Result<()> {
        let rr = self.config(base)?;
        let order = rotated::<4>(round);
        let mut got: [Option<Rtt>; 4] = [None; 4];
        for k in order {
            got[k as usize] = Some(match k {
                0 => Rtt::of(&harness::run_rr(lab, &rr, &NoPhases).context("untraced run")?),
                1 => {
                    let (t, ev) = rr_traced(tracer, lab, &rr, false)?;
                    self.hop_events_per_rtt
                        .push(ev as f64 / t.count.max(1) as f64);
                    Rtt::of(&t)
                }
                2 => Rtt::of(&rr_attached(tracer, lab, &rr)?),
                _ => Rtt::of(&rr_empty(tracer, lab, &rr)?),
            });
        }
        self.untraced.push(got[0].unwrap());
        self.traced.push(got[1].unwrap());
        self.attached.push(got[2].unwrap());
        self.empty.push(got[3].unwrap());
        Ok(())
    }

    /// The ratios once all rounds ran.
    pub fn finish(&mut self) {
        self.traced_vs_untraced = self.traced.vs(&self.untraced);
        self.attached_vs_untraced = self.attached.vs(&self.untraced);
        self.empty_vs_untraced = self.empty.vs(&self.untraced);
    }
}

/// A request/response run with the probes attached and no thread followed.
pub fn rr_attached(tracer: &mut Tracer, lab: &NetPath, rr: &RrConfig) -> Result<RrResult> {
    tracer.reset()?;
    // Detached also when attaching failed part-way: the next run starts from none.
    let r = (tracer.attach()).and_then(|()| harness::run_rr(lab, rr, &NoPhases));
    tracer.detach()?;
    r.context("run with probes attached, not followed")
}

/// A request/response run with an empty program on each hook `rr_attached` uses.
fn rr_empty(tracer: &mut Tracer, lab: &NetPath, rr: &RrConfig) -> Result<RrResult> {
    let r = (tracer.attach_empty()).and_then(|()| harness::run_rr(lab, rr, &NoPhases));
    tracer.detach()?;
    r.context("run with empty programs on netpath's hooks")
}

#[cfg(test)]
mod tests {
    use super::rotated;

    #[test]
    fn every_run_takes_every_place() {
        for n in [3usize, 4] {
            let orders: Vec<Vec<u8>> = (0..n)
                .map(|r| match n {
                    3 => rotated::<3>(r).to_vec(),
                    _ => rotated::<4>(r).to_vec(),
                })
                .collect();
            for place in 0..n {
                let mut at: Vec<u8> = orders.iter().map(|o| o[place]).collect();
                at.sort();
                assert_eq!(at, (0..n as u8).collect::<Vec<_>>(), "{orders:?}");
            }
            assert_eq!(orders[0], (0..n as u8).collect::<Vec<_>>());
        }
        // The three-run order the bulk rounds have always used.
        assert_eq!(rotated::<3>(1), [2, 0, 1]);
    }
}
