//! Routing: one token's router logits to the experts it goes to and their weights.
//!
//! The order of operations is llama.cpp's (`build_moe_ffn`), so that the same experts are
//! chosen and their outputs are weighted and summed alike:
//!
//! 1. `probs = softmax(logits)` over **all** experts (or `sigmoid` of each logit);
//! 2. the `k` largest probabilities are selected, best first (slot 0 is the most probable);
//! 3. `weights[j] = probs[selected[j]]`;
//! 4. with normalisation, `weights[j] /= max(Σ weights, 2⁻¹⁴)` (the sum taken in f64 in
//!    slot order, as ggml's `sum_rows`; the clamp is llama.cpp's guard against 0);
//! 5. with a scale other than 0 or 1, `weights[j] *= scale`.
//!
//! Softmax over all experts followed by renormalisation of the selected ones equals a
//! softmax over the selected logits (Mixtral's formulation) up to rounding.
//!
//! **Ties** (two equal probabilities competing for a slot) go to the lower expert index, and
//! among equals the lower index takes the earlier slot. llama.cpp sorts with `std::sort` and
//! a strict greater-than, which leaves ties unspecified; libstdc++ sorts up to 16 elements
//! by insertion, which keeps the lower index first, so the two agree for up to 16 experts
//! (Mixtral). Exact ties of f32 probabilities do not arise from real activations.

use super::config::{Gating, MoeConfig};
use crate::blocks::act::softmax_inplace;

/// llama.cpp's floor for the sum of the selected weights (the smallest normal f16).
pub const WEIGHT_SUM_FLOOR: f32 = 1.0 / 16384.0;

/// Routes one token: `probs` holds its `n_expert` router logits and is overwritten with the
/// gated probabilities; `experts` and `weights` (`n_expert_used` each) receive the selected
/// experts, best first, and their weights.
///
/// # Panics
/// If `probs.len() != cfg.n_expert` or `experts`/`weights` are not `cfg.n_expert_used`
/// long.
pub fn route_token(cfg: &MoeConfig, probs: &mut [f32], experts: &mut [u32], weights: &mut [f32]) {
    let k = cfg.n_expert_used;
    assert_eq!(probs.len(), cfg.n_expert, "route_token: logits per token");
    assert_eq!(experts.len(), k, "route_token: expert slots");
    assert_eq!(weights.len(), k, "route_token: weight slots");
    match cfg.gating {
        Gating::Softmax => softmax_inplace(probs),
        Gating::Sigmoid => probs
            .iter_mut()
            .for_each(|p| *p = 1.0 / (1.0 + (-*p).exp())),
    }
    top_k(probs, experts);
    for (w, &e) in weights.iter_mut().zip(experts.iter()) {
        *w = probs[e as usize];
    }
    if cfg.norm_weights {
        let sum = weights.iter().map(|&w| w as f64).sum::<f64>() as f32;
        let sum = sum.max(WEIGHT_SUM_FLOOR);
        weights.iter_mut().for_each(|w| *w /= sum);
    }
    if let Some(s) = cfg.weights_scale {
        weights.iter_mut().for_each(|w| *w *= s);
    }
}

/// The indices of the `out.len()` largest values of `p`, largest first; among equal values
/// the lower index first (a later index displaces an earlier one only when strictly greater).
/// One pass over `p` with an insertion into the short sorted list.
pub fn top_k(p: &[f32], out: &mut [u32]) {
    let k = out.len();
    if k == 0 {
        return;
    }
    let mut n = 0;
    for (e, &v) in p.iter().enumerate() {
        // Full, and not strictly above the last (NaN never is): skip.
        if n == k && v.partial_cmp(&p[out[k - 1] as usize]) != Some(std::cmp::Ordering::Greater) {
            continue;
        }
        // Fill the next free slot, or replace the last; move up past every strictly smaller.
        let mut i = n.min(k - 1);
        while i > 0 && v > p[out[i - 1] as usize] {
            out[i] = out[i - 1];
            i -= 1;
        }
        out[i] = e as u32;
        n = (n + 1).min(k);
    }
}
