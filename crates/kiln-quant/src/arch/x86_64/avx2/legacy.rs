//! AVX2 kernels for the 32-element block types: Q4_0, Q5_0, Q8_0 (× Q8_0 activations) and
//! Q4_1 (× Q8_1).
//!
//! Every entry point is one instance of a tile kernel that computes `R` weight rows × `T`
//! activation rows at once: `dot` is 1 × 1, the GEMV kernel `dotr4` 4 × 1 (independent
//! accumulator chains, shared activation loads), the GEMM micro-kernel `dot4` 1 × 4 (each
//! weight block unpacked once for four tokens). Each (row, token) pair performs the
//! operations of ggml's AVX2 `ggml_vec_dot_*` in the same order (8-lane integer sums of four
//! products, converted to float, `fma`-accumulated per block with the scale
//! `f16(dx) * f16(dy)`, then `hsum_float_8`), so every shape gives the same bits, and with the
//! same quantized activations ggml's result. The multi-row (GEMV) tiles also prefetch the
//! row groups ahead of them (see `prefetch_group_ahead`).

use std::arch::x86_64::*;

use bytemuck::Pod;

use super::util::*;
use crate::blocks::{BlockQ4_0, BlockQ4_1, BlockQ5_0, BlockQ8_0, BlockQ8_1, as_blocks};
use crate::kernels::Act4;

/// The four activation rows of a `dot4` call, each `n` blocks long.
#[inline(always)]
pub(crate) fn rows4<'a, B: Pod>(a: &Act4<'a>, n: usize) -> [&'a [B]; 4] {
    let len = n * size_of::<B>();
    std::array::from_fn(|t| as_blocks(a.row(t, len)))
}

/// The four rows' widened scales (`per_block` values per block).
#[inline(always)]
fn scales4<'a>(a: &Act4<'a>, n: usize, per_block: usize) -> [&'a [f32]; 4] {
    std::array::from_fn(|t| a.scales(t, n * per_block))
}

/// `R` consecutive weight rows of `row_bytes` each, as blocks.
#[inline(always)]
fn weight_rows<const R: usize, B: Pod>(w: &[u8], row_bytes: usize) -> [&[B]; R] {
    std::array::from_fn(|r| as_blocks(&w[r * row_bytes..(r + 1) * row_bytes]))
}

// ------------------------------------------------- signed weights × Q8_0 (Q4_0, Q5_0, Q8_0)

/// A signed-weight block: its 32 values as signed bytes, and `f16(d)` widened.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn unpack_q4_0(x: &BlockQ4_0) -> (__m256i, f32) {
    (
        _mm256_sub_epi8(nibbles32(&x.qs), _mm256_set1_epi8(8)),
        f16_to_f32(x.d),
    )
}

#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn unpack_q5_0(x: &BlockQ5_0) -> (__m256i, f32) {
    let hi = _mm256_andnot_si256(bits32(&x.qh), _mm256_set1_epi8(0xF0u8 as i8));
    (_mm256_or_si256(nibbles32(&x.qs), hi), f16_to_f32(x.d))
}

#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn unpack_q8_0(x: &BlockQ8_0) -> (__m256i, f32) {
    (load_i8x32(&x.qs), f16_to_f32(x.d))
}

/// The R × T tile for signed weights and Q8_0 activations. With `PRE`, the activation
/// scales come widened in `sc` (one per block); otherwise they are converted here (once per
/// block and token, shared by the `R` rows).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn tile_q8_0<const R: usize, const T: usize, const PRE: bool, W>(
    w: [&[W]; R],
    ys: [&[BlockQ8_0]; T],
    sc: [&[f32]; T],
    unpack: impl Fn(&W) -> (__m256i, f32),
) -> [[f32; T]; R] {
    let nb = w[0].len();
    assert!(w.iter().all(|row| row.len() == nb));
    for t in 0..T {
        assert_eq!(ys[t].len(), nb);
        assert!(!PRE || sc[t].len() == nb);
    }
    let mut acc = [[_mm256_setzero_ps(); T]; R];
    let base = w[0].as_ptr().cast::<u8>();
    for i in 0..nb {
        if R > 1 {
            prefetch_group_ahead(base, R, nb, size_of::<W>(), i);
        }
        let mut dy = [_mm256_setzero_ps(); T];
        let mut qy = [_mm256_setzero_si256(); T];
        for t in 0..T {
            let y = &ys[t][i];
            dy[t] = if PRE {
                _mm256_broadcast_ss(&sc[t][i])
            } else {
                _mm256_set1_ps(f16_to_f32(y.d))
            };
            qy[t] = load_i8x32(&y.qs);
        }
        for r in 0..R {
            let (qx, dx) = unpack(&w[r][i]);
            let dx = _mm256_set1_ps(dx);
            let ax = _mm256_sign_epi8(qx, qx);
            for t in 0..T {
                // dx * dy in every lane: the same product as ggml's scalar one.
                let d = _mm256_mul_ps(dx, dy[t]);
                let sy = _mm256_sign_epi8(qy[t], qx);
                acc[r][t] = _mm256_fmadd_ps(d, mul_sum_us8_pairs_f32(ax, sy), acc[r][t]);
            }
        }
    }
    let mut out = [[0.0; T]; R];
    for r in 0..R {
        for t in 0..T {
            out[r][t] = hsum_f32x8(acc[r][t]);
        }
    }
    out
}

/// The three entry points of one signed weight type.
macro_rules! q8_0_act_kernels {
    ($dot:ident, $dotr4:ident, $dot4:ident, $block:ty, $unpack:ident) => {
        #[target_feature(enable = "avx2,fma,f16c")]
        pub(crate) fn $dot(w: &[u8], a: &[u8]) -> f32 {
            let w: &[$block] = as_blocks(w);
            let y: &[BlockQ8_0] = as_blocks(a);
            tile_q8_0::<1, 1, false, _>([w], [y], [&[]], |x| $unpack(x))[0][0]
        }

        #[target_feature(enable = "avx2,fma,f16c")]
        pub(crate) fn $dotr4(w: &[u8], row_bytes: usize, a: &[u8], out: &mut [f32; 4]) {
            let w = weight_rows::<4, $block>(w, row_bytes);
            let y: &[BlockQ8_0] = as_blocks(a);
            let o = tile_q8_0::<4, 1, false, _>(w, [y], [&[]], |x| $unpack(x));
            for r in 0..4 {
                out[r] = o[r][0];
            }
        }

        #[target_feature(enable = "avx2,fma,f16c")]
        pub(crate) fn $dot4(w: &[u8], a: Act4<'_>, out: &mut [f32; 4]) {
            let w: &[$block] = as_blocks(w);
            let ys = rows4::<BlockQ8_0>(&a, w.len());
            let sc = scales4(&a, w.len(), 1);
            *out = tile_q8_0::<1, 4, true, _>([w], ys, sc, |x| $unpack(x))[0];
        }
    };
}

q8_0_act_kernels!(dot_q4_0, dotr4_q4_0, dot4_q4_0, BlockQ4_0, unpack_q4_0);
q8_0_act_kernels!(dot_q5_0, dotr4_q5_0, dot4_q5_0, BlockQ5_0, unpack_q5_0);
q8_0_act_kernels!(dot_q8_0, dotr4_q8_0, dot4_q8_0, BlockQ8_0, unpack_q8_0);

// ---------------------------------------------------------------- Q4_1 × Q8_1

/// The R × T tile for Q4_1 × Q8_1. Per block and pair: the scale `f16(dx) * f16(dy)`, the
/// unsigned nibbles against the signed activations, and ggml's `summs += m * s`, which its
/// x86 builds (gcc, `-ffp-contract=fast`, FMA enabled) fuse: hence `mul_add`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn tile_q4_1<const R: usize, const T: usize, const PRE: bool>(
    w: [&[BlockQ4_1]; R],
    ys: [&[BlockQ8_1]; T],
    sc: [&[f32]; T],
) -> [[f32; T]; R] {
    let nb = w[0].len();
    assert!(w.iter().all(|row| row.len() == nb));
    for t in 0..T {
        assert_eq!(ys[t].len(), nb);
        assert!(!PRE || sc[t].len() == 2 * nb);
    }
    let mut acc = [[_mm256_setzero_ps(); T]; R];
    let mut summs = [[0.0f32; T]; R];
    let base = w[0].as_ptr().cast::<u8>();
    for i in 0..nb {
        if R > 1 {
            prefetch_group_ahead(base, R, nb, size_of::<BlockQ4_1>(), i);
        }
        let mut dy = [_mm256_setzero_ps(); T];
        let mut sy = [0.0f32; T];
        let mut qy = [_mm256_setzero_si256(); T];
        for t in 0..T {
            let y = &ys[t][i];
            if PRE {
                dy[t] = _mm256_broadcast_ss(&sc[t][2 * i]);
                sy[t] = sc[t][2 * i + 1];
            } else {
                let ds = f16x2_to_f32(y.d, y.s);
                dy[t] = _mm256_broadcastss_ps(ds);
                sy[t] = _mm_cvtss_f32(_mm_movehdup_ps(ds));
            }
            qy[t] = load_i8x32(&y.qs);
        }
        for r in 0..R {
            let x = &w[r][i];
            let dm = f16x2_to_f32(x.d, x.m);
            let dx = _mm256_broadcastss_ps(dm);
            let mx = _mm_cvtss_f32(_mm_movehdup_ps(dm));
            let qx = nibbles32(&x.qs);
            for t in 0..T {
                summs[r][t] = mx.mul_add(sy[t], summs[r][t]);
                let d = _mm256_mul_ps(dx, dy[t]);
                let xy = mul_sum_us8_pairs_f32(qx, qy[t]);
                acc[r][t] = _mm256_fmadd_ps(d, xy, acc[r][t]);
            }
        }
    }
    let mut out = [[0.0; T]; R];
    for r in 0..R {
        for t in 0..T {
            out[r][t] = hsum_f32x8(acc[r][t]) + summs[r][t];
        }
    }
    out
}

#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) fn dot_q4_1(w: &[u8], a: &[u8]) -> f32 {
    tile_q4_1::<1, 1, false>([as_blocks(w)], [as_blocks(a)], [&[]])[0][0]
}

#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) fn dotr4_q4_1(w: &[u8], row_bytes: usize, a: &[u8], out: &mut [f32; 4]) {
    let w = weight_rows::<4, BlockQ4_1>(w, row_bytes);
    let o = tile_q4_1::<4, 1, false>(w, [as_blocks(a)], [&[]]);
    for r in 0..4 {
        out[r] = o[r][0];
    }
}

#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) fn dot4_q4_1(w: &[u8], a: Act4<'_>, out: &mut [f32; 4]) {
    let w: &[BlockQ4_1] = as_blocks(w);
    let ys = rows4::<BlockQ8_1>(&a, w.len());
    let sc = scales4(&a, w.len(), 2);
    *out = tile_q4_1::<1, 4, true>([w], ys, sc)[0];
}
