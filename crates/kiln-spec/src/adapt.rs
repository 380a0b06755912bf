//! Adaptive draft length: draft more while drafts are accepted, fewer after a rejection,
//! and none for a while when acceptance is too low to pay for the wider passes.

/// A sequence's draft-length controller.
#[derive(Clone, Debug)]
pub struct DraftLength {
    max: usize,
    cur: usize,
    adaptive: bool,
    /// Exponentially weighted acceptance rate of recent drafts.
    rate: f64,
    /// Steps left with drafting paused.
    pause: u32,
    /// Consecutive pauses (each one doubles the next, up to a bound).
    pauses: u32,
}

impl DraftLength {
    /// Below this recent acceptance rate a draft costs more than it saves.
    pub const MIN_RATE: f64 = 0.2;
    const WEIGHT: f64 = 0.3;
    const PAUSE: u32 = 4;
    const MAX_PAUSE_DOUBLINGS: u32 = 4;

    /// At most `max` tokens per draft; not adaptive: always `max`.
    pub fn new(max: usize, adaptive: bool) -> DraftLength {
        DraftLength {
            max,
            cur: if adaptive { max.min(4) } else { max },
            adaptive,
            rate: 1.0,
            pause: 0,
            pauses: 0,
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

    /// Records a step that drafted `drafted` tokens and had `accepted` of them accepted.
    pub fn update(&mut self, drafted: usize, accepted: usize) {
        if !self.adaptive || drafted == 0 {
            return;
        }
        let r = accepted as f64 / drafted as f64;
        self.rate = (1.0 - Self::WEIGHT) * self.rate + Self::WEIGHT * r;
        self.cur = if accepted == drafted {
            (self.cur + 1).min(self.max)
        } else {
            (accepted + 1).clamp(1, self.max)
        };
        if self.rate < Self::MIN_RATE {
            self.pause = Self::PAUSE << self.pauses.min(Self::MAX_PAUSE_DOUBLINGS);
            self.pauses += 1;
            // Probe with one token and a neutral rate when drafting resumes.
            self.rate = Self::MIN_RATE * 2.0;
            self.cur = 1;
        } else if accepted > 0 {
            self.pauses = 0;
        }
    }

    /// The recent acceptance rate.
    pub fn rate(&self) -> f64 {
        self.rate
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grows_while_accepted_and_shrinks_after_a_rejection() {
        let mut l = DraftLength::new(8, true);
        let k = l.take();
        l.update(k, k);
        assert_eq!(l.take(), k + 1);
        l.update(k + 1, 1);
        assert_eq!(l.take(), 2);
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
