//! Causal multi-head attention with grouped KV heads over the KV cache.

use half::f16;
use rayon::prelude::*;

use crate::ModelConfig;
use crate::ops::softmax_inplace;

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
/// attending to cached positions `0..=its own` (within the window).
///
/// `q` is token-major (`n_tokens × n_head·head_dim`). `head_out` is scratch of
/// `n_head × n_tokens × head_dim_v` and `scores` of `n_head × (pos0 + n_tokens)`; the result is
/// written token-major to `out` (`n_tokens × n_head·head_dim_v`).
#[allow(clippy::too_many_arguments)]
pub fn attention(
    cfg: &ModelConfig,
    shape: &AttnShape,
    q: &[f32],
    keys: &[f16],
    values: &[f16],
    head_out: &mut [f32],
    scores: &mut [f32],
    out: &mut [f32],
) {
    let (n_head, hd, hdv) = (cfg.n_head, cfg.head_dim, cfg.head_dim_v);
    let group = n_head / cfg.n_head_kv;
    let (k_dim, v_dim, q_dim) = (cfg.k_dim(), cfg.v_dim(), cfg.q_dim());
    let n_tok = shape.n_tokens;
    let n_kv = shape.pos0 + n_tok;
    let scale = cfg.attn_scale;

    head_out[..n_head * n_tok * hdv]
        .par_chunks_mut(n_tok * hdv)
        .zip(scores[..n_head * n_kv].par_chunks_mut(n_kv))
        .enumerate()
        .for_each(|(h, (ho, sc))| {
            let g = h / group;
            for t in 0..n_tok {
                let pos = shape.pos0 + t;
                let first = match shape.window {
                    Some(w) if pos + 1 > w => pos + 1 - w,
                    _ => 0,
                };
                let qh = &q[t * q_dim + h * hd..t * q_dim + (h + 1) * hd];
                let s = &mut sc[first..=pos];
                for (j, sj) in s.iter_mut().enumerate() {
                    let kj = &keys[(first + j) * k_dim + g * hd..(first + j) * k_dim + (g + 1) * hd];
                    *sj = dot_f16(qh, kj) * scale;
                }
                softmax_inplace(s);
                let o = &mut ho[t * hdv..(t + 1) * hdv];
                o.fill(0.0);
                for (j, &p) in s.iter().enumerate() {
                    let vj = &values[(first + j) * v_dim + g * hdv..(first + j) * v_dim + (g + 1) * hdv];
                    for (acc, &v) in o.iter_mut().zip(vj) {
                        *acc += p * v.to_f32();
                    }
                }
            }
        });

    for t in 0..n_tok {
        for h in 0..n_head {
            out[t * n_head * hdv + h * hdv..t * n_head * hdv + (h + 1) * hdv]
                .copy_from_slice(&head_out[h * n_tok * hdv + t * hdv..h * n_tok * hdv + (t + 1) * hdv]);
        }
    }
}

fn dot_f16(a: &[f32], b: &[f16]) -> f32 {
    a.iter().zip(b).map(|(&x, &y)| x * y.to_f32()).sum()
}
