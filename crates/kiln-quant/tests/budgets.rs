//! Per-type error budgets of a quantized dot against the exact dot of the dequantized
//! weights with the original f32 activations.
//!
//! The weights are random *quantized* blocks, so the only error is the activations'
//! conversion (plus float rounding). For a block of activations with largest magnitude
//! `amax`, each converted value is off by at most `amax * budget`, so
//!
//! ```text
//! |dot - exact| <= budget * sum_i (|w_i| + offset_i) * amax(block of i)
//! ```
//!
//! (`offset_i`: Q4_1's `|m|`, Q4_K's `|dmin * m_j|`, which the kernels multiply with the
//! activation block sums.) The budgets are derived, not fitted:
//! Q8_0/Q8_1: rounding to 1/254 of amax plus the f16 rounding of `d` (2^-11 · 127/127);
//! Q8_K: 1/254 (f32 scale); F16: 2^-11 relative; BF16: 2^-8 relative; F32: float rounding.

mod common;

use common::*;
use kiln_quant::vec_dot_type;

#[test]
fn every_weight_type_has_a_budget() {
    for ty in kiln_quant::supported_types() {
        assert!(BUDGETS.iter().any(|(t, _)| *t == ty), "no budget for {ty}");
    }
}

#[test]
fn quantized_dots_stay_within_their_type_budget() {
    for ty in weight_types() {
        let act = vec_dot_type(ty).expect("supported");
        let mut worst = 0.0f64;
        for seed in 0..200u64 {
            let mut rng = SeedRng::new(seed * 7 + ty.id() as u64);
            let nb = if ty.block_elems() == 256 {
                1 + seed as usize % 4
            } else {
                1 + seed as usize % 40
            };
            let nb = if ty.block_elems() == 1 { nb * 32 } else { nb };
            let w = random_weights(ty, nb, &mut rng);
            let x: Vec<f32> = (0..elems(ty, nb)).map(|_| rng.normal()).collect();
            let exact: f64 = dequant(ty, &w)
                .iter()
                .zip(&x)
                .map(|(w, x)| *w as f64 * *x as f64)
                .sum();
            let lim = budget_bound(ty, &w, &x);
            for k in tables() {
                let a = quantize(k, act, &x);
                let got = k.dot(ty, &w, &a).expect("dot") as f64;
                let err = (got - exact).abs();
                assert!(
                    err <= lim,
                    "{} {ty}: error {err:e} over budget {lim:e} (seed {seed})",
                    k.isa()
                );
                worst = worst.max(err / lim);
            }
        }
        // The bound is worst-case; typical errors should sit well inside it, or the budget
        // would not catch a systematic bias.
        assert!(worst < 0.9, "{ty}: worst error/budget {worst}");
    }
}
