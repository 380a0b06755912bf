//! Latency metrics of generation: inter-token latency (ITL) and time to first token (TTFT),
//! plus KV-cache waste. All percentiles use the nearest-rank rule of [`crate::stats`].

use serde::{Deserialize, Serialize};

use crate::stats::{median, percentile_sorted, sorted, std_dev};

/// Inter-token latency: the time between consecutive generated tokens of one sequence
/// ("The Tail at Scale": the median hides the jitter users feel; report the tail).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ItlMetrics {
    pub samples: usize,
    pub median_ms: f64,
    /// Sample standard deviation: the jitter.
    pub std_dev_ms: f64,
    pub p99_ms: f64,
    pub p999_ms: f64,
}

impl ItlMetrics {
    /// `None` when there are no measurements.
    pub fn from_measurements(itl_ms: &[f64]) -> Option<ItlMetrics> {
        let s = sorted(itl_ms);
        Some(ItlMetrics {
            samples: s.len(),
            median_ms: median(&s)?,
            std_dev_ms: std_dev(&s),
            p99_ms: percentile_sorted(&s, 99.0)?,
            p999_ms: percentile_sorted(&s, 99.9)?,
        })
    }
}

/// Time to first token over many requests.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct TtftMetrics {
    pub samples: usize,
    pub p50_ms: f64,
    pub p95_ms: f64,
    pub p99_ms: f64,
    pub p999_ms: f64,
}

impl TtftMetrics {
    /// `None` when there are no measurements.
    pub fn from_measurements(ttft_ms: &[f64]) -> Option<TtftMetrics> {
        let s = sorted(ttft_ms);
        Some(TtftMetrics {
            samples: s.len(),
            p50_ms: percentile_sorted(&s, 50.0)?,
            p95_ms: percentile_sorted(&s, 95.0)?,
            p99_ms: percentile_sorted(&s, 99.0)?,
            p999_ms: percentile_sorted(&s, 99.9)?,
        })
    }
}

/// KV-cache occupancy: bytes reserved versus bytes holding live positions.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct KvCacheMetrics {
    pub allocated_bytes: u64,
    pub used_bytes: u64,
}

impl KvCacheMetrics {
    /// Share of the allocation that holds nothing, in percent (0 when nothing is allocated).
    pub fn waste_pct(&self) -> f64 {
        if self.allocated_bytes == 0 {
            return 0.0;
        }
        self.allocated_bytes.saturating_sub(self.used_bytes) as f64 / self.allocated_bytes as f64
            * 100.0
    }
}

/// Splits per-token arrival times (ms since the request started, in order) into TTFT (the
/// first) and the inter-token gaps.
pub fn split_arrivals(arrivals_ms: &[f64]) -> Option<(f64, Vec<f64>)> {
    let (&first, _) = arrivals_ms.split_first()?;
    Some((first, arrivals_ms.windows(2).map(|w| w[1] - w[0]).collect()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn itl_reports_median_jitter_and_nearest_rank_tails() {
        // 1..=100 ms: median 50.5, p99 = rank 99, p99.9 = rank ⌈99.9⌉ = 100.
        let itl: Vec<f64> = (1..=100).rev().map(f64::from).collect();
        let m = ItlMetrics::from_measurements(&itl).expect("non-empty");
        assert_eq!(m.samples, 100);
        assert_eq!(m.median_ms, 50.5);
        assert_eq!(m.p99_ms, 99.0);
        assert_eq!(m.p999_ms, 100.0);
        // Sample sd of 1..=100 is √(100·101/12) = 29.011…
        assert!((m.std_dev_ms - (100.0f64 * 101.0 / 12.0).sqrt()).abs() < 1e-9);
        assert_eq!(ItlMetrics::from_measurements(&[]), None);
    }

    #[test]
    fn ttft_percentiles_pick_observed_values() {
        let ttft = [12.0, 10.0, 11.0, 50.0];
        let m = TtftMetrics::from_measurements(&ttft).expect("non-empty");
        // n = 4: p50 → rank 2, p95 → rank ⌈3.8⌉ = 4.
        assert_eq!(
            (m.p50_ms, m.p95_ms, m.p99_ms, m.p999_ms),
            (11.0, 50.0, 50.0, 50.0)
        );
    }

    #[test]
    fn kv_waste_is_the_unused_share() {
        let kv = KvCacheMetrics {
            allocated_bytes: 1000,
            used_bytes: 750,
        };
        assert_eq!(kv.waste_pct(), 25.0);
        assert_eq!(KvCacheMetrics::default().waste_pct(), 0.0);
    }

    #[test]
    fn arrivals_split_into_ttft_and_gaps() {
        let (ttft, gaps) = split_arrivals(&[100.0, 110.0, 125.0]).expect("non-empty");
        assert_eq!(ttft, 100.0);
        assert_eq!(gaps, vec![10.0, 15.0]);
        assert_eq!(split_arrivals(&[]), None);
    }
}
