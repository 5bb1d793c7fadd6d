//! The eBPF side seen from userspace: what this kernel allows (`doctor`), the backend chosen
//! and its probe table (`backend`), and the loaded programs with their maps (`tracer`).

pub mod backend;
pub mod doctor;
pub mod tracer;

/// Journeys `serve` follows by default: one in this many. A busy container's journeys then
/// cost the kernel and the exporter little, and a hop's p50 from a minute of a few hundred
/// journeys a second still rests on thousands of samples. Here, below `serve` and `bench`,
/// since the bench records the rate it ran serve at.
pub const DEFAULT_SAMPLE: u32 = 64;

/// Set (to anything) in a process's environment, its `Tracer::attach` attaches one empty
/// program to each of its hooks instead of its own: bench's serve-left-on lower bound, what
/// any program on those hooks costs. A measurement aid, not a user option.
pub const EMPTY_PROGRAMS_ENV: &str = "NETPATH_EMPTY_PROGRAMS";
