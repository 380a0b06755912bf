//! Perplexity as llama.cpp's `llama-perplexity` computes it.
//!
//! The text is tokenized once (with BOS when the vocabulary adds one) and cut into
//! `⌊n_tokens / n_ctx⌋` chunks of `n_ctx` tokens. Each chunk is evaluated from an empty
//! cache with its first token replaced by BOS (when the vocabulary adds one), and only the
//! second half is scored: the logits at positions `n_ctx/2 ..= n_ctx−2` predict the tokens
//! that follow them, `n_ctx − 1 − n_ctx/2` predictions per chunk, so every scored token has
//! at least half a context before it. PPL = exp(mean NLL); its uncertainty is
//! `PPL · sd(NLL)/√(count−1)` (llama.cpp's "±").

use serde::{Deserialize, Serialize};

use crate::BenchError;

/// How a token sequence is cut into chunks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChunkPlan {
    pub n_ctx: usize,
    pub n_chunks: usize,
}

impl ChunkPlan {
    /// Plans `requested` chunks (all that fit when `None`) of `n_ctx` tokens over
    /// `n_tokens` tokens. llama.cpp's rule: the text must hold at least `2·n_ctx` tokens.
    pub fn new(
        n_tokens: usize,
        n_ctx: usize,
        requested: Option<usize>,
    ) -> Result<ChunkPlan, BenchError> {
        if n_ctx < 4 {
            return Err(BenchError::ContextTooSmall { n_ctx });
        }
        if n_tokens < 2 * n_ctx {
            return Err(BenchError::TooFewTokens {
                n_tokens,
                needed: 2 * n_ctx,
                n_ctx,
            });
        }
        let max = n_tokens / n_ctx;
        let n_chunks = requested.map_or(max, |r| r.min(max));
        if n_chunks == 0 {
            return Err(BenchError::NoChunks);
        }
        Ok(ChunkPlan { n_ctx, n_chunks })
    }

    /// The first scored position: `n_ctx / 2`.
    pub fn first(&self) -> usize {
        self.n_ctx / 2
    }

    /// Predictions scored per chunk: `n_ctx − 1 − n_ctx/2`.
    pub fn scored_per_chunk(&self) -> usize {
        self.n_ctx - 1 - self.first()
    }

    /// The token range of chunk `i`.
    pub fn chunk(&self, i: usize) -> std::ops::Range<usize> {
        i * self.n_ctx..(i + 1) * self.n_ctx
    }
}

/// The score of one prediction: `−log p(target)` and, for reports, the target's logit and
/// probability.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct TokenScore {
    pub nll: f64,
    pub logit: f32,
    pub prob: f32,
}

/// Scores `target` under `logits` with llama.cpp's arithmetic: the maximum in f32, the sum
/// of `expf(logit − max)` in f64, `log` of the sum in f64.
pub fn score_token(logits: &[f32], target: usize) -> TokenScore {
    let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let sum_exp: f64 = logits.iter().map(|&l| f64::from((l - max).exp())).sum();
    let t = logits[target];
    let log_softmax = f64::from(t - max) - sum_exp.ln();
    TokenScore {
        nll: -log_softmax,
        logit: t,
        prob: (t - max).exp() / sum_exp as f32,
    }
}

/// Running sums of negative log-likelihoods.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct NllSum {
    pub sum: f64,
    pub sum2: f64,
    pub count: usize,
}

impl NllSum {
    pub fn add(&mut self, nll: f64) {
        self.sum += nll;
        self.sum2 += nll * nll;
        self.count += 1;
    }

    /// exp(mean NLL); `None` before the first prediction.
    pub fn ppl(&self) -> Option<f64> {
        (self.count > 0).then(|| (self.sum / self.count as f64).exp())
    }

    /// The estimate with llama.cpp's uncertainty; the uncertainty is `None` with fewer
    /// than two predictions or a non-positive variance (llama.cpp prints an error then).
    pub fn estimate(&self) -> Option<PplEstimate> {
        let ppl = self.ppl()?;
        let n = self.count as f64;
        let mean = self.sum / n;
        let var = self.sum2 / n - mean * mean;
        let stderr = (var > 0.0 && self.count > 1).then(|| (var / (n - 1.0)).sqrt() * ppl);
        Some(PplEstimate {
            ppl,
            ppl_stderr: stderr,
            count: self.count,
        })
    }
}

/// A perplexity figure.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct PplEstimate {
    pub ppl: f64,
    pub ppl_stderr: Option<f64>,
    /// Predictions scored.
    pub count: usize,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plan_follows_llama_perplexity() {
        let p = ChunkPlan::new(2000, 512, None).expect("fits");
        assert_eq!(p.n_chunks, 3); // ⌊2000/512⌋
        assert_eq!((p.first(), p.scored_per_chunk()), (256, 255));
        assert_eq!(p.chunk(2), 1024..1536);
        assert_eq!(
            ChunkPlan::new(2000, 512, Some(2)).ok().map(|p| p.n_chunks),
            Some(2)
        );
        assert_eq!(
            ChunkPlan::new(2000, 512, Some(9)).ok().map(|p| p.n_chunks),
            Some(3)
        );
        assert!(matches!(
            ChunkPlan::new(1023, 512, None),
            Err(BenchError::TooFewTokens { needed: 1024, .. })
        ));
        assert!(matches!(
            ChunkPlan::new(2000, 512, Some(0)),
            Err(BenchError::NoChunks)
        ));
        // Odd contexts: first = 3, scored = 7 − 1 − 3 = 3.
        let odd = ChunkPlan::new(20, 7, None).expect("fits");
        assert_eq!(
            (odd.first(), odd.scored_per_chunk(), odd.n_chunks),
            (3, 3, 2)
        );
    }

    #[test]
    fn token_score_is_the_log_softmax() {
        // Uniform over 4: nll = ln 4, p = 1/4.
        let s = score_token(&[2.0, 2.0, 2.0, 2.0], 1);
        assert!((s.nll - 4f64.ln()).abs() < 1e-12);
        assert!((s.prob - 0.25).abs() < 1e-7);
        // Logits ln(1), ln(3): p(1) = 3/4.
        let s = score_token(&[0.0, 3f32.ln()], 1);
        assert!((s.nll - (4.0f64 / 3.0).ln()).abs() < 1e-7);
    }

    #[test]
    fn estimate_matches_hand_computed_uncertainty() {
        let mut s = NllSum::default();
        for nll in [1.0, 2.0, 3.0] {
            s.add(nll);
        }
        let e = s.estimate().expect("non-empty");
        // mean 2 → ppl e²; population var 2/3; stderr = e² · √((2/3)/2).
        assert!((e.ppl - 2f64.exp()).abs() < 1e-12);
        let want = 2f64.exp() * (1.0f64 / 3.0).sqrt();
        assert!((e.ppl_stderr.expect("positive variance") - want).abs() < 1e-12);
        assert_eq!(e.count, 3);
        assert_eq!(NllSum::default().estimate(), None);
    }
}
