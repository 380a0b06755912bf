//! The sampler chain, in llama.cpp's default order: repetition penalty → top-k → top-p →
//! min-p → temperature → draw. Temperature 0 (or below) is greedy.

use std::collections::VecDeque;

use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha20Rng;

/// Settings of the chain. The defaults are llama.cpp's.
#[derive(Clone, Debug, PartialEq)]
pub struct SamplerConfig {
    /// Divides the logits; `<= 0` means greedy.
    pub temperature: f32,
    /// Keep the `k` most likely tokens (`0` disables).
    pub top_k: usize,
    /// Keep the smallest set whose probability mass reaches `p` (`1.0` disables).
    pub top_p: f32,
    /// Drop tokens whose probability is below `min_p` times the best one's (`0` disables).
    pub min_p: f32,
    /// Divide positive (multiply negative) logits of recently seen tokens (`1.0` disables).
    pub repeat_penalty: f32,
    /// How many recent tokens the penalty looks at.
    pub repeat_last_n: usize,
    /// Seed of the random stream.
    pub seed: u64,
}

impl Default for SamplerConfig {
    fn default() -> Self {
        SamplerConfig {
            temperature: 0.8,
            top_k: 40,
            top_p: 0.95,
            min_p: 0.05,
            repeat_penalty: 1.0,
            repeat_last_n: 64,
            seed: 0,
        }
    }
}

/// A setting out of its range.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum SamplerConfigError {
    #[error("{name} = {value} is out of range: {expected}")]
    OutOfRange {
        name: &'static str,
        value: f32,
        expected: &'static str,
    },
}

impl SamplerConfig {
    /// A greedy configuration.
    pub fn greedy() -> Self {
        SamplerConfig {
            temperature: 0.0,
            ..Default::default()
        }
    }

    /// Checks every setting's range.
    pub fn validate(&self) -> Result<(), SamplerConfigError> {
        let check = |name, value: f32, ok: bool, expected| {
            if ok {
                Ok(())
            } else {
                Err(SamplerConfigError::OutOfRange {
                    name,
                    value,
                    expected,
                })
            }
        };
        check(
            "temperature",
            self.temperature,
            self.temperature.is_finite(),
            "a finite number",
        )?;
        check(
            "top_p",
            self.top_p,
            (0.0..=1.0).contains(&self.top_p),
            "0 ≤ top_p ≤ 1",
        )?;
        check(
            "min_p",
            self.min_p,
            (0.0..=1.0).contains(&self.min_p),
            "0 ≤ min_p ≤ 1",
        )?;
        check(
            "repeat_penalty",
            self.repeat_penalty,
            self.repeat_penalty.is_finite() && self.repeat_penalty > 0.0,
            "a positive number",
        )?;
        Ok(())
    }
}

/// A stateful sampler: the chain, its random stream and the recent-token window.
pub struct Sampler {
    cfg: SamplerConfig,
    rng: ChaCha20Rng,
    recent: VecDeque<u32>,
    /// Candidate (token, logit) pairs, reused between calls.
    cand: Vec<(u32, f32)>,
    probs: Vec<f32>,
    /// Distinct recent tokens, reused between calls.
    seen: Vec<u32>,
}

impl Sampler {
    /// A sampler with the given settings (validate them first with
    /// [`SamplerConfig::validate`]).
    pub fn new(cfg: SamplerConfig) -> Sampler {
        let rng = ChaCha20Rng::seed_from_u64(cfg.seed);
        let recent = VecDeque::with_capacity(cfg.repeat_last_n);
        Sampler {
            cfg,
            rng,
            recent,
            cand: Vec::new(),
            probs: Vec::new(),
            seen: Vec::new(),
        }
    }

    /// The settings.
    pub fn config(&self) -> &SamplerConfig {
        &self.cfg
    }

    /// Records a token as part of the context (prompt tokens too, so the penalty sees them).
    pub fn accept(&mut self, id: u32) {
        if self.cfg.repeat_last_n == 0 {
            return;
        }
        if self.recent.len() == self.cfg.repeat_last_n {
            self.recent.pop_front();
        }
        self.recent.push_back(id);
    }

    /// Picks the next token from raw logits.
    pub fn sample(&mut self, logits: &[f32]) -> u32 {
        self.cand.clear();
        self.cand
            .extend(logits.iter().enumerate().map(|(i, &l)| (i as u32, l)));
        self.apply_repeat_penalty();
        if self.cfg.temperature <= 0.0 {
            return greedy(&self.cand);
        }
        if self.cfg.top_k > 0 && self.cfg.top_k < self.cand.len() {
            let k = self.cfg.top_k;
            self.cand
                .select_nth_unstable_by(k - 1, |a, b| b.1.total_cmp(&a.1));
            self.cand.truncate(k);
        }
        self.cand
            .sort_unstable_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        if self.cfg.top_p < 1.0 {
            self.softmax();
            let mut cum = 0.0f32;
            let mut keep = self.cand.len();
            for (i, &p) in self.probs.iter().enumerate() {
                cum += p;
                if cum >= self.cfg.top_p {
                    keep = i + 1;
                    break;
                }
            }
            self.cand.truncate(keep.max(1));
        }
        if self.cfg.min_p > 0.0 && !self.cand.is_empty() {
            let threshold = self.cand[0].1 + self.cfg.min_p.ln();
            let keep = self.cand.iter().take_while(|c| c.1 >= threshold).count();
            self.cand.truncate(keep.max(1));
        }
        let inv_t = 1.0 / self.cfg.temperature;
        for c in self.cand.iter_mut() {
            c.1 *= inv_t;
        }
        self.softmax();
        let r: f32 = self.rng.random::<f32>();
        let mut cum = 0.0f32;
        for (i, &p) in self.probs.iter().enumerate() {
            cum += p;
            if r < cum {
                return self.cand[i].0;
            }
        }
        self.cand[self.cand.len() - 1].0
    }

    fn apply_repeat_penalty(&mut self) {
        let p = self.cfg.repeat_penalty;
        if p == 1.0 || self.recent.is_empty() {
            return;
        }
        // Penalise each distinct recent token once.
        self.seen.clear();
        self.seen.extend(self.recent.iter().copied());
        self.seen.sort_unstable();
        self.seen.dedup();
        for &id in &self.seen {
            if let Some(c) = self.cand.get_mut(id as usize) {
                c.1 = if c.1 > 0.0 { c.1 / p } else { c.1 * p };
            }
        }
    }

    /// `probs = softmax(cand logits)`, with `cand` sorted best first.
    fn softmax(&mut self) {
        let max = self
            .cand
            .iter()
            .map(|c| c.1)
            .fold(f32::NEG_INFINITY, f32::max);
        self.probs.clear();
        self.probs
            .extend(self.cand.iter().map(|c| (c.1 - max).exp()));
        let sum: f32 = self.probs.iter().sum();
        for p in self.probs.iter_mut() {
            *p /= sum;
        }
    }
}

fn greedy(cand: &[(u32, f32)]) -> u32 {
    let mut best = cand[0];
    for &c in &cand[1..] {
        if c.1 > best.1 {
            best = c;
        }
    }
    best.0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn logits() -> Vec<f32> {
        (0..100).map(|i| ((i * 37) % 100) as f32 / 10.0).collect()
    }

    #[test]
    fn zero_temperature_is_argmax() {
        let l = logits();
        let mut s = Sampler::new(SamplerConfig::greedy());
        assert_eq!(s.sample(&l), crate::argmax(&l));
    }

    #[test]
    fn same_seed_gives_same_tokens() {
        let l = logits();
        let cfg = SamplerConfig {
            temperature: 1.5,
            top_k: 0,
            top_p: 1.0,
            min_p: 0.0,
            seed: 42,
            ..Default::default()
        };
        let a: Vec<u32> = {
            let mut s = Sampler::new(cfg.clone());
            (0..50).map(|_| s.sample(&l)).collect()
        };
        let b: Vec<u32> = {
            let mut s = Sampler::new(cfg.clone());
            (0..50).map(|_| s.sample(&l)).collect()
        };
        assert_eq!(a, b);
        let c: Vec<u32> = {
            let mut s = Sampler::new(SamplerConfig { seed: 43, ..cfg });
            (0..50).map(|_| s.sample(&l)).collect()
        };
        assert_ne!(a, c);
    }

    #[test]
    fn top_k_one_is_greedy_whatever_the_temperature() {
        let l = logits();
        let mut s = Sampler::new(SamplerConfig {
            temperature: 5.0,
            top_k: 1,
            seed: 7,
            ..Default::default()
        });
        for _ in 0..20 {
            assert_eq!(s.sample(&l), crate::argmax(&l));
        }
    }

    #[test]
    fn min_p_drops_unlikely_tokens() {
        // Token 0 has logit 10, the rest 0: p(rest)/p(0) = e^-10 < 0.05.
        let mut l = vec![0.0f32; 10];
        l[0] = 10.0;
        let mut s = Sampler::new(SamplerConfig {
            temperature: 10.0,
            top_k: 0,
            top_p: 1.0,
            min_p: 0.05,
            seed: 1,
            ..Default::default()
        });
        for _ in 0..50 {
            assert_eq!(s.sample(&l), 0);
        }
    }

    #[test]
    fn top_p_keeps_the_smallest_set_reaching_the_mass() {
        // Probabilities ≈ [0.665, 0.245, 0.090]: top_p 0.6 keeps only the first.
        let l = [2.0f32, 1.0, 0.0];
        let mut s = Sampler::new(SamplerConfig {
            temperature: 1.0,
            top_k: 0,
            top_p: 0.6,
            min_p: 0.0,
            seed: 3,
            ..Default::default()
        });
        for _ in 0..50 {
            assert_eq!(s.sample(&l), 0);
        }
    }

    #[test]
    fn repeat_penalty_demotes_recent_tokens() {
        let l = [2.0f32, 1.9, 0.0];
        let mut s = Sampler::new(SamplerConfig {
            temperature: 0.0,
            repeat_penalty: 1.5,
            ..Default::default()
        });
        s.accept(0);
        assert_eq!(s.sample(&l), 1);
    }

    #[test]
    fn sampled_frequencies_follow_the_softmax() {
        let l = [1.0f32, 0.0, -1.0];
        let mut s = Sampler::new(SamplerConfig {
            temperature: 1.0,
            top_k: 0,
            top_p: 1.0,
            min_p: 0.0,
            seed: 11,
            ..Default::default()
        });
        let mut counts = [0usize; 3];
        let n = 20_000;
        for _ in 0..n {
            counts[s.sample(&l) as usize] += 1;
        }
        let z: f32 = l.iter().map(|v| v.exp()).sum();
        for i in 0..3 {
            let expected = l[i].exp() / z;
            let got = counts[i] as f32 / n as f32;
            assert!(
                (got - expected).abs() < 0.015,
                "token {i}: {got} vs {expected}"
            );
        }
    }

    #[test]
    fn out_of_range_settings_are_rejected() {
        let cfg = SamplerConfig {
            top_p: 1.5,
            ..Default::default()
        };
        assert!(matches!(
            cfg.validate(),
            Err(SamplerConfigError::OutOfRange { name: "top_p", .. })
        ));
    }
}
