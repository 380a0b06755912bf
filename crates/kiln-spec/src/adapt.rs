//! Adaptive draft length: draft more while drafts are accepted, fewer after a rejection,
//! and none for a while when acceptance is too low to pay for the wider passes.
//!
//! Acceptance is measured per *tested* position: verification stops at the first
//! rejected token, so a draft of `k` with `a` accepted tested `a` positions that passed
//! and, if `a < k`, one that failed; the positions after it say nothing. The rate is the
//! passed share of the recently tested positions (decayed counts), the probability that a
//! drafted token is kept given the ones before it were.
//!
//! Whether drafting pays is a cost model: the measured time of the target's passes by the
//! number of tokens they score (`t(n) = t1 + (n - 1) * s`, both fitted as running means),
//! the measured drafting time per drafted token `d`, and the recent acceptance rate `p`.
//! A draft of `k` tokens emits `1 + p + … + p^k` tokens in expectation for
//! `t1 + k * (s + d)`; plain decoding emits one per `t1`. When even the best draft length
//! up to the current bound is slower than plain decoding, drafting pauses for a few steps.
//! Otherwise the draft length is the current bound, which doubles after a fully accepted
//! draft and halves (at least to the accepted count plus one) after a rejection: acceptance
//! comes in runs (a copied passage is accepted to its end, a divergence is rejected at
//! once), which a per-token model would undervalue, and the source limits a draft to what
//! its evidence supports (an n-gram draft to twice its match length). Below an acceptance
//! floor ([`DraftLength::MIN_RATE`]) drafting pauses for longer each time, whatever the
//! timings.

/// A sequence's draft-length controller.
#[derive(Clone, Debug)]
pub struct DraftLength {
    max: usize,
    cur: usize,
    adaptive: bool,
    /// Decayed counts of recently tested drafted positions and of those accepted.
    tested: f64,
    passed: f64,
    /// Steps left with drafting paused.
    pause: u32,
    /// Consecutive pauses (each one doubles the next, up to a bound).
    pauses: u32,
    cost: CostModel,
}

/// Running means of the measured costs (seconds; `None` until measured).
#[derive(Clone, Debug, Default)]
struct CostModel {
    /// A target pass of one token.
    t1: Option<f64>,
    /// Each further token of a pass: the least-squares slope through the origin of a
    /// pass's time beyond `t1` over its tokens beyond the first (decayed sums), so the
    /// wide passes that decide whether long drafts pay weigh more than the narrow ones
    /// (whose tokens the kernels pad to a wider group, and cost more each).
    per_token: Option<f64>,
    /// Decayed sums of `x·y` and `x²` for that fit (`x`: tokens beyond the first, `y`:
    /// seconds beyond `t1`).
    sxy: f64,
    sxx: f64,
    /// Drafting, per drafted token.
    draft: Option<f64>,
}

impl CostModel {
    const WEIGHT: f64 = 0.2;

    fn mean(old: Option<f64>, v: f64) -> Option<f64> {
        Some(old.map_or(v, |o| (1.0 - Self::WEIGHT) * o + Self::WEIGHT * v))
    }

    /// The expected tokens per second of drafting `k` at acceptance `p`, relative to plain
    /// decoding (1.0: as fast), or `None` before one-token passes were timed.
    fn relative_rate(&self, k: usize, p: f64) -> Option<f64> {
        let t1 = self.t1.filter(|t| *t > 0.0)?;
        let extra = self.per_token.unwrap_or(0.0).max(0.0) + self.draft.unwrap_or(0.0).max(0.0);
        let p = p.clamp(0.0, 1.0);
        let expected: f64 = (0..=k).map(|i| p.powi(i as i32)).sum();
        Some(expected * t1 / (t1 + k as f64 * extra))
    }
}

impl DraftLength {
    /// Below this recent acceptance rate a draft costs more than it saves, whatever the
    /// timings: drafting pauses, longer each time.
    pub const MIN_RATE: f64 = 0.2;
    /// Per step, the weight the counts of earlier steps keep.
    const DECAY: f64 = 0.7;
    const PAUSE: u32 = 4;
    const MAX_PAUSE_DOUBLINGS: u32 = 4;

    /// At most `max` tokens per draft; not adaptive: always `max`.
    pub fn new(max: usize, adaptive: bool) -> DraftLength {
        DraftLength {
            max,
            cur: if adaptive { max.min(4) } else { max },
            adaptive,
            tested: 1.0,
            passed: 1.0,
            pause: 0,
            pauses: 0,
            cost: CostModel::default(),
        }
    }

    /// Records a target pass that scored `tokens` tokens in `secs` seconds.
    pub fn record_pass(&mut self, tokens: usize, secs: f64) {
        if tokens == 0 || !secs.is_finite() || secs < 0.0 {
            return;
        }
        if tokens == 1 {
            self.cost.t1 = CostModel::mean(self.cost.t1, secs);
        } else if let Some(t1) = self.cost.t1 {
            let c = &mut self.cost;
            let x = (tokens - 1) as f64;
            c.sxy = (1.0 - CostModel::WEIGHT) * c.sxy + x * (secs - t1);
            c.sxx = (1.0 - CostModel::WEIGHT) * c.sxx + x * x;
            c.per_token = Some(c.sxy / c.sxx);
        }
    }

    /// Records drafting `tokens` tokens in `secs` seconds.
    pub fn record_draft(&mut self, tokens: usize, secs: f64) {
        if tokens == 0 || !secs.is_finite() || secs < 0.0 {
            return;
        }
        self.cost.draft = CostModel::mean(self.cost.draft, secs / tokens as f64);
    }

    /// The best draft length up to `k` by the cost model and whether it beats plain
    /// decoding (`None` before the model has its measurements).
    fn best(&self, k: usize) -> Option<(usize, bool)> {
        let mut best = (0, 1.0);
        for j in 1..=k {
            let r = self.cost.relative_rate(j, self.rate())?;
            if r > best.1 {
                best = (j, r);
            }
        }
        Some((best.0.max(1), best.0 > 0))
    }

    /// How many tokens to draft this step (0: drafting paused). Call once per step.
    pub fn take(&mut self) -> usize {
        if self.pause > 0 {
            self.pause -= 1;
            return 0;
        }
        self.cur
    }

    /// Records a step that drafted `drafted` tokens and had `accepted` of them accepted.
    pub fn update(&mut self, drafted: usize, accepted: usize) {
        if !self.adaptive || drafted == 0 {
            return;
        }
        let accepted = accepted.min(drafted);
        let tested = accepted + usize::from(accepted < drafted);
        self.tested = Self::DECAY * self.tested + tested as f64;
        self.passed = Self::DECAY * self.passed + accepted as f64;
        self.cur = if accepted == drafted {
            (self.cur * 2).min(self.max)
        } else {
            (accepted + 1).max(self.cur / 2).clamp(1, self.max)
        };
        if self.rate() < Self::MIN_RATE {
            // Drafts keep failing: pause, longer each time it happens again.
            self.pause = Self::PAUSE << self.pauses.min(Self::MAX_PAUSE_DOUBLINGS);
            self.pauses += 1;
            // Probe with one token and a neutral rate when drafting resumes.
            self.tested = 1.0;
            self.passed = Self::MIN_RATE * 2.0;
            self.cur = 1;
        } else if self.best(self.max).is_some_and(|(_, pays)| !pays) {
            // Drafts are accepted, but not enough to pay for the wider passes as timed:
            // a short pause, then a draft of the same bound (a long draft measures
            // the per-token cost where it is lowest).
            self.pause = Self::PAUSE;
        } else if accepted > 0 {
            self.pauses = 0;
        }
    }

    /// The recent acceptance rate per tested drafted position.
    pub fn rate(&self) -> f64 {
        self.passed / self.tested.max(f64::MIN_POSITIVE)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grows_while_accepted_and_shrinks_after_a_rejection() {
        let mut l = DraftLength::new(16, true);
        let k = l.take();
        assert_eq!(k, 4);
        l.update(k, k);
        assert_eq!(l.take(), 8);
        l.update(8, 8);
        assert_eq!(l.take(), 16);
        l.update(16, 16);
        assert_eq!(l.take(), 16);
        // A rejection halves the bound, or keeps the accepted run and one more.
        l.update(16, 1);
        assert_eq!(l.take(), 8);
        l.update(8, 6);
        assert_eq!(l.take(), 7);
    }

    #[test]
    fn counts_only_tested_positions() {
        let mut l = DraftLength::new(16, true);
        // Half the drafts copy to their end, half fail at once: 8 of 9 tested positions
        // per pair of steps passed, a rate far above the per-drafted-token 50%.
        for _ in 0..8 {
            l.update(8, 8);
            l.update(8, 0);
        }
        assert!(l.rate() > 0.8, "rate {}", l.rate());
    }

    /// Steps with every other draft fully accepted and the rest rejected outright, each
    /// pass of `n` tokens timed at `pass(n)`; the number of steps that drafted nothing.
    fn paused_steps(pass: impl Fn(usize) -> f64) -> usize {
        let mut l = DraftLength::new(8, true);
        l.record_pass(1, pass(1));
        let mut paused = 0;
        for i in 0..16 {
            let k = l.take();
            l.record_pass(k + 1, pass(k + 1));
            if k == 0 {
                paused += 1;
            } else {
                l.update(k, if i % 2 == 0 { k } else { 0 });
            }
        }
        paused
    }

    #[test]
    fn pauses_when_timed_passes_cost_more_than_the_accepted_drafts_save() {
        // A pass costs one decode step per token: no draft can pay.
        assert!(paused_steps(|n| 0.010 * n as f64) > 8);
    }

    #[test]
    fn keeps_drafting_at_the_same_acceptance_when_passes_are_cheap() {
        // A pass of n tokens costs little more than one: the same drafts pay.
        assert_eq!(paused_steps(|n| 0.010 + 0.0005 * (n - 1) as f64), 0);
    }

    #[test]
    fn pauses_when_drafts_keep_failing_then_probes_again() {
        let mut l = DraftLength::new(8, true);
        let mut paused = 0;
        for _ in 0..40 {
            let k = l.take();
            if k == 0 {
                paused += 1;
            } else {
                l.update(k, 0);
            }
        }
        assert!(paused > 20, "paused {paused} of 40 steps");
        let mut fixed = DraftLength::new(8, false);
        fixed.update(8, 0);
        assert_eq!(fixed.take(), 8);
    }
}
