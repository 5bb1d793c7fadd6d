//! Measuring paths against each other: interleaved rounds (`interleave`, with the run options),
//! compare's runs over drivers (`compare`), its answer and the claims it judges (`answer`,
//! `claims`), and the A/B of two sides with noise-aware
//! deltas (`ab`, `delta`) that `diff` and `tune` read.

pub mod ab;
pub mod answer;
pub mod claims;
pub mod compare;
pub mod delta;
pub mod diff;
pub mod interleave;
pub mod pair;
pub mod pair_parts;
