//! The run's options that every layer names: how a receiver waits (`--wait`), where the
//! client and server run (`--cpus`) and that placement resolved (`Pin`). They sit beside
//! `choice.rs`, below `sys/` and the harness: the machine's record (`sys::machine`) and the
//! records say them, the harness acts on them (`harness::wait`, `sys::runmode`).

crate::choice::choice! {
    /// How a receiving harness thread waits for its data.
    #[derive(Default)]
    pub enum WaitMode {
        /// Blocking receives: what an application sees, the scheduler's wakeup included.
        Block => "block",
        /// Non-blocking receives in a tight loop: the data path without the scheduler.
        #[default]
        Spin => "spin",
        /// `SO_BUSY_POLL` on the harness sockets: the kernel polls the device's NAPI in the
        /// receive (blocking receives where the device has no NAPI).
        BusyPoll => "busy-poll",
    }
}

/// Where the client and server threads run, as asked on the command line.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Cpus {
    /// Both on one CPU.
    Same,
    /// On two different CPUs.
    Split,
    /// Wherever the scheduler puts them.
    #[default]
    Auto,
    /// Both on this CPU.
    One(usize),
    /// Client on the first CPU, server on the second.
    Pair(usize, usize),
}

impl std::str::FromStr for Cpus {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Cpus, String> {
        match s {
            "same" => Ok(Cpus::Same),
            "split" => Ok(Cpus::Split),
            "auto" => Ok(Cpus::Auto),
            _ => {
                let bad = || format!("unknown placement {s:?}: use same, split, auto, N or N,M");
                let n = |x: &str| x.trim().parse::<usize>().map_err(|_| bad());
                match s.split_once(',') {
                    Some((a, b)) => Ok(Cpus::Pair(n(a)?, n(b)?)),
                    None => Ok(Cpus::One(n(s)?)),
                }
            }
        }
    }
}

impl std::fmt::Display for Cpus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Cpus::Same => f.write_str("same"),
            Cpus::Split => f.write_str("split"),
            Cpus::Auto => f.write_str("auto"),
            Cpus::One(a) => write!(f, "{a}"),
            Cpus::Pair(a, b) => write!(f, "{a},{b}"),
        }
    }
}

impl serde::Serialize for Cpus {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

/// Read back as `--cpus` takes it (a saved run, `render::saved::Saved`).
impl<'de> serde::Deserialize<'de> for Cpus {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Cpus, D::Error> {
        let s = <std::borrow::Cow<'de, str>>::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

/// Serialized as `--cpus` takes it.
impl schemars::JsonSchema for Cpus {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "Cpus".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "description": "`--cpus`: same, split, auto, one CPU or a client,server pair.",
            "type": "string",
            "pattern": "^(same|split|auto|[0-9]+|[0-9]+,[0-9]+)$"
        })
    }
}

/// A placement resolved against this machine: the client's and the server's CPU, or none.
#[derive(
    Clone,
    Copy,
    Debug,
    Default,
    PartialEq,
    Eq,
    Hash,
    serde::Serialize,
    serde::Deserialize,
    schemars::JsonSchema,
)]
pub struct Pin {
    pub client: Option<usize>,
    pub server: Option<usize>,
}

impl Pin {
    /// Client and server pinned to one CPU.
    pub fn same_cpu(&self) -> bool {
        self.client.is_some() && self.client == self.server
    }
}
