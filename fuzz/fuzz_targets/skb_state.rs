//! The ring-buffer decoder: a record of any length and content, read the way
//! `Tracer::drain_samples` reads it, then turned into a printed timeline.
#![no_main]

use libfuzzer_sys::fuzz_target;
use netpath_common::SkbState;

fuzz_target!(|data: &[u8]| {
    // Records shorter than the struct are dropped by the decoder; longer ones are read from
    // their start.
    if data.len() < std::mem::size_of::<SkbState>() {
        return;
    }
    // SAFETY: as in drain_samples: any bit pattern is a valid SkbState (integers only).
    let s = unsafe { std::ptr::read_unaligned(data.as_ptr() as *const SkbState) };
    let t = netpath::report::timeline(&s, &[]);
    let _ = serde_json::to_string(&t);
});
