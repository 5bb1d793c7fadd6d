//! Log-linear histogram buckets shared by the kernel (which counts) and userspace (which reads).
//!
//! Values below 16 ns get a bucket each; above, each power of two is split into 16 linear
//! sub-buckets, so a bucket is at most 1/16 of its lower bound wide and its midpoint is within
//! ±3.2% of any value in it: percentiles come out within the ±5% the reports promise.
//! Values at or above 2^37 ns (137 s) land in the last bucket; sums stay exact.

pub const SUB_BITS: u32 = 4;
pub const SUB: u64 = 1 << SUB_BITS;
/// Highest power of two with its own buckets.
pub const MAX_EXP: u32 = 36;
pub const NBUCKETS: usize = (SUB + (MAX_EXP - SUB_BITS + 1) as u64 * SUB) as usize;
/// Storage per histogram: a power of two above `NBUCKETS`, so the kernel side can bound an
/// index with a mask the verifier follows (`b & (HIST_SLOTS - 1)`), not a compare the compiler
/// may apply to a different register copy.
pub const HIST_SLOTS: usize = 1024;
const _: () = assert!(NBUCKETS <= HIST_SLOTS && HIST_SLOTS.is_power_of_two());

/// Index of the highest set bit, for `v > 0`. A branchy binary search: the verifier needs no
/// loop and there is no count-leading-zeros instruction in BPF.
#[inline(always)]
pub fn log2(mut v: u64) -> u32 {
    let mut r = 0;
    // One halving step: if the top half of the remaining width is set, keep only it.
    macro_rules! step {
        ($($bits:literal)*) => {$(
            if v >= 1 << $bits {
                v >>= $bits;
                r += $bits;
            }
        )*};
    }
    step!(32 16 8 4 2 1);
    r
}

#[inline(always)]
pub fn bucket(v: u64) -> u32 {
    if v < SUB {
        return v as u32;
    }
    let e = log2(v);
    if e > MAX_EXP {
        return NBUCKETS as u32 - 1;
    }
    let m = ((v >> (e - SUB_BITS)) - SUB) as u32;
    SUB as u32 + (e - SUB_BITS) * SUB as u32 + m
}

/// `[low, high)` of bucket `b`.
pub fn bounds(b: u32) -> (u64, u64) {
    if (b as u64) < SUB {
        return (b as u64, b as u64 + 1);
    }
    let e = (b - SUB as u32) / SUB as u32 + SUB_BITS;
    let m = ((b - SUB as u32) % SUB as u32) as u64;
    let shift = e - SUB_BITS;
    ((SUB + m) << shift, (SUB + m + 1) << shift)
}

/// Representative value of bucket `b` (midpoint).
pub fn midpoint(b: u32) -> u64 {
    let (lo, hi) = bounds(b);
    lo + (hi - 1 - lo) / 2
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_bound_values_within_five_percent() {
        let mut v = 1u64;
        while v < 1 << 37 {
            for x in [v, v + v / 3, v * 2 - 1] {
                let b = bucket(x);
                let (lo, hi) = bounds(b);
                assert!(lo <= x && x < hi, "{x} not in bucket {b} [{lo},{hi})");
                let mid = midpoint(b) as f64;
                assert!(
                    (mid - x as f64).abs() <= 0.05 * x as f64 + 1.0,
                    "{x} vs {mid}"
                );
            }
            v *= 2;
        }
        assert_eq!(bucket(u64::MAX), NBUCKETS as u32 - 1);
        assert_eq!(bucket(1 << 37), NBUCKETS as u32 - 1);
        assert!(bucket((1 << 37) - 1) < NBUCKETS as u32);
    }

    #[test]
    fn log2_matches_leading_zeros() {
        for s in 0..64 {
            for v in [1u64 << s, (1u64 << s) | 1, ((1u128 << (s + 1)) - 1) as u64] {
                assert_eq!(log2(v), 63 - v.leading_zeros(), "{v}");
            }
        }
    }
}
