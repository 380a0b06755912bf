//! Descriptive statistics over samples: the percentile rule, mean and sample standard
//! deviation, coefficient of variation, and bootstrap confidence intervals.
//!
//! Percentiles use the **nearest-rank** rule: the `p`-th percentile of
//! `n` sorted samples is the sample at 1-based rank `⌈n·p/100⌉`, clamped to `1..=n`. It
//! always returns an observed value, never an interpolation.

use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha20Rng;
use serde::{Deserialize, Serialize};

/// Sorts a copy of `data` in ascending order; NaNs sort last (total order on `f64`).
pub fn sorted(data: &[f64]) -> Vec<f64> {
    let mut v = data.to_vec();
    v.sort_by(f64::total_cmp);
    v
}

/// The 0-based index the nearest-rank rule picks for the `p`-th percentile of `n` samples:
/// `⌈n·p/100⌉ − 1`, clamped to `0..n`. `None` when `n == 0`.
///
/// ```
/// use kiln_bench::stats::percentile_index;
/// assert_eq!(percentile_index(10, 50.0), Some(4)); // ⌈5⌉ − 1
/// assert_eq!(percentile_index(10, 99.0), Some(9)); // ⌈9.9⌉ − 1
/// assert_eq!(percentile_index(10, 0.0), Some(0));
/// ```
pub fn percentile_index(n: usize, p: f64) -> Option<usize> {
    if n == 0 {
        return None;
    }
    let rank = (n as f64 * p / 100.0).ceil();
    // `as usize` saturates: negative or NaN ranks become 0.
    Some((rank as usize).saturating_sub(1).min(n - 1))
}

/// The `p`-th percentile (`0 ≤ p ≤ 100`) of already sorted samples; `None` when empty.
pub fn percentile_sorted(sorted: &[f64], p: f64) -> Option<f64> {
    percentile_index(sorted.len(), p).map(|i| sorted[i])
}

/// The `p`-th percentile (nearest rank) of unsorted samples; `None` when empty.
pub fn percentile(data: &[f64], p: f64) -> Option<f64> {
    percentile_sorted(&sorted(data), p)
}

/// The median: the middle sample, or the midpoint of the two middle samples when `n` is
/// even. `None` when empty.
pub fn median(data: &[f64]) -> Option<f64> {
    let s = sorted(data);
    let n = s.len();
    match n {
        0 => None,
        _ if n % 2 == 1 => Some(s[n / 2]),
        _ => Some(f64::midpoint(s[n / 2 - 1], s[n / 2])),
    }
}

/// Arithmetic mean; `None` when empty.
pub fn mean(data: &[f64]) -> Option<f64> {
    (!data.is_empty()).then(|| data.iter().sum::<f64>() / data.len() as f64)
}

/// Sample variance (divisor `n − 1`); 0 for fewer than two samples.
pub fn variance(data: &[f64]) -> f64 {
    if data.len() < 2 {
        return 0.0;
    }
    let m = data.iter().sum::<f64>() / data.len() as f64;
    data.iter().map(|x| (x - m) * (x - m)).sum::<f64>() / (data.len() - 1) as f64
}

/// Sample standard deviation (divisor `n − 1`); 0 for fewer than two samples.
pub fn std_dev(data: &[f64]) -> f64 {
    variance(data).sqrt()
}

/// Coefficient of variation `sd / |mean|`; infinite for fewer than two samples or a mean
/// of (nearly) zero, so it never reads as "stable" by accident.
pub fn cv(data: &[f64]) -> f64 {
    if data.len() < 2 {
        return f64::INFINITY;
    }
    let m = data.iter().sum::<f64>() / data.len() as f64;
    if m.abs() < 1e-12 {
        return f64::INFINITY;
    }
    std_dev(data) / m.abs()
}

/// The statistic a bootstrap resamples.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Statistic {
    Mean,
    Median,
}

impl Statistic {
    fn of(self, sample: &mut [f64]) -> f64 {
        match self {
            Statistic::Mean => sample.iter().sum::<f64>() / sample.len() as f64,
            Statistic::Median => {
                sample.sort_by(f64::total_cmp);
                let n = sample.len();
                if n % 2 == 1 {
                    sample[n / 2]
                } else {
                    f64::midpoint(sample[n / 2 - 1], sample[n / 2])
                }
            }
        }
    }
}

/// A two-sided confidence interval.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Interval {
    pub lower: f64,
    pub upper: f64,
}

impl Interval {
    /// Whether `x` lies within the interval (bounds included).
    pub fn contains(&self, x: f64) -> bool {
        self.lower <= x && x <= self.upper
    }
}

/// How a bootstrap is run.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Bootstrap {
    pub statistic: Statistic,
    /// Coverage, e.g. 0.95.
    pub confidence: f64,
    /// Number of resamples.
    pub resamples: usize,
    /// Seed of the resampling stream (ChaCha20): the same data and seed give the same
    /// interval on every machine.
    pub seed: u64,
}

impl Default for Bootstrap {
    fn default() -> Self {
        Bootstrap {
            statistic: Statistic::Mean,
            confidence: 0.95,
            resamples: 1000,
            seed: 0,
        }
    }
}

impl Bootstrap {
    /// The percentile bootstrap interval of the statistic: resample `data` with
    /// replacement `resamples` times, sort the statistics, and take the values at indices
    /// `⌊R·α/2⌋` and `⌈R·(1−α/2)⌉` (clamped), with `α = 1 − confidence`. `None` when `data`
    /// is empty or `resamples` is 0.
    pub fn interval(&self, data: &[f64]) -> Option<Interval> {
        let (n, r) = (data.len(), self.resamples);
        if n == 0 || r == 0 {
            return None;
        }
        let mut rng = ChaCha20Rng::seed_from_u64(self.seed);
        let mut sample = vec![0.0; n];
        let mut stats = Vec::with_capacity(r);
        for _ in 0..r {
            for s in sample.iter_mut() {
                *s = data[rng.random_range(0..n)];
            }
            stats.push(self.statistic.of(&mut sample));
        }
        stats.sort_by(f64::total_cmp);
        let alpha = (1.0 - self.confidence).clamp(0.0, 1.0);
        let lo = ((r as f64 * alpha / 2.0).floor() as usize).min(r - 1);
        let hi = ((r as f64 * (1.0 - alpha / 2.0)).ceil() as usize).min(r - 1);
        Some(Interval {
            lower: stats[lo],
            upper: stats[hi],
        })
    }
}

/// Mean ± sample standard deviation and the extremes of a set of repetitions.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Spread {
    pub n: usize,
    pub mean: f64,
    pub sd: f64,
    pub min: f64,
    pub max: f64,
    pub median: f64,
}

impl Spread {
    /// `None` when `data` is empty.
    pub fn of(data: &[f64]) -> Option<Spread> {
        let s = sorted(data);
        Some(Spread {
            n: s.len(),
            mean: mean(&s)?,
            sd: std_dev(&s),
            min: *s.first()?,
            max: *s.last()?,
            median: median(&s)?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentile_uses_nearest_rank_on_hand_computed_values() {
        let data: Vec<f64> = (1..=10).map(f64::from).rev().collect(); // unsorted 10..1
        // ⌈10·p/100⌉ is the 1-based rank.
        assert_eq!(percentile(&data, 50.0), Some(5.0));
        assert_eq!(percentile(&data, 90.0), Some(9.0));
        assert_eq!(percentile(&data, 95.0), Some(10.0)); // ⌈9.5⌉ = 10
        assert_eq!(percentile(&data, 99.0), Some(10.0));
        assert_eq!(percentile(&data, 99.9), Some(10.0));
        assert_eq!(percentile(&data, 10.0), Some(1.0));
        assert_eq!(percentile(&data, 11.0), Some(2.0)); // ⌈1.1⌉ = 2
        assert_eq!(percentile(&data, 0.0), Some(1.0)); // rank 0 clamps to the first
        assert_eq!(percentile(&data, 100.0), Some(10.0));
        assert_eq!(percentile(&data, 250.0), Some(10.0));
        assert_eq!(percentile(&[], 50.0), None);
        // 1000 samples: p99.9 is rank 999, p99 rank 990.
        let big: Vec<f64> = (1..=1000).map(f64::from).collect();
        assert_eq!(percentile(&big, 99.9), Some(999.0));
        assert_eq!(percentile(&big, 99.0), Some(990.0));
        // 7 samples: p50 = rank ⌈3.5⌉ = 4, which is the median.
        assert_eq!(
            percentile(&[3.0, 1.0, 2.0, 7.0, 5.0, 4.0, 6.0], 50.0),
            Some(4.0)
        );
    }

    #[test]
    fn median_averages_the_middle_pair_for_even_counts() {
        assert_eq!(median(&[4.0, 1.0, 3.0, 2.0]), Some(2.5));
        assert_eq!(median(&[5.0, 1.0, 3.0]), Some(3.0));
        assert_eq!(median(&[]), None);
    }

    #[test]
    fn spread_uses_the_sample_standard_deviation() {
        // mean 5, squared deviations 9+1+1+9 = 20, / (4−1) → sd = √(20/3).
        let s = Spread::of(&[2.0, 4.0, 6.0, 8.0]).expect("non-empty");
        assert_eq!(s.mean, 5.0);
        assert!((s.sd - (20.0f64 / 3.0).sqrt()).abs() < 1e-12);
        assert_eq!((s.min, s.max, s.median), (2.0, 8.0, 5.0));
        assert_eq!(std_dev(&[3.0]), 0.0);
    }

    #[test]
    fn cv_is_infinite_until_it_can_be_measured() {
        assert_eq!(cv(&[1.0]), f64::INFINITY);
        assert_eq!(cv(&[0.0, 0.0]), f64::INFINITY);
        assert!((cv(&[9.0, 11.0]) - 2f64.sqrt() / 10.0).abs() < 1e-12);
    }

    /// Samples of a known distribution: uniform on [0, 1) from a fixed stream, so the true
    /// mean is 0.5 and the mean's standard error is √(1/12)/√n.
    fn uniform(n: usize, seed: u64) -> Vec<f64> {
        let mut rng = ChaCha20Rng::seed_from_u64(seed);
        (0..n).map(|_| rng.random::<f64>()).collect()
    }

    #[test]
    fn bootstrap_interval_covers_the_true_mean_of_a_known_distribution() {
        let boot = Bootstrap::default();
        let mut covered = 0;
        for seed in 0..40 {
            let data = uniform(200, 1000 + seed);
            let ci = boot.interval(&data).expect("non-empty");
            let m = mean(&data).expect("non-empty");
            assert!(
                ci.contains(m),
                "the interval {ci:?} must contain the sample mean {m}"
            );
            // Half-width ≈ 1.96 · 0.2887 / √200 ≈ 0.040.
            let half = (ci.upper - ci.lower) / 2.0;
            assert!((0.025..0.055).contains(&half), "half-width {half}");
            covered += usize::from(ci.contains(0.5));
        }
        // A 95% interval misses the true mean ~2 times in 40; 34 is far in the tail.
        assert!(
            covered >= 34,
            "covered the true mean only {covered}/40 times"
        );
    }

    #[test]
    fn bootstrap_is_reproducible_from_its_seed() {
        let data = uniform(50, 7);
        let a = Bootstrap::default();
        let b = Bootstrap { seed: 1, ..a };
        assert_eq!(a.interval(&data), a.interval(&data));
        assert_ne!(a.interval(&data), b.interval(&data));
        let med = Bootstrap {
            statistic: Statistic::Median,
            ..a
        };
        let ci = med.interval(&data).expect("non-empty");
        assert!(ci.contains(median(&data).expect("non-empty")));
        assert_eq!(a.interval(&[]), None);
        // A constant sample has a zero-width interval at the constant.
        let flat = a.interval(&[3.0; 10]).expect("non-empty");
        assert_eq!((flat.lower, flat.upper), (3.0, 3.0));
    }
}
