//! The element-wise and row-wise f32 operations of the forward pass, written once for every
//! architecture: normalisation (RMSNorm, LayerNorm), RoPE (tables, pairing styles, Llama 3
//! frequency factors), feed-forward activations, residual adds and soft-capping. They follow
//! ggml's arithmetic where rounding could show in the output (double accumulation in the
//! norms, RoPE angles by repeated multiplication, GELU through an f16 table).

pub(crate) mod act;
mod norm;
mod rope;

pub(crate) use act::{activation_inplace, gated_activation};
pub(crate) use norm::{Norm, rms_norm_inplace};
pub(crate) use rope::{llama3_rope_factors, rope_apply, rope_table_with_factors};

/// `x += y`.
pub(crate) fn add_inplace(x: &mut [f32], y: &[f32]) {
    for (a, &b) in x.iter_mut().zip(y) {
        *a += b;
    }
}

/// `x = cap · tanh(x / cap)` (Gemma 2 attention scores and final logits).
pub(crate) fn softcap_inplace(x: &mut [f32], cap: f32) {
    for v in x.iter_mut() {
        *v = cap * (*v / cap).tanh();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn softcap_bounds_values_and_keeps_small_ones() {
        let mut x = [0.0f32, 1.0, -1.0, 100.0, -1e6];
        softcap_inplace(&mut x, 30.0);
        assert_eq!(x[0], 0.0);
        assert!((x[1] - 30.0 * (1.0f32 / 30.0).tanh()).abs() < 1e-7);
        assert!((x[1] - 1.0).abs() < 1e-3 && (x[2] + 1.0).abs() < 1e-3);
        assert!(x[3] < 30.0 && x[3] > 29.0 && x[4] == -30.0);
    }
}
