//! One offload flag of a link (GRO, TSO, GSO), read and set through the kernel's ethtool
//! interface on a socket of the calling thread's network namespace.
//!
//! The `ethtool` crate (rust-netlink) reads features over ethtool netlink but cannot set them
//! (0.3 has no FEATURES_SET), so both directions use the `SIOCETHTOOL` commands that
//! `ethtool -K` used before netlink: `ETHTOOL_[GS]GRO`, `[GS]TSO`, `[GS]GSO`. The kernel maps
//! each to the same feature bit the netlink request sets (`ethtool_set_one_feature`) and runs
//! the driver's `ndo_set_features`: for veth, GRO on is what gives it NAPI.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

use anyhow::{Context, Result, bail};

/// `SIOCETHTOOL` (linux/sockios.h).
const SIOCETHTOOL: libc::c_ulong = 0x8946;

/// An offload flag with a legacy get/set command pair (linux/ethtool.h).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Offload {
    Gro,
    Tso,
    Gso,
}

impl Offload {
    fn cmds(self) -> (u32, u32) {
        match self {
            Offload::Tso => (0x1e, 0x1f),
            Offload::Gso => (0x23, 0x24),
            Offload::Gro => (0x2b, 0x2c),
        }
    }

    /// The feature's name as `ethtool -k` prints it.
    pub fn feature(self) -> &'static str {
        match self {
            Offload::Gro => "generic-receive-offload",
            Offload::Tso => "tcp-segmentation-offload",
            Offload::Gso => "generic-segmentation-offload",
        }
    }
}

/// `struct ethtool_value`.
#[repr(C)]
struct EthtoolValue {
    cmd: u32,
    data: u32,
}

/// `struct ifreq` with `ifr_data` (padded to the kernel's 40 bytes).
#[repr(C)]
struct IfreqData {
    name: [libc::c_char; libc::IFNAMSIZ],
    data: *mut EthtoolValue,
    _pad: [u8; 16],
}

fn ioctl(dev: &str, cmd: u32, data: u32) -> Result<u32> {
    if dev.len() >= libc::IFNAMSIZ {
        bail!("interface name {dev} is too long");
    }
    // SAFETY: socket(2) has no memory arguments; the fd is owned from here on.
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error()).context("socket for SIOCETHTOOL");
    }
    // SAFETY: fd was just returned by socket(2) and nothing else owns it.
    let sock = unsafe { OwnedFd::from_raw_fd(fd) };
    let mut val = EthtoolValue { cmd, data };
    let mut ifr = IfreqData {
        name: [0; libc::IFNAMSIZ],
        data: &mut val,
        _pad: [0; 16],
    };
    for (d, s) in ifr.name.iter_mut().zip(dev.bytes()) {
        *d = s as libc::c_char;
    }
    // SAFETY: ifr is a valid ifreq whose ifr_data points at `val`, both alive for the call.
    let r = unsafe { libc::ioctl(sock.as_raw_fd(), SIOCETHTOOL, &mut ifr) };
    if r < 0 {
        return Err(std::io::Error::last_os_error())
            .with_context(|| format!("SIOCETHTOOL command {cmd:#x} on {dev}"));
    }
    Ok(val.data)
}

/// Whether `flag` is on for `dev` (in the calling thread's namespace).
pub fn get(dev: &str, flag: Offload) -> Result<bool> {
    Ok(ioctl(dev, flag.cmds().0, 0)? != 0)
}

/// Turns `flag` on or off for `dev`; the caller reads it back with [`get`] (the kernel may
/// keep a feature the device cannot change).
pub fn set(dev: &str, flag: Offload, on: bool) -> Result<()> {
    ioctl(dev, flag.cmds().1, u32::from(on)).map(|_| ())
}
