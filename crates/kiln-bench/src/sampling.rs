//! Dynamic sampling: keep measuring until the coefficient of variation of the latest
//! samples is low enough (Hoefler & Belli's advice against fixed iteration counts), within
//! a minimum and a maximum number of samples.

use serde::{Deserialize, Serialize};

use crate::stats::cv;

/// When to stop sampling.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct StopRule {
    /// Never stop before this many samples.
    pub min_samples: usize,
    /// Always stop at this many samples (the failsafe).
    pub max_samples: usize,
    /// Stable when the CV of the window is below this (e.g. 0.05 = 5%).
    pub cv_threshold: f64,
    /// The CV is computed over the last `cv_window` samples.
    pub cv_window: usize,
    /// Consecutive stable checks needed to stop.
    pub stable_checks: usize,
}

impl Default for StopRule {
    /// The defaults for per-token latencies: 100..=10 000 samples, CV < 5% over the
    /// last 50, three checks in a row.
    fn default() -> Self {
        StopRule {
            min_samples: 100,
            max_samples: 10_000,
            cv_threshold: 0.05,
            cv_window: 50,
            stable_checks: 3,
        }
    }
}

impl StopRule {
    /// A rule for whole-run repetitions (each a long measurement): at least `min`, at most
    /// `max`, stop once the CV of all repetitions so far is below `cv_threshold`.
    pub fn repetitions(min: usize, max: usize, cv_threshold: f64) -> StopRule {
        StopRule {
            min_samples: min.max(2),
            max_samples: max.max(min.max(2)),
            cv_threshold,
            cv_window: max.max(2),
            stable_checks: 1,
        }
    }
}

/// Why sampling stopped.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "reason", rename_all = "snake_case")]
pub enum Stop {
    /// The CV stayed below the threshold for the required checks.
    Stable { cv: f64 },
    /// The maximum was reached first.
    MaxSamples { cv: f64 },
}

impl Stop {
    /// The CV of the window when sampling stopped.
    pub fn cv(&self) -> f64 {
        match *self {
            Stop::Stable { cv } | Stop::MaxSamples { cv } => cv,
        }
    }
}

/// Decides, after each new sample, whether to take another.
#[derive(Clone, Debug)]
pub struct DynamicSampler {
    rule: StopRule,
    streak: usize,
    stop: Option<Stop>,
}

impl DynamicSampler {
    pub fn new(rule: StopRule) -> DynamicSampler {
        DynamicSampler {
            rule,
            streak: 0,
            stop: None,
        }
    }

    pub fn rule(&self) -> &StopRule {
        &self.rule
    }

    /// The CV of the last `cv_window` samples.
    pub fn window_cv(&self, samples: &[f64]) -> f64 {
        let start = samples.len().saturating_sub(self.rule.cv_window.max(2));
        cv(&samples[start..])
    }

    /// Call after each new sample with all samples so far: `true` while more are needed.
    /// Once it returns `false`, [`DynamicSampler::stop`] says why.
    pub fn should_continue(&mut self, samples: &[f64]) -> bool {
        let n = samples.len();
        if n < self.rule.min_samples {
            return true;
        }
        let cv = self.window_cv(samples);
        if cv < self.rule.cv_threshold {
            self.streak += 1;
            if self.streak >= self.rule.stable_checks.max(1) {
                self.stop = Some(Stop::Stable { cv });
                return false;
            }
        } else {
            self.streak = 0;
        }
        if n >= self.rule.max_samples {
            self.stop = Some(Stop::MaxSamples { cv });
            return false;
        }
        true
    }

    /// Why sampling stopped, once [`DynamicSampler::should_continue`] returned `false`.
    pub fn stop(&self) -> Option<Stop> {
        self.stop
    }
}

/// Samples and the reason sampling ended.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Sampled {
    pub samples: Vec<f64>,
    pub stop: Stop,
}

/// Calls `measure` until `rule` says stop, and returns every sample.
pub fn sample_until_stable<E>(
    rule: StopRule,
    mut measure: impl FnMut(usize) -> Result<f64, E>,
) -> Result<Sampled, E> {
    let mut sampler = DynamicSampler::new(rule);
    let mut samples = Vec::new();
    loop {
        samples.push(measure(samples.len())?);
        if !sampler.should_continue(&samples) {
            let stop = sampler.stop().unwrap_or(Stop::MaxSamples {
                cv: sampler.window_cv(&samples),
            });
            return Ok(Sampled { samples, stop });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(rule: StopRule, source: impl Fn(usize) -> f64) -> Sampled {
        sample_until_stable::<()>(rule, |i| Ok(source(i))).expect("infallible")
    }

    #[test]
    fn cv_stop_halts_once_samples_are_stable() {
        // Alternating 99/101: CV of any window ≈ 0.01, below 5%.
        let rule = StopRule {
            min_samples: 10,
            max_samples: 1000,
            cv_threshold: 0.05,
            cv_window: 5,
            stable_checks: 3,
        };
        let out = run(rule, |i| if i % 2 == 0 { 99.0 } else { 101.0 });
        // Checks start at sample 10; three stable checks in a row → stops at 12.
        assert_eq!(out.samples.len(), 12);
        assert!(matches!(out.stop, Stop::Stable { cv } if cv < 0.05));
    }

    #[test]
    fn cv_stop_waits_for_a_noisy_start_to_settle() {
        let rule = StopRule {
            min_samples: 4,
            max_samples: 1000,
            cv_threshold: 0.05,
            cv_window: 5,
            stable_checks: 2,
        };
        // Wild for 20 samples (10 vs 100), then flat at 50: the window must hold only flat
        // samples before the CV drops, so the earliest stop is sample 20 + 5 + 1.
        let out = run(rule, |i| {
            if i < 20 {
                if i % 2 == 0 { 10.0 } else { 100.0 }
            } else {
                50.0
            }
        });
        assert_eq!(out.samples.len(), 26);
        assert_eq!(out.stop, Stop::Stable { cv: 0.0 });
    }

    #[test]
    fn cv_stop_gives_up_at_the_maximum() {
        let rule = StopRule {
            min_samples: 3,
            max_samples: 30,
            cv_threshold: 0.05,
            cv_window: 10,
            stable_checks: 1,
        };
        let out = run(rule, |i| if i % 2 == 0 { 1.0 } else { 3.0 });
        assert_eq!(out.samples.len(), 30);
        assert!(matches!(out.stop, Stop::MaxSamples { cv } if cv > 0.4));
    }

    #[test]
    fn cv_stop_never_stops_before_the_minimum() {
        let out = run(StopRule::repetitions(5, 9, 0.5), |_| 7.0);
        assert_eq!(out.samples.len(), 5);
        assert!(matches!(out.stop, Stop::Stable { .. }));
    }

    #[test]
    fn measurement_errors_end_sampling() {
        let r = sample_until_stable(
            StopRule::default(),
            |i| if i < 3 { Ok(1.0) } else { Err(i) },
        );
        assert_eq!(r, Err(3));
    }
}
