//! Causal multi-head attention with grouped KV heads over the KV cache.
//!
//! The arithmetic is that of llama.cpp's default CPU path (flash attention, f16 KV cache):
//! the query is rounded to f16, each score is an f16·f16 dot product accumulated in f32 and
//! scaled, the softmax is computed online (running maximum and sum, `exp` in f32), and the
//! weighted sum of values is accumulated in f16. Matching these roundings keeps Kiln's
//! outputs as close to llama.cpp's as these models allow (see `docs/correctness.md`). Every
//! query row is computed independently, so results do not depend on the batch.

use half::f16;
use rayon::prelude::*;

use crate::ModelConfig;

/// Per-call geometry of one attention evaluation.
pub struct AttnShape {
    /// Position of the first query token.
    pub pos0: usize,
    /// Number of query tokens.
    pub n_tokens: usize,
    /// Attend only to the last `window` positions (sliding-window layers), or all.
    pub window: Option<usize>,
}

/// Computes attention for `n_tokens` queries at positions `pos0..pos0+n_tokens`, each
/// attending to cached positions up to its own (within the window).
///
/// `q` is token-major (`n_tokens × n_head·head_dim`). `head_out` is scratch of
/// `n_head × n_tokens × head_dim_v`, `scratch` of `n_head × (head_dim + head_dim_v)` f16
/// values; the result is written token-major to `out` (`n_tokens × n_head·head_dim_v`).
#[allow(clippy::too_many_arguments)]
pub fn attention(
    cfg: &ModelConfig,
    shape: &AttnShape,
    q: &[f32],
    keys: &[f16],
    values: &[f16],
    head_out: &mut [f32],
    scratch: &mut [f16],
    out: &mut [f32],
) {
    let (n_head, hd, hdv) = (cfg.n_head, cfg.head_dim, cfg.head_dim_v);
    let group = n_head / cfg.n_head_kv;
    let (k_dim, v_dim, q_dim) = (cfg.k_dim(), cfg.v_dim(), cfg.q_dim());
    let n_tok = shape.n_tokens;
    let scale = cfg.attn_scale;

    head_out[..n_head * n_tok * hdv]
        .par_chunks_mut(n_tok * hdv)
        .zip(scratch[..n_head * (hd + hdv)].par_chunks_mut(hd + hdv))
        .enumerate()
        .for_each(|(h, (ho, sc))| {
            let g = h / group;
            let (q16, acc) = sc.split_at_mut(hd);
            for t in 0..n_tok {
                let pos = shape.pos0 + t;
                let first = match shape.window {
                    Some(w) if pos + 1 > w => pos + 1 - w,
                    _ => 0,
                };
                let qh = &q[t * q_dim + h * hd..t * q_dim + (h + 1) * hd];
                for (d, &s) in q16.iter_mut().zip(qh) {
                    *d = f16::from_f32(s);
                }
                acc.fill(f16::ZERO);
                let mut max = f32::NEG_INFINITY;
                let mut sum = 0.0f32;
                for j in first..=pos {
                    let kj = &keys[j * k_dim + g * hd..j * k_dim + (g + 1) * hd];
                    let s = dot_f16(q16, kj) * scale;
                    let vj = &values[j * v_dim + g * hdv..j * v_dim + (g + 1) * hdv];
                    if s > max {
                        // New maximum: rescale what was accumulated; this value's weight is 1.
                        let ms = (max - s).exp();
                        max = s;
                        scale_f16(acc, ms);
                        mad_f16(acc, vj, 1.0);
                        sum = sum * ms + 1.0;
                    } else {
                        let vs = (s - max).exp();
                        mad_f16(acc, vj, vs);
                        sum += vs;
                    }
                }
                let inv = if sum == 0.0 { 0.0 } else { 1.0 / sum };
                for (o, a) in ho[t * hdv..(t + 1) * hdv].iter_mut().zip(acc.iter()) {
                    *o = a.to_f32() * inv;
                }
            }
        });

    for t in 0..n_tok {
        for h in 0..n_head {
            out[t * n_head * hdv + h * hdv..t * n_head * hdv + (h + 1) * hdv].copy_from_slice(
                &head_out[h * n_tok * hdv + t * hdv..h * n_tok * hdv + (t + 1) * hdv],
            );
        }
    }
}

/// f16·f16 dot product accumulated in f32 (every product is exact in f32).
fn dot_f16(a: &[f16], b: &[f16]) -> f32 {
    a.iter()
        .zip(b)
        .map(|(&x, &y)| x.to_f32() * y.to_f32())
        .sum()
}

/// `acc = f16(acc · s)`.
fn scale_f16(acc: &mut [f16], s: f32) {
    for a in acc.iter_mut() {
        *a = f16::from_f32(a.to_f32() * s);
    }
}

/// `acc = f16(acc + v · s)`, one rounding per element (fused multiply-add in f32).
fn mad_f16(acc: &mut [f16], v: &[f16], s: f32) {
    for (a, &x) in acc.iter_mut().zip(v) {
        *a = f16::from_f32(x.to_f32().mul_add(s, a.to_f32()));
    }
}
