//! A draft model: a smaller (or more quantized) model with the target's vocabulary,
//! running its own session alongside the target's and kept in step with the accepted
//! text.

use std::sync::Arc;
use std::time::{Duration, Instant};

use kiln_model::{Logits, Model, Session};
use kiln_sample::Vocab;
use rand::RngExt;
use rand_chacha::ChaCha20Rng;

use crate::SpecError;

/// Checks that a draft model can draft for a target: the same tokens, token for token,
/// the same end-of-generation ids, and the same number of logits.
pub fn check_vocab(
    target: &Vocab,
    target_model: &Model,
    draft: &Vocab,
    draft_model: &Model,
) -> Result<(), SpecError> {
    if target.len() != draft.len() {
        return Err(SpecError::VocabSize {
            target: target.len(),
            draft: draft.len(),
        });
    }
    for id in 0..target.len() as u32 {
        let (t, d) = (target.token_bytes(id), draft.token_bytes(id));
        if t != d {
            return Err(SpecError::VocabToken {
                id,
                target: String::from_utf8_lossy(t).into_owned(),
                draft: String::from_utf8_lossy(d).into_owned(),
            });
        }
    }
    if target.eog_ids() != draft.eog_ids() {
        return Err(SpecError::VocabEog {
            target: target.eog_ids().to_vec(),
            draft: draft.eog_ids().to_vec(),
        });
    }
    let (t, d) = (
        target_model.config().vocab_size,
        draft_model.config().vocab_size,
    );
    if t != d {
        return Err(SpecError::LogitCount {
            target: t,
            draft: d,
        });
    }
    Ok(())
}

/// A draft model's session and the tokens its KV cache holds.
pub struct DraftModel {
    session: Session,
    /// The tokens evaluated in `session`, in order.
    tokens: Vec<u32>,
    /// How long the last draft spent evaluating text the session had not seen when that
    /// was more than the step's own tokens (the prompt, or the text emitted while drafting
    /// was paused): a one-off, not the cost of drafting.
    catch_up: Duration,
}

impl DraftModel {
    /// A draft session over `model` for sequences of up to `n_ctx` positions (check the
    /// vocabulary with [`check_vocab`] first).
    pub fn new(model: Arc<Model>, n_ctx: usize) -> DraftModel {
        DraftModel {
            session: Session::new(model, n_ctx, 512),
            tokens: Vec::with_capacity(n_ctx),
            catch_up: Duration::ZERO,
        }
    }

    /// A draft over an existing session (its KV options chosen by the caller); the
    /// session must be empty.
    pub fn with_session(session: Session) -> DraftModel {
        let cap = session.n_ctx();
        DraftModel {
            session,
            tokens: Vec::with_capacity(cap),
            catch_up: Duration::ZERO,
        }
    }

    /// The time the last [`DraftModel::draft`] spent catching up on text it had not seen
    /// beyond one step's worth (the prompt, or the text emitted while drafting was paused).
    pub fn catch_up_time(&self) -> Duration {
        self.catch_up
    }

    /// Appends up to `k` drafted tokens continuing `history` to `out`. With a temperature
    /// above zero each token is drawn from the draft's `softmax(logits / temperature)` and
    /// that distribution is appended to `q` (one vocabulary-sized row per token), for the
    /// rejection rule; at zero the draft is its argmax (deterministic, no `q`).
    ///
    /// The draft stops before a position where the draft model's most probable token has
    /// a probability below `p_min` (of `softmax(logits)` greedy, of the distribution drawn
    /// from when sampling): such a token is likely rejected, and every drafted token after
    /// it costs a draft pass and a scored position for nothing. The stop depends only on
    /// the draft's own distributions, so the rejection rule stays exact.
    #[allow(clippy::too_many_arguments)]
    pub fn draft(
        &mut self,
        history: &[u32],
        k: usize,
        temperature: f32,
        p_min: f32,
        rng: &mut ChaCha20Rng,
        out: &mut Vec<u32>,
        q: &mut Vec<f32>,
    ) -> Result<(), SpecError> {
        self.catch_up = Duration::ZERO;
        if k == 0 || history.is_empty() {
            return Ok(());
        }
        // Keep the common prefix, and leave at least one token to evaluate for logits.
        let common = self
            .tokens
            .iter()
            .zip(history)
            .take_while(|(a, b)| a == b)
            .count()
            .min(history.len() - 1);
        self.session.truncate(common);
        self.tokens.truncate(common);
        let room = self.session.n_ctx().saturating_sub(history.len());
        let k = k.min(room + 1);
        if k == 0 {
            return Ok(());
        }
        let t0 = Instant::now();
        let mut logits = self
            .session
            .forward(&history[common..], Logits::Last)
            .map_err(SpecError::Draft)?;
        if history.len() - common > k + 1 {
            self.catch_up = t0.elapsed();
        }
        self.tokens.extend_from_slice(&history[common..]);
        for i in 0..k {
            let tok = if temperature > 0.0 {
                let row = q.len();
                softmax_into(logits, temperature, q);
                let top = q[row..].iter().copied().fold(0.0f32, f32::max);
                if top < p_min {
                    q.truncate(row);
                    break;
                }
                draw(&q[row..], rng.random::<f64>())
            } else {
                let tok = kiln_sample::argmax(logits);
                if p_min > 0.0 && kiln_sample::logprob(logits, tok).exp() < p_min {
                    break;
                }
                tok
            };
            out.push(tok);
            if i + 1 == k {
                break;
            }
            logits = self
                .session
                .forward(&[tok], Logits::Last)
                .map_err(SpecError::Draft)?;
            self.tokens.push(tok);
        }
        Ok(())
    }
}

/// Appends `softmax(logits / t)` to `q`.
fn softmax_into(logits: &[f32], t: f32, q: &mut Vec<f32>) {
    let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let start = q.len();
    let mut sum = 0.0f64;
    q.extend(logits.iter().map(|&l| {
        let e = ((l - max) / t).exp();
        sum += f64::from(e);
        e
    }));
    let inv = (1.0 / sum) as f32;
    q[start..].iter_mut().for_each(|v| *v *= inv);
}

/// The token whose cumulative probability first exceeds `u` (in `[0, 1)`).
fn draw(q: &[f32], u: f64) -> u32 {
    let mut cum = 0.0f64;
    let mut last = 0;
    for (i, &p) in q.iter().enumerate() {
        if p > 0.0 {
            cum += f64::from(p);
            last = i as u32;
            if cum > u {
                return i as u32;
            }
        }
    }
    last
}
