//! Adaptive draft length: draft more while drafts are accepted, fewer after a rejection,
//! and none for a while when drafting does not earn what it costs.
//!
//! Acceptance is measured per *tested* position: verification stops at the first
//! rejected token, so a draft of `k` with `a` accepted tested `a` positions that passed
//! and, if `a < k`, one that failed; the positions after it say nothing. The rate is the
//! passed share of the recently tested positions (decayed counts), the probability that a
//! drafted token is kept given the ones before it were.
//!
//! Whether drafting pays is judged from what it actually earned, in decode steps: a
//! drafted pass of `n` tokens that emitted `e` tokens earned `e` for `cost(n)` steps
//! ([`PassCost`], measured once per model; plus the draft model's own time, for a draft
//! model), where a plain step earns one token for one step. The controller keeps decayed
//! sums of both over the sequence's drafted passes, and when they earned less than they
//! cost it pauses drafting for a few steps, twice as long after each pause that follows a
//! failed probe (up to a bound), and judges the first passes after the pause afresh. It
//! counts tokens, not seconds: the machine's load changes between passes cannot make it
//! draft where drafting loses. Without a measured curve every pass costs one step, and only
//! acceptance decides.
//!
//! The draft length is a bound that doubles after a fully accepted draft and halves (at
//! least to the accepted count plus one) after a rejection: acceptance comes in runs (a
//! copied passage is accepted to its end, a divergence is rejected at once), and the source
//! limits a draft to what its evidence supports (an n-gram draft to twice its match
//! length). Below an acceptance floor ([`DraftLength::MIN_RATE`]) drafting pauses too,
//! whatever the costs.

use std::sync::Arc;

use crate::PassCost;

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
    /// The target's pass cost by token count (`None`: every pass one step).
    cost: Option<Arc<PassCost>>,
    /// Decayed sums over drafted passes since the last pause: tokens emitted, and their
    /// cost in decode steps.
    earned: f64,
    spent: f64,
    /// Drafting cost (decode steps) of the step about to be recorded (draft models).
    draft_cost: f64,
    /// A draft model's recent cost per drafted token, in decode steps (decayed; `None`
    /// before its first draft, and for n-gram drafts, which cost nothing).
    draft_step: Option<f64>,
}

impl DraftLength {
    /// Below this recent acceptance rate a draft costs more than it saves, whatever the
    /// costs: drafting pauses, longer each time.
    pub const MIN_RATE: f64 = 0.2;
    /// Per step, the weight the counts of earlier steps keep.
    const DECAY: f64 = 0.7;
    /// Per drafted pass, the weight earlier passes keep in what drafting earned and cost.
    const YIELD_DECAY: f64 = 0.8;
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
            cost: None,
            earned: 0.0,
            spent: 0.0,
            draft_cost: 0.0,
            draft_step: None,
        }
    }

    /// Weighs drafted passes by `cost` from now on (without it every pass costs one step).
    pub fn set_cost(&mut self, cost: Arc<PassCost>) {
        self.cost = Some(cost);
    }

    /// The pass-cost curve in use, if any.
    pub fn cost(&self) -> Option<&PassCost> {
        self.cost.as_deref()
    }

    /// What a pass of `n` tokens costs in decode steps.
    fn pass_cost(&self, n: usize) -> f64 {
        self.cost.as_ref().map_or(1.0, |c| c.of(n))
    }

    /// Adds drafting work worth `steps` decode steps to the next recorded step (a draft
    /// model's passes; an n-gram lookup is free).
    pub fn record_draft_cost(&mut self, steps: f64) {
        if steps.is_finite() && steps > 0.0 {
            self.draft_cost += steps;
        }
    }

    /// How many tokens to draft this step (0: drafting paused). Call once per step.
    pub fn take(&mut self) -> usize {
        if self.pause > 0 {
            self.pause -= 1;
            return 0;
        }
        self.cur
    }

    /// How many of a draft's first `k` tokens are worth scoring: the `j ≤ k` whose pass
    /// emits the most tokens per decode step, by the measured curve and the recent
    /// acceptance rate `r` (a pass scoring `j` drafted tokens emits `1 + r + … + r^j`
    /// expected tokens and costs `cost(j + 1)` steps); of equally good lengths the longest.
    /// The matrix kernels take a pass's tokens in groups, so the cost rises in steps and a
    /// draft that ends one token past a group is usually cut back to the group: the 17th
    /// token of a 16-token draft's pass runs every matrix again on its own (two threads,
    /// Qwen2.5-Coder-0.5B, AVX2: 16 tokens 5.3 decode steps, 17 tokens 7.5). Never below
    /// one token (the probe after a pause); without a curve, all `k`.
    pub fn worth_scoring(&self, k: usize) -> usize {
        let Some(cost) = self.cost.as_deref() else {
            return k;
        };
        if k <= 1 {
            return k;
        }
        let rate = self.rate().clamp(0.0, 1.0);
        let (mut best, mut best_yield) = (1, 0.0);
        // Expected tokens emitted by a pass of `j` drafted tokens.
        let (mut emitted, mut p) = (1.0, 1.0);
        for j in 1..=k {
            p *= rate;
            emitted += p;
            let per_step = emitted / cost.of(j + 1);
            // Relative slack: a longer draft wins a tie that is only rounding.
            if per_step >= best_yield * (1.0 - 1e-9) {
                (best, best_yield) = (j, per_step);
            }
        }
        best
    }

    /// Records a step that drafted `drafted` tokens and had `accepted` of them accepted
    /// (its pass scored `drafted + 1` tokens and emitted `accepted + 1`).
    pub fn update(&mut self, drafted: usize, accepted: usize) {
        let draft_cost = std::mem::take(&mut self.draft_cost);
        if !self.adaptive {
            return;
        }
        if drafted == 0 {
            // A draft model that drafted nothing (no token it was sure enough of) spent
            // its pass for the one token a plain step emits.
            if draft_cost > 0.0 {
                self.add_yield(0, 0, draft_cost);
                if self.earned < self.spent {
                    self.pause_drafting();
                }
            }
            return;
        }
        if draft_cost > 0.0 {
            let per_token = draft_cost / drafted as f64;
            self.draft_step = Some(self.draft_step.map_or(per_token, |d| {
                Self::DECAY * d + (1.0 - Self::DECAY) * per_token
            }));
        }
        let accepted = accepted.min(drafted);
        let tested = accepted + usize::from(accepted < drafted);
        self.tested = Self::DECAY * self.tested + tested as f64;
        self.passed = Self::DECAY * self.passed + accepted as f64;
        self.add_yield(drafted, accepted, draft_cost);
        self.cur = if accepted == drafted {
            (self.cur * 2).min(self.max)
        } else {
            (accepted + 1).max(self.cur / 2).clamp(1, self.max)
        };
        if self.rate() < Self::MIN_RATE {
            // Drafts keep failing: pause, longer each time it happens again, and probe
            // with one token and a neutral rate when drafting resumes.
            self.pause_drafting();
            self.tested = 1.0;
            self.passed = Self::MIN_RATE * 2.0;
            self.cur = 1;
        } else if self.earned < self.spent {
            // Drafted passes emitted fewer tokens than plain steps would have in their
            // time: pause, longer each time the probe after a pause fails too, and as long
            // as pauses get when not even a wholly accepted draft could pay.
            if self.cannot_pay() {
                self.pauses = self.pauses.max(Self::MAX_PAUSE_DOUBLINGS);
            }
            self.pause_drafting();
        } else if self.earned > self.spent {
            self.pauses = 0;
        }
    }

    /// Adds a pass that scored `drafted + 1` tokens and emitted `accepted + 1`, after
    /// `draft_cost` steps of drafting, to what drafting earned and cost.
    fn add_yield(&mut self, drafted: usize, accepted: usize, draft_cost: f64) {
        self.earned = Self::YIELD_DECAY * self.earned + (accepted + 1) as f64;
        self.spent = Self::YIELD_DECAY * self.spent + self.pass_cost(drafted + 1) + draft_cost;
    }

    /// Whether no draft could pay even with every drafted token accepted: a pass of `j`
    /// drafted tokens, all kept, emits `j + 1` tokens for `cost(j + 1)` steps of the target
    /// plus `j` of the draft model's recent cost per token, and for no `j` up to the most
    /// drafted is that more than one token per step. Then each probe after a pause (whose
    /// draft model first reads all the text since its last draft) costs more than it can
    /// find out, and pauses start at their longest. Only with a measured curve and a draft
    /// model's cost; an n-gram draft costs nothing and can always pay.
    fn cannot_pay(&self) -> bool {
        let (Some(cost), Some(d)) = (self.cost.as_deref(), self.draft_step) else {
            return false;
        };
        (1..=self.max).all(|j| (j + 1) as f64 <= cost.of(j + 1) + j as f64 * d)
    }

    /// Pauses drafting for `PAUSE` steps doubled per consecutive pause, and forgets what
    /// drafting earned: the passes after the pause are judged on their own.
    fn pause_drafting(&mut self) {
        self.pause = Self::PAUSE << self.pauses.min(Self::MAX_PAUSE_DOUBLINGS);
        self.pauses += 1;
        self.earned = 0.0;
        self.spent = 0.0;
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

    /// A curve from `pass(n)` seconds per pass of `n` tokens.
    fn curve(pass: impl Fn(usize) -> f64) -> Arc<PassCost> {
        let t: Vec<(usize, f64)> = (1..=17).map(|n| (n, pass(n))).collect();
        Arc::new(PassCost::from_timings(&t).unwrap())
    }

    /// Steps with every other draft fully accepted and the rest rejected outright, each
    /// pass of `n` tokens costing `pass(n)`; the number of steps that drafted nothing.
    fn paused_steps(pass: impl Fn(usize) -> f64) -> usize {
        let mut l = DraftLength::new(8, true);
        l.set_cost(curve(pass));
        let mut paused = 0;
        for i in 0..16 {
            let k = l.take();
            if k == 0 {
                paused += 1;
            } else {
                l.update(k, if i % 2 == 0 { k } else { 0 });
            }
        }
        paused
    }

    #[test]
    fn pauses_when_passes_cost_more_than_the_accepted_drafts_save() {
        // A pass costs one decode step per token: no draft can pay.
        assert!(paused_steps(|n| 0.010 * n as f64) > 8);
    }

    #[test]
    fn keeps_drafting_at_the_same_acceptance_when_passes_are_cheap() {
        // A pass of n tokens costs little more than one: the same drafts pay.
        assert_eq!(paused_steps(|n| 0.010 + 0.0005 * (n - 1) as f64), 0);
    }

    #[test]
    fn backs_off_exponentially_while_probes_keep_losing() {
        // Two-token passes cost three steps; every draft has its one token accepted, so
        // acceptance stays high but each drafted pass emits two tokens for three steps.
        let mut l = DraftLength::new(1, true);
        l.set_cost(curve(|n| if n == 1 { 0.01 } else { 0.03 }));
        let mut pauses = Vec::new();
        let mut run = 0;
        for _ in 0..200 {
            let k = l.take();
            if k == 0 {
                run += 1;
            } else {
                if run > 0 {
                    pauses.push(run);
                }
                run = 0;
                l.update(k, k);
            }
        }
        assert_eq!(pauses[..5], [4, 8, 16, 32, 64], "pauses {pauses:?}");
    }

    #[test]
    fn drops_a_last_drafted_token_that_costs_more_than_it_can_earn() {
        // Whole groups of eight tokens cost 0.4 steps a token; a 17th costs a whole step.
        let busy = |n: usize| {
            let groups = (n - 1).min(16) as f64;
            0.010 * (1.0 + 0.4 * groups + if n > 16 { 1.0 } else { 0.0 })
        };
        let mut l = DraftLength::new(16, true);
        assert_eq!(
            l.worth_scoring(16),
            16,
            "no curve: every drafted token is scored"
        );
        l.set_cost(curve(busy));
        assert_eq!(l.worth_scoring(16), 15);
        assert_eq!(l.worth_scoring(8), 8);
        assert_eq!(l.worth_scoring(1), 1);
        // Where the 17th token costs less than the acceptance rate, it is scored.
        l.set_cost(curve(|n| 0.010 * (1.0 + 0.05 * (n - 1) as f64)));
        assert_eq!(l.worth_scoring(16), 16);
    }

    #[test]
    fn cuts_a_draft_back_to_the_end_of_a_kernel_group() {
        // The steps of a measured curve (Qwen2.5-Coder-0.5B, AVX2, two threads): a pass
        // one token past a group of four, eight or sixteen costs a jump.
        let steps = [
            (1, 1.0),
            (2, 1.32),
            (4, 1.7),
            (5, 2.38),
            (8, 3.3),
            (9, 4.12),
            (16, 5.3),
            (17, 7.5),
        ];
        let mut l = DraftLength::new(16, true);
        l.set_cost(Arc::new(
            PassCost::from_timings(&steps.map(|(n, c)| (n, 0.01 * c))).unwrap(),
        ));
        // Every recent draft accepted: the longest draft whose pass ends a group.
        assert_eq!(l.worth_scoring(16), 15);
        assert_eq!(l.worth_scoring(8), 7);
        assert_eq!(l.worth_scoring(4), 3);
        assert_eq!(l.worth_scoring(15), 15);
        assert_eq!(l.worth_scoring(1), 1);
        // Half the tested positions rejected: a long draft earns little past its first
        // tokens. Two drafted tokens emit 1.75 expected tokens for 1.51 steps, more per
        // step than one (1.5 for 1.32) or three (1.875 for 1.7).
        for _ in 0..8 {
            l.update(2, 1);
        }
        assert!((l.rate() - 0.5).abs() < 0.05, "rate {}", l.rate());
        assert_eq!(l.worth_scoring(16), 2);
    }

    #[test]
    fn without_a_cost_curve_only_acceptance_decides() {
        // Drafts of 8 with one token accepted each: a low per-draft yield that a flat
        // cost never pauses, and a per-tested-position rate of one half.
        let mut l = DraftLength::new(8, true);
        for _ in 0..20 {
            let k = l.take();
            assert!(k > 0);
            l.update(k, 1.min(k));
        }
        assert!(l.cost().is_none());
    }

    /// The drafting work of a draft model counts against what drafting earns.
    #[test]
    fn counts_the_draft_models_own_cost() {
        let mut l = DraftLength::new(4, true);
        l.set_cost(curve(|n| 0.010 + 0.001 * (n - 1) as f64));
        let k = l.take();
        // Four drafted tokens, three accepted: four tokens for 1.4 steps plus a draft that
        // took four steps.
        l.record_draft_cost(4.0);
        l.update(k, 3);
        assert_eq!(l.take(), 0);
    }

    /// A draft model whose own step costs so much that not even a wholly accepted draft
    /// pays is paused for the longest pause at once, where an n-gram source with the same
    /// passes starts with the shortest.
    #[test]
    fn pauses_longest_at_once_when_even_accepted_drafts_cannot_pay() {
        // A pass of n tokens costs 1 + 0.3 (n - 1) steps; with a draft token at 0.8 steps
        // a wholly accepted draft of j emits j + 1 tokens for 1 + 1.1 j steps.
        let pass = |n: usize| 0.010 * (1.0 + 0.3 * (n - 1) as f64);
        let mut model = DraftLength::new(8, true);
        model.set_cost(curve(pass));
        let k = model.take();
        model.record_draft_cost(0.8 * k as f64);
        model.update(k, k);
        let paused = std::iter::from_fn(|| Some(model.take()))
            .take_while(|&k| k == 0)
            .count();
        assert_eq!(paused, 64);
        // The same pass with half the draft's cost could pay when accepted: the short
        // pause of a draft that lost this time.
        let mut cheap = DraftLength::new(8, true);
        cheap.set_cost(curve(pass));
        let k = cheap.take();
        cheap.record_draft_cost(0.5 * k as f64);
        cheap.update(k, 0);
        let paused = std::iter::from_fn(|| Some(cheap.take()))
            .take_while(|&k| k == 0)
            .count();
        assert_eq!(paused, 4);
    }

    /// A draft model that drafted nothing (its first token below the confidence floor)
    /// spent its pass for nothing.
    #[test]
    fn a_draft_attempt_that_drafted_nothing_still_costs_its_pass() {
        let mut l = DraftLength::new(4, true);
        l.set_cost(curve(|n| 0.010 + 0.001 * (n - 1) as f64));
        assert_eq!(l.take(), 4);
        // One token emitted for a plain pass plus half a step of drafting.
        l.record_draft_cost(0.5);
        l.update(0, 0);
        assert_eq!(l.take(), 0);
        // An n-gram step that found nothing to draft cost nothing extra.
        let mut n = DraftLength::new(4, true);
        n.set_cost(curve(|n| 0.010 + 0.001 * (n - 1) as f64));
        n.update(0, 0);
        assert_eq!(n.take(), 4);
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
