//! Counters of speculation.

use std::time::Duration;

/// What speculation did, summed over steps (and sequences, when added).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SpecStats {
    /// Verification passes that scored at least one drafted token.
    pub draft_steps: u64,
    /// Tokens drafted.
    pub drafted: u64,
    /// Drafted tokens the target accepted.
    pub accepted: u64,
    /// Tokens emitted by steps (accepted drafts plus the target's own token).
    pub emitted: u64,
    /// Steps that drafted nothing (no match, or drafting paused).
    pub plain_steps: u64,
    /// Time spent drafting (the n-gram lookup, or the draft model's passes).
    pub draft_time: Duration,
    /// Time in the target's scoring passes.
    pub verify_time: Duration,
    /// Time choosing the emitted tokens from the scored logits (sampling, verification).
    pub sample_time: Duration,
    /// Time cutting rejected positions from the KV cache ([`kiln_model::Session::settle`]).
    pub rollback_time: Duration,
}

impl SpecStats {
    /// Accepted over drafted (0 when nothing was drafted).
    pub fn acceptance_rate(&self) -> f64 {
        if self.drafted == 0 {
            0.0
        } else {
            self.accepted as f64 / self.drafted as f64
        }
    }

    /// Tokens emitted per verification pass that had a draft: 1 + accepted per draft step
    /// (vLLM's "mean acceptance length").
    pub fn mean_accepted_length(&self) -> f64 {
        if self.draft_steps == 0 {
            0.0
        } else {
            1.0 + self.accepted as f64 / self.draft_steps as f64
        }
    }

    pub fn add(&mut self, o: &SpecStats) {
        self.draft_steps += o.draft_steps;
        self.drafted += o.drafted;
        self.accepted += o.accepted;
        self.emitted += o.emitted;
        self.plain_steps += o.plain_steps;
        self.draft_time += o.draft_time;
        self.verify_time += o.verify_time;
        self.sample_time += o.sample_time;
        self.rollback_time += o.rollback_time;
    }
}
