//! Where a watched device sits relative to a followed container (`serve`): the loader puts it
//! in bits 16..24 of a `DEVS` value, above the `DevKind` in the low 16 bits. It decides where a
//! passively traced journey may start and its direction.

/// Not said (`trace --container`): a journey starts at any point of any watched device.
pub const ANY: u32 = 0;
/// Inside the container's network namespace (its interfaces, its loopback): a transmit here
/// starts a journey out of it.
pub const OWN: u32 = 1;
/// The other end of one of its interfaces (a veth's host end): a transmit here starts a
/// journey into it.
pub const PEER: u32 = 2;
/// Shared by containers (a bridge, a VXLAN device, a macvlan's parent): watched for the
/// points in the middle of a path, but no journey starts here.
pub const MIDDLE: u32 = 3;
/// `DEVS` value = kind | role << SHIFT (| `crate::DEV_WATCHED`).
pub const SHIFT: u32 = 16;
/// The role's bits, once shifted down.
pub const MASK: u32 = 0xff;
