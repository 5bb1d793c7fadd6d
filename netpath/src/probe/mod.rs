//! The eBPF side seen from userspace: what this kernel allows (`doctor`), the backend chosen
//! and its probe table (`backend`), and the loaded programs with their maps (`tracer`).

pub mod backend;
pub mod doctor;
pub mod tracer;
