//! Log-probabilities of the raw model distribution (before any sampling transform).

/// A token with its natural-log probability.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct TokenLogprob {
    pub id: u32,
    pub logprob: f32,
}

/// The index of the largest logit (the lowest index among equal maxima, as llama.cpp).
pub fn argmax(logits: &[f32]) -> u32 {
    let mut best = 0usize;
    let mut best_v = f32::NEG_INFINITY;
    for (i, &v) in logits.iter().enumerate() {
        if v > best_v {
            best_v = v;
            best = i;
        }
    }
    best as u32
}

/// `log(sum(exp(logits)))`, summed in `f64` from the largest logit.
fn log_z(logits: &[f32]) -> f64 {
    let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let sum: f64 = logits.iter().map(|&v| ((v - max) as f64).exp()).sum();
    max as f64 + sum.ln()
}

/// `log_softmax(logits)[id]` given `log_z(logits)` (negative infinity for an `id` past the
/// end).
fn logprob_with(logits: &[f32], id: u32, log_z: f64) -> f32 {
    logits
        .get(id as usize)
        .map_or(f32::NEG_INFINITY, |&v| (v as f64 - log_z) as f32)
}

/// `log_softmax(logits)[id]`, as [`top_logprobs`] computes it.
pub fn logprob(logits: &[f32], id: u32) -> f32 {
    logprob_with(logits, id, log_z(logits))
}

/// `log_softmax(logits)[id]` and the `k` most likely tokens with their log-probabilities,
/// most likely first. `out` is cleared and refilled (reuse it to avoid allocation).
pub fn top_logprobs(logits: &[f32], id: u32, k: usize, out: &mut Vec<TokenLogprob>) -> f32 {
    let log_z = log_z(logits);
    out.clear();
    if k > 0 {
        // Keep the k best in a small sorted buffer: O(n log k).
        for (i, &v) in logits.iter().enumerate() {
            if out.len() < k || v > out[out.len() - 1].logprob {
                let at = out.partition_point(|e| e.logprob >= v);
                if out.len() == k {
                    out.pop();
                }
                out.insert(
                    at,
                    TokenLogprob {
                        id: i as u32,
                        logprob: v,
                    },
                );
            }
        }
        for e in out.iter_mut() {
            e.logprob = (e.logprob as f64 - log_z) as f32;
        }
    }
    logprob_with(logits, id, log_z)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn argmax_prefers_the_first_of_equal_maxima() {
        assert_eq!(argmax(&[1.0, 3.0, 3.0, 2.0]), 1);
    }

    #[test]
    fn top_logprobs_are_sorted_and_normalised() {
        let logits = [0.0f32, 2.0, 1.0, -1.0];
        let mut out = Vec::new();
        let lp = top_logprobs(&logits, 2, 3, &mut out);
        let z: f64 = logits.iter().map(|&v| (v as f64).exp()).sum();
        assert!((lp as f64 - (1.0 - z.ln())).abs() < 1e-6);
        assert_eq!(out.iter().map(|e| e.id).collect::<Vec<_>>(), vec![1, 2, 0]);
        let total: f64 = (0..4).map(|i| ((logits[i] as f64) - z.ln()).exp()).sum();
        assert!((total - 1.0).abs() < 1e-9);
    }
}
