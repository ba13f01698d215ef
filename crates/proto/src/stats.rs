//! The two summary figures the runtime's and the simulator's reports and benchmarks share: a
//! nearest-rank percentile of latency samples, and the median of several runs' figures.
//! They live here, in the crate both drivers build on, so that `net` and `sim` print one
//! median.

/// The nearest-rank percentile (`centi`: hundredths of a percent, 9_900 is p99) of sorted
/// nanoseconds, in µs; 0 for no samples.
pub fn percentile(sorted: &[u64], centi: usize) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = (sorted.len() * centi)
        .div_ceil(10_000)
        .clamp(1, sorted.len());
    sorted[rank - 1] as f64 / 1_000.0
}

/// The median of several runs' figures: the middle one, or the mean of the middle two for an
/// even count; NaN for none.
pub fn median(values: &[f64]) -> f64 {
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_and_the_middle_two() {
        let sorted: Vec<u64> = (1..=100).map(|us| us * 1_000).collect();
        assert_eq!(percentile(&sorted, 5_000), 50.0);
        assert_eq!(percentile(&sorted, 9_900), 99.0);
        assert_eq!(percentile(&sorted, 10_000), 100.0);
        assert_eq!(percentile(&sorted[..1], 100), 1.0);
        assert_eq!(percentile(&[], 5_000), 0.0);
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 3.0, 2.0]), 2.5);
        assert_eq!(median(&[5.0]), 5.0);
        assert!(median(&[]).is_nan());
    }
}
