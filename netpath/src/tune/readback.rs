//! A setting as the kernel reports it, read back to prove a knob took effect.

use serde::Serialize;

/// One setting as the kernel reports it for one device (or table).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub struct ReadBack {
    pub netns: String,
    pub device: String,
    /// What was read: `rps_cpus rx-0`, `generic-receive-offload`, `mtu`, `root qdisc`, …
    pub what: String,
    pub value: String,
}

impl ReadBack {
    pub fn line(&self) -> String {
        format!(
            "{} {}@{} = {}",
            self.what, self.device, self.netns, self.value
        )
    }
}
