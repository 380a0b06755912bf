//! Feed-forward activations: SiLU, and GELU-tanh through an f16 table as ggml's CPU backend
//! evaluates it, gated (`act(gate) · up`) or plain.

use std::sync::OnceLock;

use half::f16;

/// SiLU, `x * sigmoid(x)`, with the `expf` the gated form's kernel uses (glibc's, written
/// down: `kiln_quant::attn::expf`), so both forms give the same bits on every platform.
#[inline]
pub(crate) fn silu(x: f32) -> f32 {
    x / (1.0 + kiln_quant::attn::expf(-x))
}

/// GELU with the tanh approximation, as ggml's `gelu` and HF's `gelu_pytorch_tanh`, with
/// ggml's roundings: its `1 + a·x·x` compiles to one fused step (`fma(a·x, x, 1)`; C
/// compilers contract it wherever the CPU has FMA), which moves one entry of the f16 table
/// (at −1.999, by one f16 step) and so every FFN activation whose gate rounds there.
#[inline]
pub(crate) fn gelu_tanh(x: f32) -> f32 {
    const SQRT_2_OVER_PI: f32 = 0.797_884_6;
    const COEF_A: f32 = 0.044_715;
    0.5 * x * (1.0 + (SQRT_2_OVER_PI * x * (COEF_A * x).mul_add(x, 1.0)).tanh())
}

/// GELU-tanh of every f16 value, rounded to f16: ggml's CPU backend evaluates GELU by
/// looking up the f16-rounded input in such a table, so outputs match llama.cpp only if we do
/// the same.
fn gelu_f16_table() -> &'static [f16] {
    static TABLE: OnceLock<Vec<f16>> = OnceLock::new();
    TABLE.get_or_init(|| {
        (0..=u16::MAX)
            .map(|bits| f16::from_f32(gelu_tanh(f16::from_bits(bits).to_f32())))
            .collect()
    })
}

/// GELU-tanh as llama.cpp's CPU backend computes it: identity above 10, zero below -10,
/// otherwise the f16 table.
#[inline]
fn gelu_ggml(x: f32, table: &[f16]) -> f32 {
    if x <= -10.0 {
        0.0
    } else if x >= 10.0 {
        x
    } else {
        table[f16::from_f32(x).to_bits() as usize].to_f32()
    }
}

/// Elements per parallel task of [`gated_activation`]; below this many the call runs on the
/// calling thread (a prompt's FFN activation is millions of elements, a decode step's a few
/// thousand).
const ACT_PAR_CHUNK: usize = 1 << 15;

/// `gate = act(gate) * up`, the gated feed-forward nonlinearity. Elementwise, so splitting
/// it over threads changes no result.
pub(crate) fn gated_activation(gate: &mut [f32], up: &[f32], act: crate::config::Activation) {
    use rayon::prelude::*;
    assert_eq!(
        gate.len(),
        up.len(),
        "gated_activation: gate and up lengths differ"
    );
    if gate.len() >= 2 * ACT_PAR_CHUNK && rayon::current_num_threads() > 1 {
        gate.par_chunks_mut(ACT_PAR_CHUNK)
            .zip(up.par_chunks(ACT_PAR_CHUNK))
            .for_each(|(g, u)| gated_activation_serial(g, u, act));
    } else {
        gated_activation_serial(gate, up, act);
    }
}

fn gated_activation_serial(gate: &mut [f32], up: &[f32], act: crate::config::Activation) {
    use crate::config::Activation;
    match act {
        // `silu(g) · u` with glibc's `expf` written down (see `kiln_quant::attn::expf`),
        // vectorised where the CPU allows: the same bits as the scalar form everywhere.
        Activation::Silu => kiln_quant::attn::attn_kernels().silu_mul(gate, up),
        Activation::GeluTanh => {
            let table = gelu_f16_table();
            for (g, &u) in gate.iter_mut().zip(up) {
                *g = gelu_ggml(*g, table) * u;
            }
        }
    }
}

/// `x = act(x)`, the activation of a plain (ungated) feed-forward block (phi-2, GPT-2).
pub(crate) fn activation_inplace(x: &mut [f32], act: crate::config::Activation) {
    use crate::config::Activation;
    match act {
        Activation::Silu => x.iter_mut().for_each(|v| *v = silu(*v)),
        Activation::GeluTanh => {
            let table = gelu_f16_table();
            x.iter_mut().for_each(|v| *v = gelu_ggml(*v, table));
        }
    }
}

/// Softmax in place: `exp(x - max)` in f32, the sum in f64, then one multiply by its
/// inverse (the mixture-of-experts router's gating).
pub(crate) fn softmax_inplace(x: &mut [f32]) {
    let max = x.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let mut sum = 0.0f64;
    for v in x.iter_mut() {
        *v = (*v - max).exp();
        sum += *v as f64;
    }
    let inv = (1.0 / sum) as f32;
    for v in x.iter_mut() {
        *v *= inv;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gelu_tanh_matches_known_values() {
        assert!((gelu_tanh(0.0)).abs() < 1e-7);
        assert!((gelu_tanh(1.0) - 0.841_192).abs() < 1e-5);
        assert!((gelu_tanh(-1.0) + 0.158_808).abs() < 1e-5);
    }

    /// The one entry of the f16 table where the fused step of ggml's `1 + a·x·x` changes the
    /// result: llama.cpp (b10573, x86-64 with FMA) gives -0.0455017 (f16 `0xa9d3`) at
    /// -1.9990234 (its Gemma-3 FFN activations there, divided by `up`, are that value);
    /// the unfused `1 + a·x·x` lands the f32 GELU on the other side of the f16 midpoint,
    /// -0.0454712 (`0xa9d2`).
    #[test]
    fn the_gelu_table_rounds_as_ggml_builds_it_with_fma() {
        let table = gelu_f16_table();
        let x = f16::from_f32(-1.999_023_4);
        assert_eq!(table[x.to_bits() as usize], f16::from_f32(-0.045_501_71));
        assert_eq!(f16::from_f32(-0.045_501_71).to_bits(), 0xa9d3);
    }
}
