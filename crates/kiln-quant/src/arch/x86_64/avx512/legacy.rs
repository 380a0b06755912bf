//! AVX-512 GEMV and GEMM kernels of the 32-value block types with signed weights (Q4_0,
//! Q5_0, Q8_0 × Q8_0 activations) and of Q4_1 (× Q8_1).
//!
//! The float operations per (row, token) pair are exactly those of the AVX2 kernels
//! (`super::super::avx2::legacy`): per block an exact 8-lane `i32` sum of quads, converted to
//! `f32` and `fma`-accumulated with `f16(dx) * f16(dy)`, `hsum_float_8` at the end (Q4_1: plus
//! its fused `m * s` sum). A `zmm` carries two such pairs side by side, two weight rows for
//! one token (GEMV) or one weight row for two tokens (GEMM), so each 512-bit instruction
//! does the work of two 256-bit ones without changing any lane's operations.
//!
//! The integer quads come from VNNI `vpdpbusd` (unsigned × signed bytes, four products summed
//! into an `i32` without saturation) instead of `maddubs` + `madd`; for these types the
//! `maddubs` pairs never saturate, so the lanes are the same. Signed weights go through the
//! same sign trick as AVX2 (`|x|` against `y` negated where `x < 0`, with 8-bit wrapping: an
//! activation of `-128` stays `-128`), done with a masked subtraction since AVX-512 has no
//! `vpsignb`.

use std::arch::x86_64::*;

use super::util::*;
use crate::arch::x86_64::avx2::util::{
    bits32, f16_to_f32, f16x2_to_f32, hsum_f32x8, load_f32x8, nibbles32, prefetch_group_ahead,
};
use crate::blocks::{BlockI8, BlockQ4_0, BlockQ4_1, BlockQ5_0, BlockQ8_0, BlockQ8_1, as_blocks};
use crate::kernels::ActRows;

// ------------------------------------------------- signed weights × Q8_0 (Q4_0, Q5_0, Q8_0)

/// A block's 32 values as signed bytes and `f16(d)` widened (the AVX2 unpacking).
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
fn unpack_q4_0(x: &BlockQ4_0) -> (__m256i, f32) {
    (
        _mm256_sub_epi8(nibbles32(&x.qs), _mm256_set1_epi8(8)),
        f16_to_f32(x.d),
    )
}

#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
fn unpack_q5_0(x: &BlockQ5_0) -> (__m256i, f32) {
    let hi = _mm256_andnot_si256(bits32(&x.qh), _mm256_set1_epi8(0xF0u8 as i8));
    (_mm256_or_si256(nibbles32(&x.qs), hi), f16_to_f32(x.d))
}

#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
fn unpack_q8_0(x: &BlockQ8_0) -> (__m256i, f32) {
    (load256(&x.qs), f16_to_f32(x.d))
}

#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
fn unpack_i8(x: &BlockI8) -> (__m256i, f32) {
    (load256(&x.qs), x.d)
}

/// Signed weights `wx` (both halves) against activations `y` (each half its own): the quad
/// sums of AVX2's sign trick, as floats.
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
fn quads_ss(ax: __m512i, neg: __mmask64, y: __m512i) -> __m512 {
    let zero = _mm512_setzero_si512();
    let sy = _mm512_mask_sub_epi8(y, neg, zero, y);
    _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(zero, ax, sy))
}

/// The 1 × `T` GEMM tile (`T` = 2 `P`) for signed weights: tokens `2p`, `2p + 1` share a
/// `zmm`. With `SC8` the activation scales come interleaved (`sc8`, block `i`'s scale of
/// token `t` at `8 i + t`), otherwise per row in `sc`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
fn tile_q8_0<const T: usize, const P: usize, const SC8: bool, W>(
    w: &[W],
    ys: [&[BlockQ8_0]; T],
    sc: [&[f32]; T],
    sc8: &[f32],
    unpack: impl Fn(&W) -> (__m256i, f32),
) -> [f32; T] {
    assert_eq!(T, 2 * P);
    let nb = w.len();
    for t in 0..T {
        assert_eq!(ys[t].len(), nb);
        assert!(SC8 || sc[t].len() == nb);
    }
    assert!(!SC8 || (T == 8 && sc8.len() == 8 * nb));
    let mut acc = [_mm512_setzero_ps(); P];
    for i in 0..nb {
        let (qx, dx) = unpack(&w[i]);
        let wx = _mm512_broadcast_i64x4(qx);
        let ax = _mm512_abs_epi8(wx);
        let neg = _mm512_movepi8_mask(wx);
        // Lane `l` of pair `p`: `dx * dy` of token `2p + l / 8`, the AVX2 product.
        let d8 = if SC8 {
            _mm512_castps256_ps512(_mm256_mul_ps(
                _mm256_set1_ps(dx),
                load_f32x8(&sc8[8 * i..8 * i + 8]),
            ))
        } else {
            _mm512_setzero_ps()
        };
        for p in 0..P {
            let (y0, y1) = (&ys[2 * p][i], &ys[2 * p + 1][i]);
            let d = if SC8 {
                _mm512_permutexvar_ps(pair_index32(2 * p as i32, 2 * p as i32 + 1), d8)
            } else {
                _mm512_mul_ps(_mm512_set1_ps(dx), pair_ps(sc[2 * p][i], sc[2 * p + 1][i]))
            };
            let s = quads_ss(ax, neg, join32(&y0.qs, &y1.qs));
            acc[p] = _mm512_fmadd_ps(d, s, acc[p]);
        }
    }
    let mut out = [0.0; T];
    for p in 0..P {
        let (lo, hi) = halves_ps(acc[p]);
        out[2 * p] = hsum_f32x8(lo);
        out[2 * p + 1] = hsum_f32x8(hi);
    }
    out
}

/// The 4 × 1 GEMV tile for signed weights: rows `2p`, `2p + 1` share a `zmm`; prefetches the
/// row groups ahead as the AVX2 tile does.
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
fn gemv4_q8_0<W: bytemuck::Pod>(
    w: [&[W]; 4],
    y: &[BlockQ8_0],
    unpack: impl Fn(&W) -> (__m256i, f32),
) -> [f32; 4] {
    let nb = y.len();
    assert!(w.iter().all(|row| row.len() == nb));
    let mut acc = [_mm512_setzero_ps(); 2];
    let base = w[0].as_ptr().cast::<u8>();
    for i in 0..nb {
        prefetch_group_ahead(base, 4, nb, size_of::<W>(), i);
        let yi = broadcast32(&y[i].qs);
        let dy = _mm512_set1_ps(f16_to_f32(y[i].d));
        for p in 0..2 {
            let (q0, d0) = unpack(&w[2 * p][i]);
            let (q1, d1) = unpack(&w[2 * p + 1][i]);
            let wx = _mm512_inserti64x4::<1>(_mm512_castsi256_si512(q0), q1);
            let s = quads_ss(_mm512_abs_epi8(wx), _mm512_movepi8_mask(wx), yi);
            let d = _mm512_mul_ps(pair_ps(d0, d1), dy);
            acc[p] = _mm512_fmadd_ps(d, s, acc[p]);
        }
    }
    let (a, b) = halves_ps(acc[0]);
    let (c, e) = halves_ps(acc[1]);
    [hsum_f32x8(a), hsum_f32x8(b), hsum_f32x8(c), hsum_f32x8(e)]
}

/// The four weight rows of a GEMV call.
#[inline(always)]
fn rows4<B: bytemuck::Pod>(w: &[u8], row_bytes: usize) -> [&[B]; 4] {
    std::array::from_fn(|r| as_blocks(&w[r * row_bytes..(r + 1) * row_bytes]))
}

/// The GEMV and four-token GEMM entry points of one signed weight type.
macro_rules! q8_0_act_kernels {
    ($dotr4:ident, $dot4:ident, $block:ty, $unpack:ident) => {
        #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
        pub(crate) fn $dotr4(w: &[u8], row_bytes: usize, a: &[u8], out: &mut [f32; 4]) {
            *out = gemv4_q8_0(rows4::<$block>(w, row_bytes), as_blocks(a), |x| $unpack(x));
        }

        #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
        pub(crate) fn $dot4(w: &[u8], a: ActRows<'_>, out: &mut [f32; 4]) {
            let w: &[$block] = as_blocks(w);
            let ys = rows_n::<4, BlockQ8_0>(&a, w.len());
            let sc = std::array::from_fn(|t| a.scales(t, w.len()));
            *out = tile_q8_0::<4, 2, false, _>(w, ys, sc, &[], |x| $unpack(x));
        }
    };
}

q8_0_act_kernels!(dotr4_q4_0, dot4_q4_0, BlockQ4_0, unpack_q4_0);
q8_0_act_kernels!(dotr4_q5_0, dot4_q5_0, BlockQ5_0, unpack_q5_0);
q8_0_act_kernels!(dotr4_q8_0, dot4_q8_0, BlockQ8_0, unpack_q8_0);

#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
pub(crate) fn dot8_q8_0(w: &[u8], a: ActRows<'_>, out: &mut [f32; 8]) {
    let w: &[BlockQ8_0] = as_blocks(w);
    let ys = rows_n::<8, BlockQ8_0>(&a, w.len());
    *out = tile_q8_0::<8, 4, true, _>(w, ys, [&[]; 8], &a.sc8[..8 * w.len()], |x| unpack_q8_0(x));
}

/// The eight-token micro-kernel over unpacked rows ([`BlockI8`], from the AVX2 table's
/// `unpack_q4_0` / `unpack_q5_0`): the same values and operations as the packed types'.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
pub(crate) fn dot8_i8(w: &[u8], a: ActRows<'_>, out: &mut [f32; 8]) {
    let w: &[BlockI8] = as_blocks(w);
    let ys = rows_n::<8, BlockQ8_0>(&a, w.len());
    *out = tile_q8_0::<8, 4, true, _>(w, ys, [&[]; 8], &a.sc8[..8 * w.len()], |x| unpack_i8(x));
}

// ---------------------------------------------------------------- Q4_1 × Q8_1

/// Unsigned nibbles `qx` (both halves) against activations `y`: the quad sums, as floats.
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
fn quads_us(qx: __m512i, y: __m512i) -> __m512 {
    _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(_mm512_setzero_si512(), qx, y))
}

/// A Q4_1 block: its nibbles, `f16(d)` and `f16(m)` widened.
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
fn unpack_q4_1(x: &BlockQ4_1) -> (__m256i, f32, f32) {
    let dm = f16x2_to_f32(x.d, x.m);
    (
        nibbles32(&x.qs),
        _mm_cvtss_f32(dm),
        _mm_cvtss_f32(_mm_movehdup_ps(dm)),
    )
}

/// The 1 × `T` GEMM tile of Q4_1 (`T` = 2 `P`; tokens `2p`, `2p + 1` share a `zmm`). With
/// `SC8` the activation scales come interleaved (`sc8`: block `i`'s `d` of token `t` at
/// `16 i + t`, its `s` at `16 i + 8 + t`) and the eight `m * s` sums run as one vector `fma`
/// (lane `t` is token `t`'s fused step, as in AVX2); otherwise `sc` holds each row's `d, s`
/// pairs and the sums are scalar `mul_add`s.
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
fn tile_q4_1<const T: usize, const P: usize, const SC8: bool>(
    w: &[BlockQ4_1],
    ys: [&[BlockQ8_1]; T],
    sc: [&[f32]; T],
    sc8: &[f32],
) -> [f32; T] {
    assert_eq!(T, 2 * P);
    let nb = w.len();
    for t in 0..T {
        assert_eq!(ys[t].len(), nb);
        assert!(SC8 || sc[t].len() == 2 * nb);
    }
    assert!(!SC8 || (T == 8 && sc8.len() == 16 * nb));
    let mut acc = [_mm512_setzero_ps(); P];
    let mut summs = [0.0f32; T];
    let mut summs8 = _mm256_setzero_ps();
    for (i, x) in w.iter().enumerate() {
        let (q, dx, mx) = unpack_q4_1(x);
        let qx = _mm512_broadcast_i64x4(q);
        let d8 = if SC8 {
            let s8 = &sc8[16 * i..16 * i + 16];
            summs8 = _mm256_fmadd_ps(_mm256_set1_ps(mx), load_f32x8(&s8[8..]), summs8);
            _mm512_castps256_ps512(_mm256_mul_ps(_mm256_set1_ps(dx), load_f32x8(&s8[..8])))
        } else {
            for t in 0..T {
                summs[t] = mx.mul_add(sc[t][2 * i + 1], summs[t]);
            }
            _mm512_setzero_ps()
        };
        for p in 0..P {
            let (y0, y1) = (&ys[2 * p][i], &ys[2 * p + 1][i]);
            let d = if SC8 {
                _mm512_permutexvar_ps(pair_index32(2 * p as i32, 2 * p as i32 + 1), d8)
            } else {
                _mm512_mul_ps(
                    _mm512_set1_ps(dx),
                    pair_ps(sc[2 * p][2 * i], sc[2 * p + 1][2 * i]),
                )
            };
            let s = quads_us(qx, join32(&y0.qs, &y1.qs));
            acc[p] = _mm512_fmadd_ps(d, s, acc[p]);
        }
    }
    if SC8 {
        let mut sm = [0.0f32; 8];
        // SAFETY: `sm` is 8 writable floats; unaligned store.
        unsafe { _mm256_storeu_ps(sm.as_mut_ptr(), summs8) };
        summs[..8].copy_from_slice(&sm);
    }
    let mut out = [0.0; T];
    for p in 0..P {
        let (lo, hi) = halves_ps(acc[p]);
        out[2 * p] = hsum_f32x8(lo) + summs[2 * p];
        out[2 * p + 1] = hsum_f32x8(hi) + summs[2 * p + 1];
    }
    out
}

#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
pub(crate) fn dot4_q4_1(w: &[u8], a: ActRows<'_>, out: &mut [f32; 4]) {
    let w: &[BlockQ4_1] = as_blocks(w);
    let ys = rows_n::<4, BlockQ8_1>(&a, w.len());
    let sc = std::array::from_fn(|t| a.scales(t, 2 * w.len()));
    *out = tile_q4_1::<4, 2, false>(w, ys, sc, &[]);
}

#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
pub(crate) fn dot8_q4_1(w: &[u8], a: ActRows<'_>, out: &mut [f32; 8]) {
    let w: &[BlockQ4_1] = as_blocks(w);
    let ys = rows_n::<8, BlockQ8_1>(&a, w.len());
    *out = tile_q4_1::<8, 4, true>(w, ys, [&[]; 8], &a.sc8[..16 * w.len()]);
}

/// The 4 × 1 GEMV tile of Q4_1: rows `2p`, `2p + 1` share a `zmm`.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
pub(crate) fn dotr4_q4_1(w: &[u8], row_bytes: usize, a: &[u8], out: &mut [f32; 4]) {
    let w = rows4::<BlockQ4_1>(w, row_bytes);
    let y: &[BlockQ8_1] = as_blocks(a);
    let nb = y.len();
    assert!(w.iter().all(|row| row.len() == nb));
    let mut acc = [_mm512_setzero_ps(); 2];
    let mut summs = [0.0f32; 4];
    let base = w[0].as_ptr().cast::<u8>();
    for i in 0..nb {
        prefetch_group_ahead(base, 4, nb, size_of::<BlockQ4_1>(), i);
        let yi = broadcast32(&y[i].qs);
        let ds = f16x2_to_f32(y[i].d, y[i].s);
        let dy = _mm512_set1_ps(_mm_cvtss_f32(ds));
        let sy = _mm_cvtss_f32(_mm_movehdup_ps(ds));
        for p in 0..2 {
            let (q0, d0, m0) = unpack_q4_1(&w[2 * p][i]);
            let (q1, d1, m1) = unpack_q4_1(&w[2 * p + 1][i]);
            summs[2 * p] = m0.mul_add(sy, summs[2 * p]);
            summs[2 * p + 1] = m1.mul_add(sy, summs[2 * p + 1]);
            let qx = _mm512_inserti64x4::<1>(_mm512_castsi256_si512(q0), q1);
            let d = _mm512_mul_ps(pair_ps(d0, d1), dy);
            acc[p] = _mm512_fmadd_ps(d, quads_us(qx, yi), acc[p]);
        }
    }
    let (a0, a1) = halves_ps(acc[0]);
    let (a2, a3) = halves_ps(acc[1]);
    *out = [
        hsum_f32x8(a0) + summs[0],
        hsum_f32x8(a1) + summs[1],
        hsum_f32x8(a2) + summs[2],
        hsum_f32x8(a3) + summs[3],
    ];
}
