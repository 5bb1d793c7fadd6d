//! The eBPF side seen from userspace: what this kernel allows (`doctor`), the backend chosen
//! and its probe table (`backend`), and the loaded programs with their maps (`tracer`).

pub mod backend;
pub mod doctor;
pub mod tracer;

/// Set (to anything) in a process's environment, its `Tracer::attach` attaches one empty
/// program to each of its hooks instead of its own: bench's serve-left-on lower bound, what
/// any program on those hooks costs. A measurement aid, not a user option.
pub const EMPTY_PROGRAMS_ENV: &str = "NETPATH_EMPTY_PROGRAMS";
