//! The stateful sampler: grammar mask → logit bias → the configured stages → draw.
//!
//! Randomness comes from a per-request ChaCha20 stream seeded by `seed` (and a stream
//! number for forked continuations), and every sort is total (ties by id), so the same
//! seed, logits and options give the same tokens whatever the thread count or batch.

use std::sync::Arc;
use std::time::{Duration, Instant};

use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha20Rng;

use crate::candidates::{Candidates, desc};
use crate::config::{SamplerConfig, Stage};
use crate::dry::Dry;
use crate::grammar::{MatchError, Matcher};
use crate::history::History;
use crate::transforms::{LogitBias, MinP, Penalties, Temperature, TopK, TopP, TypicalP};
use crate::vocab::{TokenMask, Vocab};

/// Why no token could be drawn.
#[derive(Debug, thiserror::Error, Clone, PartialEq)]
pub enum SampleError {
    #[error("no token is left to sample (every candidate was masked or banned)")]
    NoCandidates,
    #[error(transparent)]
    Grammar(#[from] MatchError),
}

/// Time spent computing grammar masks.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct MaskStats {
    /// Masks computed (one per constrained step).
    pub steps: u64,
    pub total: Duration,
    pub max: Duration,
}

/// A stateful sampler: the chain, its random stream, the recent-token window and, when
/// constrained, the grammar matcher.
#[derive(Clone, Debug)]
pub struct Sampler {
    cfg: SamplerConfig,
    rng: ChaCha20Rng,
    history: History,
    cands: Candidates,
    bias: LogitBias,
    penalties: Penalties,
    dry: Dry,
    typical: TypicalP,
    vocab: Option<Arc<Vocab>>,
    matcher: Option<Matcher>,
    mask: TokenMask,
    stats: MaskStats,
}

impl Sampler {
    /// A sampler with the given settings (validate them first with
    /// [`SamplerConfig::validate`]). Without a vocabulary DRY has no sequence breakers;
    /// use [`Sampler::with_vocab`] to resolve them.
    pub fn new(cfg: SamplerConfig) -> Sampler {
        Sampler::build(cfg, None)
    }

    /// A sampler that knows the vocabulary (for DRY's sequence breakers and grammars).
    pub fn with_vocab(cfg: SamplerConfig, vocab: Arc<Vocab>) -> Sampler {
        Sampler::build(cfg, Some(vocab))
    }

    fn build(cfg: SamplerConfig, vocab: Option<Arc<Vocab>>) -> Sampler {
        let rng = ChaCha20Rng::seed_from_u64(cfg.seed);
        let breakers = match &vocab {
            Some(v) if !cfg.dry_sequence_breakers.is_empty() && cfg.dry_multiplier != 0.0 => {
                Some(v.tokens_containing(&cfg.dry_sequence_breakers))
            }
            _ => None,
        };
        let dry = Dry::new(
            cfg.dry_multiplier,
            cfg.dry_base,
            cfg.dry_allowed_length,
            cfg.dry_last_n,
            breakers,
        );
        let window = if dry.enabled() {
            cfg.repeat_last_n.max(cfg.dry_last_n)
        } else {
            cfg.repeat_last_n
        };
        let mut bias = cfg.logit_bias.clone();
        bias.sort_by_key(|b| b.0);
        Sampler {
            history: History::new(window),
            cands: Candidates::default(),
            bias: LogitBias { biases: bias },
            penalties: Penalties::new(
                cfg.repeat_last_n,
                cfg.repeat_penalty,
                cfg.frequency_penalty,
                cfg.presence_penalty,
            ),
            dry,
            typical: TypicalP::new(cfg.typical_p),
            vocab,
            matcher: None,
            mask: TokenMask::default(),
            stats: MaskStats::default(),
            rng,
            cfg,
        }
    }

    /// Constrains every following token with `matcher` (build it over the same vocabulary).
    pub fn set_grammar(&mut self, matcher: Matcher) {
        self.matcher = Some(matcher);
    }

    /// The grammar state, if constrained.
    pub fn matcher(&self) -> Option<&Matcher> {
        self.matcher.as_ref()
    }

    pub fn vocab(&self) -> Option<&Arc<Vocab>> {
        self.vocab.as_ref()
    }

    /// The settings.
    pub fn config(&self) -> &SamplerConfig {
        &self.cfg
    }

    /// Grammar-mask timings so far.
    pub fn mask_stats(&self) -> MaskStats {
        self.stats
    }

    /// A copy for another continuation of the same context: same settings, window and
    /// grammar state, with ChaCha stream `stream` of the same seed (stream 0 is the one
    /// [`Sampler::new`] starts on).
    pub fn fork(&self, stream: u64) -> Sampler {
        let mut s = self.clone();
        s.rng = ChaCha20Rng::seed_from_u64(self.cfg.seed);
        s.rng.set_stream(stream);
        s
    }

    /// Records a token as part of the context (prompt tokens too, so the penalties see
    /// them). The grammar is advanced by [`Sampler::try_sample`], not here.
    pub fn accept(&mut self, id: u32) {
        self.history.push(id);
    }

    /// Picks the next token from raw logits. Infallible without a grammar; with one, use
    /// [`Sampler::try_sample`] (this returns the raw argmax if the grammar allows nothing).
    pub fn sample(&mut self, logits: &[f32]) -> u32 {
        match self.try_sample(logits) {
            Ok(id) => id,
            Err(_) => crate::argmax(logits),
        }
    }

    /// Picks the next token from raw logits; with a grammar, only an allowed token, and the
    /// grammar advances over it.
    pub fn try_sample(&mut self, logits: &[f32]) -> Result<u32, SampleError> {
        self.fill(logits)?;
        let id = self.run_chain()?;
        if let Some(m) = self.matcher.as_mut() {
            m.accept_token(id)?;
        }
        Ok(id)
    }

    /// Verifies one drafted token of speculative decoding against the target's raw
    /// `logits` at its position and returns the token to emit: `draft` itself when it is
    /// accepted, otherwise a replacement. `q` is the full-vocabulary distribution the draft
    /// was drawn from; `None` means the draft was deterministic (q one-hot at `draft`).
    ///
    /// The rule is the standard speculative-sampling one: accept with probability
    /// `min(1, p(draft) / q(draft))`, else draw from `norm(max(0, p − q))`, where `p` is
    /// this sampler's distribution (grammar mask, bias and every stage of the chain), so
    /// the emitted token is distributed exactly as [`Sampler::try_sample`]'s. Greedy
    /// (temperature ≤ 0) emits the chain's choice, so a draft is accepted exactly when it
    /// equals the token plain decoding would pick. The grammar advances over the emitted
    /// token.
    pub fn verify_draft(
        &mut self,
        logits: &[f32],
        draft: u32,
        q: Option<&[f32]>,
    ) -> Result<u32, SampleError> {
        if self.cfg.temperature <= 0.0 {
            return self.try_sample(logits);
        }
        self.fill(logits)?;
        self.run_stages()?;
        let id = speculative_draw(&mut self.cands, draft, q, &mut self.rng)?;
        if let Some(m) = self.matcher.as_mut() {
            m.accept_token(id)?;
        }
        Ok(id)
    }

    /// The candidates for raw `logits`: every token, or those the grammar allows.
    fn fill(&mut self, logits: &[f32]) -> Result<(), SampleError> {
        match self.matcher.as_mut() {
            Some(m) => {
                let t0 = Instant::now();
                m.fill_mask(&mut self.mask)?;
                let dt = t0.elapsed();
                self.stats.steps += 1;
                self.stats.total += dt;
                self.stats.max = self.stats.max.max(dt);
                self.cands.fill_from(logits, self.mask.iter());
            }
            None => self.cands.fill_dense(logits),
        }
        Ok(())
    }

    fn run_chain(&mut self) -> Result<u32, SampleError> {
        self.run_stages()?;
        let c = &self.cands;
        if self.cfg.temperature <= 0.0 {
            return c
                .c
                .iter()
                .copied()
                .min_by(desc)
                .map(|x| x.id)
                .ok_or(SampleError::NoCandidates);
        }
        draw(c, &mut self.rng)
    }

    /// Bias, then the configured stages, over the candidates.
    fn run_stages(&mut self) -> Result<(), SampleError> {
        let c = &mut self.cands;
        self.bias.apply(c);
        if c.len() == 0 {
            return Err(SampleError::NoCandidates);
        }
        let greedy = self.cfg.temperature <= 0.0;
        // Truncations keep the best token, so greedy can skip them unless typical-p (which
        // may drop the best) runs after them.
        let skip_truncation = greedy && self.cfg.typical_p >= 1.0;
        for &stage in &self.cfg.order {
            match stage {
                Stage::Penalties => self.penalties.apply(c, &self.history),
                Stage::Dry => self.dry.apply(c, &self.history),
                Stage::TopK if !skip_truncation => TopK { k: self.cfg.top_k }.apply(c),
                Stage::TypicalP => self.typical.apply(c),
                Stage::TopP if !skip_truncation => TopP { p: self.cfg.top_p }.apply(c),
                Stage::MinP if !skip_truncation => MinP { p: self.cfg.min_p }.apply(c),
                Stage::Temperature => Temperature {
                    t: self.cfg.temperature,
                }
                .apply(c),
                _ => {}
            }
        }
        Ok(())
    }
}

/// One draw from `softmax(logits)` of the candidates.
fn draw(c: &Candidates, rng: &mut ChaCha20Rng) -> Result<u32, SampleError> {
    match c.c.len() {
        0 => return Err(SampleError::NoCandidates),
        1 => return Ok(c.c[0].id),
        _ => {}
    }
    let (sum, max) = c.partition();
    if !(sum.is_finite() && sum > 0.0) {
        return Err(SampleError::NoCandidates);
    }
    let target = rng.random::<f64>() * sum;
    let mut cum = 0.0f64;
    let mut last = c.c[0].id;
    for x in &c.c {
        let w = ((x.logit - max) as f64).exp();
        if w > 0.0 {
            cum += w;
            last = x.id;
            if cum > target {
                return Ok(x.id);
            }
        }
    }
    Ok(last)
}

/// The speculative-sampling draw over the candidates (`p = softmax` of their logits):
/// `draft` with probability `min(1, p(draft) / q(draft))`, else a draw from
/// `norm(max(0, p − q))` (`q` one-hot at `draft` when `None`).
fn speculative_draw(
    c: &mut Candidates,
    draft: u32,
    q: Option<&[f32]>,
    rng: &mut ChaCha20Rng,
) -> Result<u32, SampleError> {
    if c.c.is_empty() {
        return Err(SampleError::NoCandidates);
    }
    let (sum, max) = c.partition();
    if !(sum.is_finite() && sum > 0.0) {
        return Err(SampleError::NoCandidates);
    }
    let p_of = |logit: f32| ((logit - max) as f64).exp() / sum;
    let q_of = |id: u32| match q {
        Some(q) => q.get(id as usize).map_or(0.0, |&v| f64::from(v)),
        None => f64::from(u8::from(id == draft)),
    };
    let p_draft = c.position(draft).map_or(0.0, |i| p_of(c.c[i].logit));
    let q_draft = q_of(draft);
    // One uniform per verified position, drawn whatever p and q are, so the stream's use
    // does not depend on the values.
    let u = rng.random::<f64>();
    if q_draft > 0.0 && u * q_draft < p_draft {
        return Ok(draft);
    }
    let residual: f64 =
        c.c.iter()
            .map(|x| (p_of(x.logit) - q_of(x.id)).max(0.0))
            .sum();
    if !(residual.is_finite() && residual > 0.0) {
        // p ≤ q everywhere means p = q: a rejection has probability 0 then, but rounding
        // can still land here; p itself is the right distribution.
        return draw(c, rng);
    }
    let target = rng.random::<f64>() * residual;
    let mut cum = 0.0f64;
    let mut last = None;
    for x in &c.c {
        let w = (p_of(x.logit) - q_of(x.id)).max(0.0);
        if w > 0.0 {
            cum += w;
            last = Some(x.id);
            if cum > target {
                return Ok(x.id);
            }
        }
    }
    last.ok_or(SampleError::NoCandidates)
}
