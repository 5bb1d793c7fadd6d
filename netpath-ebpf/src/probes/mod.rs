//! One module per hook family, named after the kernel hooks they use.
pub mod delay;
pub mod doctor;
pub mod floor;
pub mod functions;
pub mod irq;
pub mod net;
pub mod netfilter;
pub mod nftchain;
pub mod sched;
pub mod skb;
pub mod sock;
pub mod syscalls;
pub mod tc;
