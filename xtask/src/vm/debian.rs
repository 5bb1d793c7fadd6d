//! Debian's kernel packages as the VM runner names them: the flavour it boots and the order
//! of their versions.

/// The kernel flavour booted in the VM: Debian's cloud build (virtio and serial built in,
/// no hardware drivers), the one that boots fastest under TCG.
pub const FLAVOUR: &str = "cloud-amd64";

/// `6.1.0-57-cloud-amd64` → [6, 1, 0, 57]: numbers compare as numbers.
pub fn version_key(v: &str) -> Vec<u64> {
    v.split(|c: char| !c.is_ascii_digit())
        .filter_map(|p| p.parse().ok())
        .collect()
}
