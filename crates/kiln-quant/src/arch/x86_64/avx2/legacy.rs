//! AVX2 kernels for the 32-element block types: Q4_0, Q5_0, Q8_0 (× Q8_0 activations), Q4_1
//! and Q5_1 (× Q8_1), and their dequantization.
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
//!
//! Q5_1 (off the hot path of the models we run) has a single dot in ggml's order
//! (`ggml_vec_dot_q5_1_q8_1`), a GEMM micro-kernel that unpacks each block once for four
//! tokens, and repeated single dots as its GEMV; its dequantization is the scalar kernel.
//!
//! Dequantization computes each value with the scalar reference's float operations
//! (`q as f32 * d`, then `+ m` as a separate add: never fused), so it is bit-identical to it
//! and to ggml's `dequantize_row_*`.

use std::arch::x86_64::*;

use super::util::*;
use crate::blocks::{
    BlockI8, BlockQ4_0, BlockQ4_1, BlockQ5_0, BlockQ5_1, BlockQ8_0, BlockQ8_1, QK, as_blocks,
};
use crate::table::ActRows;

// ------------------------------------------------- signed weights × Q8_0 (Q4_0, Q5_0, Q8_0)

/// A signed-weight block: its 32 values as signed bytes, and `f16(d)` widened.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) fn unpack_q4_0_block(x: &BlockQ4_0) -> (__m256i, f32) {
    (
        _mm256_sub_epi8(nibbles32(&x.qs), _mm256_set1_epi8(8)),
        f16_to_f32(x.d),
    )
}

#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) fn unpack_q5_0_block(x: &BlockQ5_0) -> (__m256i, f32) {
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
        if R > 1 || T > 1 {
            prefetch_group_ahead(base, R, nb, size_of::<W>(), i);
        }
        for r in 0..R {
            let (qx, dx) = unpack(&w[r][i]);
            let dx = splat_opaque(dx);
            let ax = _mm256_sign_epi8(qx, qx);
            for t in 0..T {
                let y = &ys[t][i];
                let dy = if PRE {
                    _mm256_broadcast_ss(&sc[t][i])
                } else {
                    _mm256_set1_ps(f16_to_f32(y.d))
                };
                // dx * dy in every lane: the same product as ggml's scalar one.
                let d = _mm256_mul_ps(dx, dy);
                let sy = _mm256_sign_epi8(load_i8x32(&y.qs), qx);
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

/// The 1 × 8 GEMM tile for signed weights and Q8_0 activations, with the activation scales
/// interleaved (`sc8`: block `i`'s scale of token `t` at `8 * i + t`). Per block one vector
/// product forms `dx * dy` for all eight tokens (lane `t` is exactly ggml's scalar product
/// for token `t`); it goes through the stack so each pair takes its scale with a broadcast
/// *load* rather than a shuffle, leaving the ALU ports to the integer dot products. Each
/// (row, token) pair then performs the operations of [`tile_q8_0`] in the same order.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn tile8_q8_0<W>(
    w: &[W],
    ys: [&[BlockQ8_0]; 8],
    sc8: &[f32],
    unpack: impl Fn(&W) -> (__m256i, f32),
) -> [f32; 8] {
    let nb = w.len();
    for y in ys {
        assert_eq!(y.len(), nb);
    }
    assert_eq!(sc8.len(), 8 * nb);
    let mut acc = [_mm256_setzero_ps(); 8];
    let mut d = [0.0f32; 8];
    for i in 0..nb {
        let (qx, dx) = unpack(&w[i]);
        let ax = _mm256_sign_epi8(qx, qx);
        store_f32x8(
            &mut d,
            _mm256_mul_ps(_mm256_set1_ps(dx), load_f32x8(&sc8[8 * i..8 * i + 8])),
        );
        // Opaque to the optimiser, so the eight reads below stay broadcast loads.
        let dp = std::hint::black_box(d.as_ptr());
        for (t, y) in ys.iter().enumerate() {
            // SAFETY: `dp` points at the eight floats of `d`, `t < 8`.
            let dt = _mm256_broadcast_ss(unsafe { &*dp.add(t) });
            let sy = _mm256_sign_epi8(load_i8x32(&y[i].qs), qx);
            acc[t] = _mm256_fmadd_ps(dt, mul_sum_us8_pairs_f32(ax, sy), acc[t]);
        }
    }
    std::array::from_fn(|t| hsum_f32x8(acc[t]))
}

/// A row unpacker: every block to [`BlockI8`] (its signed bytes and widened scale, exactly
/// what the block's unpack gives the dot kernels).
macro_rules! unpack_row {
    ($name:ident, $block:ty, $unpack:ident) => {
        #[target_feature(enable = "avx2,fma,f16c")]
        pub(crate) fn $name(w: &[u8], out: &mut [BlockI8]) {
            let w: &[$block] = as_blocks(w);
            assert_eq!(out.len(), w.len());
            for (o, x) in out.iter_mut().zip(w) {
                let (q, d) = $unpack(x);
                // SAFETY: `o.qs` is 32 writable bytes; unaligned store.
                unsafe { _mm256_storeu_si256(o.qs.as_mut_ptr().cast(), q) };
                o.d = d;
            }
        }
    };
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
        pub(crate) fn $dot4(w: &[u8], a: ActRows<'_>, out: &mut [f32; 4]) {
            let w: &[$block] = as_blocks(w);
            let ys = rows4::<BlockQ8_0>(&a, w.len());
            let sc = scales4(&a, w.len(), 1);
            *out = tile_q8_0::<1, 4, true, _>([w], ys, sc, |x| $unpack(x))[0];
        }
    };
}

q8_0_act_kernels!(
    dot_q4_0,
    dotr4_q4_0,
    dot4_q4_0,
    BlockQ4_0,
    unpack_q4_0_block
);
q8_0_act_kernels!(
    dot_q5_0,
    dotr4_q5_0,
    dot4_q5_0,
    BlockQ5_0,
    unpack_q5_0_block
);
q8_0_act_kernels!(dot_q8_0, dotr4_q8_0, dot4_q8_0, BlockQ8_0, unpack_q8_0);

/// The two- and three-token micro-kernels of one signed weight type (`dot4`'s tile with
/// fewer tokens; the rest of `out` untouched).
macro_rules! q8_0_act_dot23 {
    ($dot2:ident, $dot3:ident, $block:ty, $unpack:ident) => {
        #[target_feature(enable = "avx2,fma,f16c")]
        pub(crate) fn $dot2(w: &[u8], a: ActRows<'_>, out: &mut [f32; 4]) {
            let w: &[$block] = as_blocks(w);
            let ys = rows_n::<2, BlockQ8_0>(&a, w.len());
            let sc = scales_n::<2>(&a, w.len(), 1);
            let o = tile_q8_0::<1, 2, true, _>([w], ys, sc, |x| $unpack(x))[0];
            out[..2].copy_from_slice(&o);
        }

        #[target_feature(enable = "avx2,fma,f16c")]
        pub(crate) fn $dot3(w: &[u8], a: ActRows<'_>, out: &mut [f32; 4]) {
            let w: &[$block] = as_blocks(w);
            let ys = rows_n::<3, BlockQ8_0>(&a, w.len());
            let sc = scales_n::<3>(&a, w.len(), 1);
            let o = tile_q8_0::<1, 3, true, _>([w], ys, sc, |x| $unpack(x))[0];
            out[..3].copy_from_slice(&o);
        }
    };
}

q8_0_act_dot23!(dot2_q4_0, dot3_q4_0, BlockQ4_0, unpack_q4_0_block);
q8_0_act_dot23!(dot2_q5_0, dot3_q5_0, BlockQ5_0, unpack_q5_0_block);
q8_0_act_dot23!(dot2_q8_0, dot3_q8_0, BlockQ8_0, unpack_q8_0);
unpack_row!(unpack_q4_0, BlockQ4_0, unpack_q4_0_block);
unpack_row!(unpack_q5_0, BlockQ5_0, unpack_q5_0_block);

/// The eight-token micro-kernel of one signed weight type over its packed rows, each
/// block unpacked in the loop (Q4_0 and Q5_0 also have [`dot8_i8`] over rows unpacked
/// once per GEMM task, which pays when a task has several groups of eight tokens).
macro_rules! q8_0_act_dot8 {
    ($dot8:ident, $block:ty, $unpack:ident) => {
        #[target_feature(enable = "avx2,fma,f16c")]
        pub(crate) fn $dot8(w: &[u8], a: ActRows<'_>, out: &mut [f32; 8]) {
            let w: &[$block] = as_blocks(w);
            let ys = rows_n::<8, BlockQ8_0>(&a, w.len());
            *out = tile8_q8_0(w, ys, &a.sc8[..8 * w.len()], |x| $unpack(x));
        }
    };
}

q8_0_act_dot8!(dot8_q4_0, BlockQ4_0, unpack_q4_0_block);
q8_0_act_dot8!(dot8_q5_0, BlockQ5_0, unpack_q5_0_block);
q8_0_act_dot8!(dot8_q8_0, BlockQ8_0, unpack_q8_0);

/// The eight-token micro-kernel over unpacked rows ([`BlockI8`], see `unpack_q4_0` /
/// `unpack_q5_0`): the same values and operations as the packed types' kernels.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) fn dot8_i8(w: &[u8], a: ActRows<'_>, out: &mut [f32; 8]) {
    let w: &[BlockI8] = as_blocks(w);
    let ys = rows_n::<8, BlockQ8_0>(&a, w.len());
    *out = tile8_q8_0(w, ys, &a.sc8[..8 * w.len()], |x| (load_i8x32(&x.qs), x.d));
}

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
        for r in 0..R {
            let x = &w[r][i];
            let dm = f16x2_to_f32(x.d, x.m);
            let dx = splat_opaque(_mm_cvtss_f32(dm));
            let mx = _mm_cvtss_f32(_mm_movehdup_ps(dm));
            let qx = nibbles32(&x.qs);
            for t in 0..T {
                let y = &ys[t][i];
                let (dy, sy) = if PRE {
                    (_mm256_broadcast_ss(&sc[t][2 * i]), sc[t][2 * i + 1])
                } else {
                    let ds = f16x2_to_f32(y.d, y.s);
                    (
                        _mm256_broadcastss_ps(ds),
                        _mm_cvtss_f32(_mm_movehdup_ps(ds)),
                    )
                };
                summs[r][t] = mx.mul_add(sy, summs[r][t]);
                let d = _mm256_mul_ps(dx, dy);
                let xy = mul_sum_us8_pairs_f32(qx, load_i8x32(&y.qs));
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
pub(crate) fn dot4_q4_1(w: &[u8], a: ActRows<'_>, out: &mut [f32; 4]) {
    let w: &[BlockQ4_1] = as_blocks(w);
    let ys = rows4::<BlockQ8_1>(&a, w.len());
    let sc = scales4(&a, w.len(), 2);
    *out = tile_q4_1::<1, 4, true>([w], ys, sc)[0];
}

#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) fn dot2_q4_1(w: &[u8], a: ActRows<'_>, out: &mut [f32; 4]) {
    let w: &[BlockQ4_1] = as_blocks(w);
    let ys = rows_n::<2, BlockQ8_1>(&a, w.len());
    let sc = scales_n::<2>(&a, w.len(), 2);
    out[..2].copy_from_slice(&tile_q4_1::<1, 2, true>([w], ys, sc)[0]);
}

#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) fn dot3_q4_1(w: &[u8], a: ActRows<'_>, out: &mut [f32; 4]) {
    let w: &[BlockQ4_1] = as_blocks(w);
    let ys = rows_n::<3, BlockQ8_1>(&a, w.len());
    let sc = scales_n::<3>(&a, w.len(), 2);
    out[..3].copy_from_slice(&tile_q4_1::<1, 3, true>([w], ys, sc)[0]);
}

/// [`tile_q4_1`] for one row and eight tokens with interleaved activation scales (`sc8`:
/// block `i`'s `d` of token `t` at `16 * i + t`, its `s` at `16 * i + 8 + t`): the `dx * dy`
/// products as in [`tile8_q8_0`], and ggml's `summs += m * s` for the eight tokens as one
/// vector `fma` (lane `t` is token `t`'s fused step).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn tile8_q4_1(w: &[BlockQ4_1], ys: [&[BlockQ8_1]; 8], sc8: &[f32]) -> [f32; 8] {
    let nb = w.len();
    for y in ys {
        assert_eq!(y.len(), nb);
    }
    assert_eq!(sc8.len(), 16 * nb);
    let mut acc = [_mm256_setzero_ps(); 8];
    let mut summs = _mm256_setzero_ps();
    let mut d = [0.0f32; 8];
    for (i, x) in w.iter().enumerate() {
        let dm = f16x2_to_f32(x.d, x.m);
        let dx = _mm256_broadcastss_ps(dm);
        let mx = _mm256_set1_ps(_mm_cvtss_f32(_mm_movehdup_ps(dm)));
        let qx = nibbles32(&x.qs);
        let s8 = &sc8[16 * i..16 * i + 16];
        summs = _mm256_fmadd_ps(mx, load_f32x8(&s8[8..]), summs);
        store_f32x8(&mut d, _mm256_mul_ps(dx, load_f32x8(&s8[..8])));
        // Opaque to the optimiser, so the eight reads below stay broadcast loads.
        let dp = std::hint::black_box(d.as_ptr());
        for (t, y) in ys.iter().enumerate() {
            // SAFETY: `dp` points at the eight floats of `d`, `t < 8`.
            let dt = _mm256_broadcast_ss(unsafe { &*dp.add(t) });
            let xy = mul_sum_us8_pairs_f32(qx, load_i8x32(&y[i].qs));
            acc[t] = _mm256_fmadd_ps(dt, xy, acc[t]);
        }
    }
    let mut sm = [0.0f32; 8];
    store_f32x8(&mut sm, summs);
    std::array::from_fn(|t| hsum_f32x8(acc[t]) + sm[t])
}

#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) fn dot8_q4_1(w: &[u8], a: ActRows<'_>, out: &mut [f32; 8]) {
    let w: &[BlockQ4_1] = as_blocks(w);
    let ys = rows_n::<8, BlockQ8_1>(&a, w.len());
    *out = tile8_q4_1(w, ys, &a.sc8[..16 * w.len()]);
}

// ---------------------------------------------------------------- Q5_1 × Q8_1

/// Q5_1 × Q8_1: per block `summs = fma(m, s, summs)` (ggml's `summs += m * s`, fused by its
/// x86 builds as for Q4_1) and `fma(f16(dx) * f16(dy), quads, acc)` on the unsigned 5-bit
/// values; result `hsum_float_8(acc) + summs`.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) fn dot_q5_1(w: &[u8], a: &[u8]) -> f32 {
    let (w, a): (&[BlockQ5_1], &[BlockQ8_1]) = (as_blocks(w), as_blocks(a));
    assert_eq!(w.len(), a.len());
    let bit4 = _mm256_set1_epi8(0x10);
    let mut acc = _mm256_setzero_ps();
    let mut summs = 0.0f32;
    for (i, (x, y)) in w.iter().zip(a).enumerate() {
        prefetch_row_ahead(w, i);
        let dm = f16x2_to_f32(x.d, x.m);
        let ds = f16x2_to_f32(y.d, y.s);
        let mx = _mm_cvtss_f32(_mm_movehdup_ps(dm));
        let sy = _mm_cvtss_f32(_mm_movehdup_ps(ds));
        summs = mx.mul_add(sy, summs);
        let qx = _mm256_or_si256(nibbles32(&x.qs), _mm256_and_si256(bits32(&x.qh), bit4));
        let d = _mm256_mul_ps(_mm256_broadcastss_ps(dm), _mm256_broadcastss_ps(ds));
        let q = mul_sum_us8_pairs_f32(qx, load_i8x32(&y.qs));
        acc = _mm256_fmadd_ps(q, d, acc);
    }
    hsum_f32x8(acc) + summs
}

/// One Q5_1 row × four Q8_1 rows: each block unpacked once, then per token the operations of
/// [`dot_q5_1`] in its order (bit-identical to four single dots). The tokens' `d, s` come
/// widened in `a.sc` (exact conversions, the same values `dot_q5_1` converts itself).
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) fn dot4_q5_1(w: &[u8], a: ActRows<'_>, out: &mut [f32; 4]) {
    let w: &[BlockQ5_1] = as_blocks(w);
    let ys = rows4::<BlockQ8_1>(&a, w.len());
    let sc: [&[f32]; 4] = std::array::from_fn(|t| a.scales(t, 2 * w.len()));
    let bit4 = _mm256_set1_epi8(0x10);
    let mut acc = [_mm256_setzero_ps(); 4];
    let mut summs = [0.0f32; 4];
    for (i, x) in w.iter().enumerate() {
        let dm = f16x2_to_f32(x.d, x.m);
        let dx = _mm256_broadcastss_ps(dm);
        let mx = _mm_cvtss_f32(_mm_movehdup_ps(dm));
        let qx = _mm256_or_si256(nibbles32(&x.qs), _mm256_and_si256(bits32(&x.qh), bit4));
        for t in 0..4 {
            let (dy, sy) = (sc[t][2 * i], sc[t][2 * i + 1]);
            summs[t] = mx.mul_add(sy, summs[t]);
            let d = _mm256_mul_ps(dx, _mm256_set1_ps(dy));
            let q = mul_sum_us8_pairs_f32(qx, load_i8x32(&ys[t][i].qs));
            acc[t] = _mm256_fmadd_ps(q, d, acc[t]);
        }
    }
    for t in 0..4 {
        out[t] = hsum_f32x8(acc[t]) + summs[t];
    }
}

dotr4_by_dot!(dotr4_q5_1, dot_q5_1);

// ---------------------------------------------------------------- dequantization

#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) fn dequant_q4_0(src: &[u8], dst: &mut [f32]) {
    let blocks: &[BlockQ4_0] = as_blocks(src);
    assert_eq!(blocks.len() * QK, dst.len());
    for (b, y) in blocks.iter().zip(dst.chunks_exact_mut(QK)) {
        let q = _mm256_sub_epi8(nibbles32(&b.qs), _mm256_set1_epi8(8));
        emit_i8x32(y, q, _mm256_set1_ps(f16_to_f32(b.d)));
    }
}

#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) fn dequant_q4_1(src: &[u8], dst: &mut [f32]) {
    let blocks: &[BlockQ4_1] = as_blocks(src);
    assert_eq!(blocks.len() * QK, dst.len());
    for (b, y) in blocks.iter().zip(dst.chunks_exact_mut(QK)) {
        let dm = f16x2_to_f32(b.d, b.m);
        let d = _mm256_broadcastss_ps(dm);
        let m = _mm256_broadcastss_ps(_mm_movehdup_ps(dm));
        emit_u8x32_affine(y, nibbles32(&b.qs), d, m);
    }
}

#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) fn dequant_q5_0(src: &[u8], dst: &mut [f32]) {
    let blocks: &[BlockQ5_0] = as_blocks(src);
    assert_eq!(blocks.len() * QK, dst.len());
    for (b, y) in blocks.iter().zip(dst.chunks_exact_mut(QK)) {
        let hi = _mm256_andnot_si256(bits32(&b.qh), _mm256_set1_epi8(0xF0u8 as i8));
        let q = _mm256_or_si256(nibbles32(&b.qs), hi);
        emit_i8x32(y, q, _mm256_set1_ps(f16_to_f32(b.d)));
    }
}

#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) fn dequant_q8_0(src: &[u8], dst: &mut [f32]) {
    let blocks: &[BlockQ8_0] = as_blocks(src);
    assert_eq!(blocks.len() * QK, dst.len());
    for (b, y) in blocks.iter().zip(dst.chunks_exact_mut(QK)) {
        emit_i8x32(y, load_i8x32(&b.qs), _mm256_set1_ps(f16_to_f32(b.d)));
    }
}
