//! A sequence's speculative decoding inside the engine: its n-gram drafter, draft-length
//! controller, counters, and the row (`[pending token, drafted tokens…]`) a step scores.
//!
//! The scheduler asks [`SeqSpec::draft`] for each decoding sequence's row while it plans a
//! step; the row joins the step's batch, scored in the same pass as every other row
//! (`Session::forward_scored`), and the sequence then verifies it position by position
//! (`Seq::on_token` after `Sampler::verify_draft`), keeping the accepted prefix and the
//! target's own token. The rejected positions are cut from its KV sequence
//! (`Session::settle`) before any of its pages become findable by the prefix cache.

use kiln_spec::{DraftLength, NgramDrafter, SpecConfig, SpecStats};

/// One sequence's speculation state (buffers sized once, at submission).
pub(crate) struct SeqSpec {
    drafter: NgramDrafter,
    length: DraftLength,
    /// What this sequence's speculation did so far.
    pub stats: SpecStats,
    /// This step's row: the pending token, then the draft.
    row: Vec<u32>,
}

impl SeqSpec {
    pub fn new(cfg: &SpecConfig) -> SeqSpec {
        SeqSpec {
            drafter: NgramDrafter::new(cfg.ngram_min, cfg.ngram_max),
            length: DraftLength::new(cfg.draft_max, cfg.adaptive),
            stats: SpecStats::default(),
            row: Vec::with_capacity(cfg.draft_max + 1),
        }
    }

    /// Prepares this step's row for a sequence whose tokens so far are `tokens` (its last
    /// one is pending: not yet evaluated) with at most `cap` drafted tokens, and returns
    /// how many were drafted (0: a plain decode row). Call once per step in which the
    /// sequence decodes: the draft-length controller counts paused steps.
    pub fn draft(&mut self, tokens: &[u32], cap: usize) -> usize {
        self.row.clear();
        let Some(&pending) = tokens.last() else {
            return 0;
        };
        self.row.push(pending);
        let k = self.length.take().min(cap);
        if k > 0 {
            self.drafter.draft(tokens, k, &mut self.row);
        }
        self.row.len() - 1
    }

    /// The tokens this step's row drafted, one after another.
    pub fn drafted(&self) -> &[u32] {
        self.row.get(1..).unwrap_or(&[])
    }

    /// This step's row: the pending token then the draft.
    pub fn row(&self) -> &[u32] {
        &self.row
    }

    /// Drops this step's draft (the row is the pending token alone).
    pub fn undraft(&mut self) {
        self.row.truncate(1);
    }

    /// Records a step that drafted `drafted` tokens, had `accepted` of them accepted and
    /// emitted `emitted` tokens.
    pub fn record(&mut self, drafted: usize, accepted: usize, emitted: usize) {
        self.length.update(drafted, accepted);
        let s = &mut self.stats;
        s.emitted += emitted as u64;
        if drafted > 0 {
            s.draft_steps += 1;
            s.drafted += drafted as u64;
            s.accepted += accepted as u64;
        } else {
            s.plain_steps += 1;
        }
    }
}
