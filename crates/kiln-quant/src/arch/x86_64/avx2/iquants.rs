//! AVX2 dot products of the 32-element types Q5_1 (× Q8_1) and IQ4_NL (× Q8_0), in the
//! order of ggml's AVX2 `ggml_vec_dot_q5_1_q8_1` / `ggml_vec_dot_iq4_nl_q8_0`, equal to the
//! scalar oracle in `scalar::legacy` bit for bit. The GEMV (`dotr4`) entries are repeated single
//! dots; Q5_1's GEMM (`dot4`) is a micro-kernel that unpacks each block once for four tokens,
//! IQ4_NL's is four single dots.

use std::arch::x86_64::*;

use super::dot_k2::{iq4_levels, mul_add_i8};
use super::float::{dot4_by_dot, dotr4_by_dot};
use super::legacy::rows4;
use super::util::*;
use crate::blocks::{BlockIQ4NL, BlockQ5_1, BlockQ8_0, BlockQ8_1, as_blocks};
use crate::kernels::ActRows;

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
    for (x, y) in w.iter().zip(a) {
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

/// One IQ4_NL block against one Q8_0 block: `(f16(dy) * f16(dx), 8 quad sums)`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn iq4_nl_block(x: &BlockIQ4NL, y: &BlockQ8_0) -> (f32, __m256i) {
    let p16 = mul_add_i8(iq4_levels(&x.qs), load_i8x32(&y.qs));
    let d = f16_to_f32(y.d) * f16_to_f32(x.d);
    (d, _mm256_madd_epi16(p16, _mm256_set1_epi16(1)))
}

/// IQ4_NL × Q8_0: blocks in pairs, even blocks into `acc1`, odd into `acc2`; the sum of the
/// two reduced by `hsum_float_8`; an odd last block added as `total + d * exact sum`
/// (unfused, as ggml's x86 build).
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) fn dot_iq4_nl(w: &[u8], a: &[u8]) -> f32 {
    let (w, a): (&[BlockIQ4NL], &[BlockQ8_0]) = (as_blocks(w), as_blocks(a));
    assert_eq!(w.len(), a.len());
    let mut acc1 = _mm256_setzero_ps();
    let mut acc2 = _mm256_setzero_ps();
    let pairs = w.len() / 2;
    for i in 0..pairs {
        let (d1, p1) = iq4_nl_block(&w[2 * i], &a[2 * i]);
        let (d2, p2) = iq4_nl_block(&w[2 * i + 1], &a[2 * i + 1]);
        acc1 = _mm256_fmadd_ps(_mm256_set1_ps(d1), _mm256_cvtepi32_ps(p1), acc1);
        acc2 = _mm256_fmadd_ps(_mm256_set1_ps(d2), _mm256_cvtepi32_ps(p2), acc2);
    }
    let mut sum = hsum_f32x8(_mm256_add_ps(acc1, acc2));
    if w.len() % 2 == 1 {
        let last = w.len() - 1;
        let (x, y) = (&w[last], &a[last]);
        let d = f16_to_f32(y.d) * f16_to_f32(x.d);
        // ggml's plain integer loop: exact products (no sign trick), widened to i16.
        let q = iq4_levels(&x.qs);
        let q8 = load_i8x32(&y.qs);
        let wide = |v: __m256i, h: bool| {
            _mm256_cvtepi8_epi16(if h {
                _mm256_extracti128_si256::<1>(v)
            } else {
                _mm256_castsi256_si128(v)
            })
        };
        let p = _mm256_add_epi32(
            _mm256_madd_epi16(wide(q, false), wide(q8, false)),
            _mm256_madd_epi16(wide(q, true), wide(q8, true)),
        );
        let s = _mm_add_epi32(_mm256_castsi256_si128(p), _mm256_extracti128_si256::<1>(p));
        let s = _mm_add_epi32(s, _mm_unpackhi_epi64(s, s));
        let sumi = _mm_cvtsi128_si32(_mm_add_epi32(s, _mm_shuffle_epi32::<1>(s)));
        sum += d * sumi as f32; // unfused, as ggml's x86 build
    }
    sum
}

dotr4_by_dot!(dotr4_q5_1, dot_q5_1);
dotr4_by_dot!(dotr4_iq4_nl, dot_iq4_nl);
dot4_by_dot!(dot4_iq4_nl, dot_iq4_nl);
