//! One sequence's speculative decoding: draft, score every drafted position in one pass
//! of the target, keep the accepted prefix plus the target's own next token, cut the
//! rest from the KV cache.

use std::sync::Arc;
use std::time::Instant;

use kiln_model::{BatchSeq, Session};
use kiln_sample::Sampler;
use rand::SeedableRng;
use rand_chacha::ChaCha20Rng;

use crate::{
    DraftLength, DraftModel, NgramDrafter, PassCost, SpecConfig, SpecError, SpecMethod, SpecStats,
};

/// Where a sequence's drafts come from.
pub enum DraftSource {
    Ngram(NgramDrafter),
    Model(Box<DraftModel>),
}

/// A sequence's speculative decoder: its draft source, draft-length controller, counters
/// and buffers (sized once, reused every step).
pub struct SpecDecoder {
    source: DraftSource,
    length: DraftLength,
    stats: SpecStats,
    vocab: usize,
    draft_max: usize,
    adaptive: bool,
    draft_p_min: f32,
    /// The passes so far in decode steps by the measured curve (0 without one).
    pass_steps: f64,
    draft: Vec<u32>,
    /// The draft's distributions, one vocabulary row per drafted token (sampling with a
    /// draft model only).
    q: Vec<f32>,
    row: Vec<u32>,
    /// The target's logits for every position of the last step's pass.
    scored: Vec<f32>,
    rng: ChaCha20Rng,
}

impl SpecDecoder {
    /// A decoder for a target with `vocab` logits per token. `seed` seeds the draft
    /// model's own draws (the sampler's stream decides acceptance).
    pub fn new(
        cfg: &SpecConfig,
        source: DraftSource,
        vocab: usize,
        seed: u64,
    ) -> Result<SpecDecoder, SpecError> {
        cfg.validate()?;
        match (&source, cfg.method) {
            (DraftSource::Ngram(_), SpecMethod::Ngram)
            | (DraftSource::Model(_), SpecMethod::Draft) => {}
            _ => {
                return Err(SpecError::Config(format!(
                    "method {} needs its own draft source",
                    cfg.method.as_str()
                )));
            }
        }
        let k = cfg.draft_max;
        let mut rng = ChaCha20Rng::seed_from_u64(seed);
        rng.set_stream(1);
        Ok(SpecDecoder {
            source,
            length: DraftLength::new(k, cfg.adaptive),
            stats: SpecStats::default(),
            vocab,
            draft_max: k,
            adaptive: cfg.adaptive,
            draft_p_min: cfg.draft_p_min,
            pass_steps: 0.0,
            draft: Vec::with_capacity(k),
            q: Vec::new(),
            row: Vec::with_capacity(k + 1),
            scored: Vec::with_capacity((k + 1) * vocab),
            rng,
        })
    }

    /// An n-gram decoder.
    pub fn ngram(cfg: &SpecConfig, vocab: usize) -> Result<SpecDecoder, SpecError> {
        let src = DraftSource::Ngram(NgramDrafter::new(cfg.ngram_min, cfg.ngram_max));
        SpecDecoder::new(cfg, src, vocab, 0)
    }

    /// Counters so far.
    pub fn stats(&self) -> SpecStats {
        self.stats
    }

    /// The draft-length controller.
    pub fn length(&self) -> &DraftLength {
        &self.length
    }

    /// Measures the target's pass-cost curve on `session`'s current sequence (whose last
    /// token `pending` is not yet evaluated; the sequence is left as it was) for passes of
    /// up to `draft_max + 1` tokens, and weighs this decoder's drafts by it from now on
    /// ([`PassCost::measure`], [`DraftLength`]). Only under greedy decoding: with sampling,
    /// drafts and the random draws that verify them must stay a function of the text so a
    /// seeded run reproduces, and nothing is measured (`None`). Also `None` when not
    /// adaptive. Call it once, after the prompt.
    pub fn calibrate(
        &mut self,
        session: &mut Session,
        pending: u32,
        sampler: &Sampler,
    ) -> Result<Option<Arc<PassCost>>, SpecError> {
        if sampler.config().temperature > 0.0 || !self.adaptive {
            return Ok(None);
        }
        let cost = Arc::new(PassCost::measure(session, pending, self.draft_max + 1)?);
        self.length.set_cost(Arc::clone(&cost));
        Ok(Some(cost))
    }

    /// The target passes of every step so far, in decode steps by the measured pass-cost
    /// curve (0 before [`SpecDecoder::calibrate`]): what the steps cost whatever the
    /// machine's load, to set beside the plain decode steps the same tokens take.
    pub fn pass_steps(&self) -> f64 {
        self.pass_steps
    }

    /// Weighs this decoder's drafts by `cost` (one measured curve shared by several
    /// decoders of a model). Greedy decoding only, as [`SpecDecoder::calibrate`].
    pub fn set_pass_cost(&mut self, cost: Arc<PassCost>) {
        self.length.set_cost(cost);
    }

    /// The target's logits from which the last step's `i`-th emitted token was chosen
    /// (for log-probabilities).
    pub fn logits(&self, i: usize) -> &[f32] {
        &self.scored[i * self.vocab..(i + 1) * self.vocab]
    }

    /// One step on the session's current sequence. `history` is the prompt and every token
    /// emitted so far; its last token is the one not yet evaluated (the session holds
    /// `history.len() - 1` positions). Emits 1 to `limit` tokens into `out` (cleared
    /// first), each already recorded in `sampler` (history and grammar), and stops after a
    /// token for which `ends` is true or that finishes the grammar. Afterwards the session
    /// holds `history` and every emitted token but the last. The session must evaluate at
    /// least `draft_max + 1` tokens per pass (its `n_batch`).
    pub fn step(
        &mut self,
        session: &mut Session,
        sampler: &mut Sampler,
        history: &[u32],
        limit: usize,
        ends: &dyn Fn(u32) -> bool,
        out: &mut Vec<u32>,
    ) -> Result<(), SpecError> {
        out.clear();
        let Some(&pending) = history.last() else {
            return Err(SpecError::Config("a step needs at least one token".into()));
        };
        let seq = session.sequence();
        let pos0 = session.pos();
        // Room: the context, the emitted-token limit (the pass's own token is one of it).
        let room = session
            .n_ctx()
            .saturating_sub(pos0 + 1)
            .min(limit.saturating_sub(1));
        let k = self.length.take().min(room);
        let k = self.length.worth_scoring(k);
        self.draft.clear();
        self.q.clear();
        let t_draft = Instant::now();
        if k > 0 {
            let temperature = sampler.config().temperature;
            match &mut self.source {
                DraftSource::Ngram(n) => {
                    n.draft(history, k, &mut self.draft);
                }
                DraftSource::Model(m) => m.draft(
                    history,
                    k,
                    temperature,
                    self.draft_p_min,
                    &mut self.rng,
                    &mut self.draft,
                    &mut self.q,
                )?,
            }
        }
        // A last drafted token whose share of the pass costs more than it can earn is not
        // scored (only with a measured curve, so under greedy decoding only).
        let keep = self.length.worth_scoring(self.draft.len());
        self.draft.truncate(keep);
        if !self.q.is_empty() {
            self.q.truncate(keep * self.vocab);
        }
        let drafted = t_draft.elapsed();
        self.row.clear();
        self.row.push(pending);
        self.row.extend_from_slice(&self.draft);
        let t_verify = Instant::now();
        let logits = session.forward_scored(&[BatchSeq {
            seq,
            tokens: &self.row,
            logits: true,
            prompt_rows: 0,
        }])?;
        self.scored.clear();
        self.scored.extend_from_slice(logits);
        let verified = t_verify.elapsed();
        let t_sample = Instant::now();
        let n = self.draft.len();
        let mut accepted = 0;
        for j in 0..=n {
            let l = &self.scored[j * self.vocab..(j + 1) * self.vocab];
            let tok = if j < n {
                let q = (!self.q.is_empty()).then(|| &self.q[j * self.vocab..(j + 1) * self.vocab]);
                sampler.verify_draft(l, self.draft[j], q)?
            } else {
                sampler.try_sample(l)?
            };
            sampler.accept(tok);
            out.push(tok);
            let hit = j < n && tok == self.draft[j];
            accepted += usize::from(hit);
            let done = ends(tok) || sampler.matcher().is_some_and(|m| m.is_finished());
            if !hit || done {
                break;
            }
        }
        // The session keeps `history` and the emitted tokens but the last: the rejected
        // positions go, and only now do its full pages become findable.
        let sampled = t_sample.elapsed();
        let t_rollback = Instant::now();
        session.settle(seq, pos0 + out.len())?;
        let rolled_back = t_rollback.elapsed();
        // A draft model's time counts against what drafting earns, in decode steps: its
        // time over this step's pass, whose cost in steps the measured curve knows (a
        // same-step ratio, as unaffected by the machine's load as the curve). Only under
        // greedy decoding with a measured curve (see `calibrate`).
        if let Some(cost) = self.length.cost() {
            self.pass_steps += cost.of(self.row.len());
        }
        // A draft that stopped at once (its first token below `draft_p_min`) still cost
        // its pass.
        if let (DraftSource::Model(m), Some(cost), true) = (&self.source, self.length.cost(), k > 0)
        {
            let step = verified.as_secs_f64() / cost.of(self.row.len());
            let drafting = drafted.saturating_sub(m.catch_up_time()).as_secs_f64();
            if step > 0.0 {
                self.length.record_draft_cost(drafting / step);
            }
        }
        self.length.update(n, accepted);
        self.stats.draft_time += drafted;
        self.stats.verify_time += verified;
        self.stats.sample_time += sampled;
        self.stats.rollback_time += rolled_back;
        self.stats.emitted += out.len() as u64;
        if n > 0 {
            self.stats.draft_steps += 1;
            self.stats.drafted += n as u64;
            self.stats.accepted += accepted as u64;
        } else {
            self.stats.plain_steps += 1;
        }
        Ok(())
    }
}
