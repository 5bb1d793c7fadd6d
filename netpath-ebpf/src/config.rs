//! The one load-time global: `CONFIG` (`netpath_common::LoadConfig`), set by the loader with one
//! `override_global` before load. Never hard-coded: struct offsets in it come from BTF.
use netpath_common::LoadConfig;

#[unsafe(no_mangle)]
pub static CONFIG: LoadConfig = LoadConfig::DEFAULT;

/// A volatile read of one field of `CONFIG` (only `conf!` calls it, with a field's address).
#[inline(always)]
pub fn read<T: Copy>(field: *const T) -> T {
    // SAFETY: `field` points into the `CONFIG` static, which lives for the program's run.
    unsafe { core::ptr::read_volatile(field) }
}

/// Reads one field of `CONFIG`, e.g. `conf!(offsets.skb_dev)`. Volatile: the compiler must not
/// fold the compiled-in default into the program, since the loader replaces it.
macro_rules! conf {
    ($($field:ident).+) => {
        $crate::config::read(core::ptr::addr_of!($crate::config::CONFIG.$($field).+))
    };
}
pub(crate) use conf;
