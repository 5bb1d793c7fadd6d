//! The median every figure over rounds or repeats uses (distributions of single runs come from
//! `hdrhistogram` or the kernel's histograms instead).

/// The median of the finite values (the mean of the middle two for an even count); `None`
/// without any.
pub fn median(values: impl IntoIterator<Item = f64>) -> Option<f64> {
    let mut v: Vec<f64> = values.into_iter().filter(|x| x.is_finite()).collect();
    v.sort_by(f64::total_cmp);
    let n = v.len();
    match n {
        0 => None,
        _ if n % 2 == 1 => Some(v[n / 2]),
        _ => Some((v[n / 2 - 1] + v[n / 2]) / 2.0),
    }
}

#[cfg(test)]
mod tests {
    use super::median;

    #[test]
    fn middle_value_mean_of_the_middle_two_and_none_when_empty() {
        assert_eq!(median([3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median([4.0, 1.0, 3.0, 2.0]), Some(2.5));
        assert_eq!(median([f64::NAN, 5.0, f64::INFINITY]), Some(5.0));
        assert_eq!(median([]), None);
    }
}
