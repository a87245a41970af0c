//! The one definition of a median and of a percentile that every table and chart of the lab uses.

/// The median of `v`: the middle value, or for an even count the mean of the two middle values.
/// `None` for an empty slice. NaNs sort last (they never come from a measurement).
pub fn median(v: &[f64]) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    let n = s.len();
    Some(if n % 2 == 1 { s[n / 2] } else { (s[n / 2 - 1] + s[n / 2]) / 2.0 })
}

/// The `q`-quantile (0.0..=1.0) of an ascending slice: the value at index round((n-1)·q), so that
/// q = 0.5 of an odd count is the median and q = 1.0 the maximum. `None` for an empty slice.
pub fn quantile(sorted: &[f64], q: f64) -> Option<f64> {
    sorted.get(((sorted.len().checked_sub(1)?) as f64 * q.clamp(0.0, 1.0)).round() as usize).copied()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_odd_even_empty() {
        assert_eq!(median(&[]), None);
        assert_eq!(median(&[3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(&[4.0, 1.0, 3.0, 2.0]), Some(2.5));
    }

    #[test]
    fn quantiles() {
        let v: Vec<f64> = (0..=100).map(f64::from).collect();
        assert_eq!(quantile(&v, 0.5), Some(50.0));
        assert_eq!(quantile(&v, 0.99), Some(99.0));
        assert_eq!(quantile(&v, 1.0), Some(100.0));
        assert_eq!(quantile(&v, 0.0), Some(0.0));
        assert_eq!(quantile(&[], 0.5), None);
    }
}
