//! Element-wise and row-wise f32 operations of the forward pass, written once for every
//! architecture. They follow ggml's arithmetic where rounding could show in the output
//! (double accumulation in RMSNorm, RoPE angles by repeated multiplication, GELU through an
//! f16 table).

use std::sync::OnceLock;

use half::f16;

/// `out = x / rms(x) * weight` over one row. The sum of squares is accumulated in f64 as
/// ggml does.
pub fn rms_norm(x: &[f32], weight: &[f32], eps: f32, out: &mut [f32]) {
    debug_assert_eq!(x.len(), weight.len());
    debug_assert_eq!(x.len(), out.len());
    let sum: f64 = x.iter().map(|&v| (v * v) as f64).sum();
    let mean = (sum / x.len() as f64) as f32;
    let scale = 1.0 / (mean + eps).sqrt();
    for ((o, &v), &w) in out.iter_mut().zip(x).zip(weight) {
        *o = (v * scale) * w;
    }
}

/// In-place RMSNorm of one row with a weight.
pub fn rms_norm_inplace(x: &mut [f32], weight: &[f32], eps: f32) {
    let sum: f64 = x.iter().map(|&v| (v * v) as f64).sum();
    let mean = (sum / x.len() as f64) as f32;
    let scale = 1.0 / (mean + eps).sqrt();
    for (v, &w) in x.iter_mut().zip(weight) {
        *v = (*v * scale) * w;
    }
}

/// `x += y`.
pub fn add_inplace(x: &mut [f32], y: &[f32]) {
    for (a, &b) in x.iter_mut().zip(y) {
        *a += b;
    }
}

/// SiLU, `x * sigmoid(x)`.
#[inline]
pub fn silu(x: f32) -> f32 {
    x / (1.0 + (-x).exp())
}

/// GELU with the tanh approximation, as ggml's `gelu` and HF's `gelu_pytorch_tanh`.
#[inline]
pub fn gelu_tanh(x: f32) -> f32 {
    const SQRT_2_OVER_PI: f32 = 0.797_884_6;
    const COEF_A: f32 = 0.044_715;
    0.5 * x * (1.0 + (SQRT_2_OVER_PI * x * (1.0 + COEF_A * x * x)).tanh())
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
pub fn gated_activation(gate: &mut [f32], up: &[f32], act: crate::config::Activation) {
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
        Activation::Silu => {
            for (g, &u) in gate.iter_mut().zip(up) {
                *g = silu(*g) * u;
            }
        }
        Activation::GeluTanh => {
            let table = gelu_f16_table();
            for (g, &u) in gate.iter_mut().zip(up) {
                *g = gelu_ggml(*g, table) * u;
            }
        }
    }
}

/// `x = act(x)`, the activation of a plain (ungated) feed-forward block (phi-2, GPT-2).
pub fn activation_inplace(x: &mut [f32], act: crate::config::Activation) {
    use crate::config::Activation;
    match act {
        Activation::Silu => x.iter_mut().for_each(|v| *v = silu(*v)),
        Activation::GeluTanh => {
            let table = gelu_f16_table();
            x.iter_mut().for_each(|v| *v = gelu_ggml(*v, table));
        }
    }
}

/// Numerically stable softmax in place.
pub fn softmax_inplace(x: &mut [f32]) {
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

/// The cos/sin table of one position: `table[2i] = cos θ_i`, `table[2i+1] = sin θ_i`,
/// `θ_i = pos · scale · base^(-2i/n_rot)`, the angle computed by repeated multiplication as
/// ggml does so rounding matches.
pub fn rope_table(pos: usize, n_rot: usize, base: f32, freq_scale: f32, table: &mut [f32]) {
    let theta_scale = base.powf(-2.0 / n_rot as f32);
    let mut theta_extrap = pos as f32;
    for i in 0..n_rot / 2 {
        let theta = freq_scale * theta_extrap;
        table[2 * i] = theta.cos();
        table[2 * i + 1] = theta.sin();
        theta_extrap *= theta_scale;
    }
}

/// Rotates the first `n_rot` dimensions of each head in `x` (`n_heads` heads of
/// `head_dim`), using a table from [`rope_table`].
pub fn rope_apply(
    x: &mut [f32],
    head_dim: usize,
    n_rot: usize,
    style: crate::config::RopeStyle,
    table: &[f32],
) {
    use crate::config::RopeStyle;
    for head in x.chunks_exact_mut(head_dim) {
        match style {
            RopeStyle::Normal => {
                for i in 0..n_rot / 2 {
                    let (c, s) = (table[2 * i], table[2 * i + 1]);
                    let (x0, x1) = (head[2 * i], head[2 * i + 1]);
                    head[2 * i] = x0 * c - x1 * s;
                    head[2 * i + 1] = x0 * s + x1 * c;
                }
            }
            RopeStyle::Neox => {
                let half = n_rot / 2;
                for i in 0..half {
                    let (c, s) = (table[2 * i], table[2 * i + 1]);
                    let (x0, x1) = (head[i], head[i + half]);
                    head[i] = x0 * c - x1 * s;
                    head[i + half] = x0 * s + x1 * c;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::RopeStyle;

    #[test]
    fn rms_norm_of_constant_row_is_the_weight() {
        let x = [3.0f32; 8];
        let w = [0.5f32, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0];
        let mut out = [0.0f32; 8];
        rms_norm(&x, &w, 0.0, &mut out);
        for (o, w) in out.iter().zip(w) {
            assert!((o - w).abs() < 1e-6);
        }
    }

    #[test]
    fn softmax_sums_to_one_and_keeps_order() {
        let mut x = [1.0f32, 3.0, 2.0, -1e9];
        softmax_inplace(&mut x);
        assert!((x.iter().sum::<f32>() - 1.0).abs() < 1e-6);
        assert!(x[1] > x[2] && x[2] > x[0] && x[3] == 0.0);
    }

    #[test]
    fn rope_at_position_zero_is_identity() {
        let mut table = vec![0.0; 8];
        rope_table(0, 8, 10000.0, 1.0, &mut table);
        for style in [RopeStyle::Normal, RopeStyle::Neox] {
            let orig: Vec<f32> = (0..16).map(|i| i as f32).collect();
            let mut x = orig.clone();
            rope_apply(&mut x, 8, 8, style, &table);
            assert_eq!(x, orig);
        }
    }

    #[test]
    fn rope_preserves_pair_norms_and_styles_differ_only_in_pairing() {
        let mut table = vec![0.0; 8];
        rope_table(7, 8, 10000.0, 1.0, &mut table);
        let orig: Vec<f32> = (0..8).map(|i| (i as f32 * 0.37).sin()).collect();
        let mut a = orig.clone();
        rope_apply(&mut a, 8, 8, RopeStyle::Normal, &table);
        for i in 0..4 {
            let n0 = orig[2 * i].hypot(orig[2 * i + 1]);
            let n1 = a[2 * i].hypot(a[2 * i + 1]);
            assert!((n0 - n1).abs() < 1e-5);
        }
        // NeoX on a de-interleaved vector equals Normal on the interleaved one.
        let deint: Vec<f32> = (0..4)
            .map(|i| orig[2 * i])
            .chain((0..4).map(|i| orig[2 * i + 1]))
            .collect();
        let mut b = deint.clone();
        rope_apply(&mut b, 8, 8, RopeStyle::Neox, &table);
        for i in 0..4 {
            assert!((b[i] - a[2 * i]).abs() < 1e-6);
            assert!((b[i + 4] - a[2 * i + 1]).abs() < 1e-6);
        }
    }

    #[test]
    fn gelu_tanh_matches_known_values() {
        assert!((gelu_tanh(0.0)).abs() < 1e-7);
        assert!((gelu_tanh(1.0) - 0.841_192).abs() < 1e-5);
        assert!((gelu_tanh(-1.0) + 0.158_808).abs() < 1e-5);
    }
}
