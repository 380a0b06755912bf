//! AVX2 dequantization. Each value is computed with the same float operations as the scalar
//! reference (`q as f32 * d`, then `+ m` or `- m` as a separate add: never fused), so the
//! results are bit-identical to it and to ggml's `dequantize_row_*`.

use std::arch::x86_64::*;

use super::util::*;
use crate::blocks::{
    BlockQ4_0, BlockQ4_1, BlockQ4K, BlockQ5_0, BlockQ6K, BlockQ8_0, QK, QK_K, as_blocks,
    q4k_scales_mins,
};

/// The four groups of 8 bytes of a 256-bit vector, in order, each in the low half of an xmm.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn groups8(v: __m256i) -> [__m128i; 4] {
    let lo = _mm256_castsi256_si128(v);
    let hi = _mm256_extracti128_si256::<1>(v);
    [lo, _mm_srli_si128::<8>(lo), hi, _mm_srli_si128::<8>(hi)]
}

/// Writes 32 signed bytes times `d` to `y[..32]`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn emit_i8x32(y: &mut [f32], q: __m256i, d: __m256) {
    for (k, g) in groups8(q).into_iter().enumerate() {
        let f = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(g));
        store_f32x8(&mut y[8 * k..], _mm256_mul_ps(f, d));
    }
}

/// Writes 32 unsigned bytes as `q * d + m` (multiply, then add) to `y[..32]`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn emit_u8x32_affine(y: &mut [f32], q: __m256i, d: __m256, m: __m256) {
    for (k, g) in groups8(q).into_iter().enumerate() {
        let f = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(g));
        store_f32x8(&mut y[8 * k..], _mm256_add_ps(_mm256_mul_ps(f, d), m));
    }
}

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

#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) fn dequant_q4_k(src: &[u8], dst: &mut [f32]) {
    let blocks: &[BlockQ4K] = as_blocks(src);
    assert_eq!(blocks.len() * QK_K, dst.len());
    let m4 = _mm256_set1_epi8(0x0F);
    for (b, y) in blocks.iter().zip(dst.chunks_exact_mut(QK_K)) {
        let dm = f16x2_to_f32(b.d, b.dmin);
        let (d, min) = (_mm_cvtss_f32(dm), _mm_cvtss_f32(_mm_movehdup_ps(dm)));
        let (sc, m) = q4k_scales_mins(&b.scales);
        for (j, y) in y.chunks_exact_mut(64).enumerate() {
            let bits = load_bytes32(&b.qs[32 * j..32 * j + 32]);
            let lo = _mm256_and_si256(bits, m4);
            let hi = _mm256_and_si256(_mm256_srli_epi16::<4>(bits), m4);
            // d1 * q - m1: the min is subtracted, i.e. added negated (exact).
            let (d1, m1) = (d * sc[2 * j] as f32, min * m[2 * j] as f32);
            let (d2, m2) = (d * sc[2 * j + 1] as f32, min * m[2 * j + 1] as f32);
            let (lo_y, hi_y) = y.split_at_mut(32);
            emit_u8x32_affine(lo_y, lo, _mm256_set1_ps(d1), _mm256_set1_ps(-m1));
            emit_u8x32_affine(hi_y, hi, _mm256_set1_ps(d2), _mm256_set1_ps(-m2));
        }
    }
}

#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) fn dequant_q6_k(src: &[u8], dst: &mut [f32]) {
    let blocks: &[BlockQ6K] = as_blocks(src);
    assert_eq!(blocks.len() * QK_K, dst.len());
    for (b, y) in blocks.iter().zip(dst.chunks_exact_mut(QK_K)) {
        let d = f16_to_f32(b.d);
        for h in 0..2 {
            let q = super::kquants::q6k_groups(b, h);
            for (k, qk) in q.into_iter().enumerate() {
                let v = _mm256_sub_epi8(qk, _mm256_set1_epi8(32));
                let g = 4 * h + k;
                // Group g of 32 values spans scales 2g (first 16) and 2g + 1.
                let y = &mut y[32 * g..32 * g + 32];
                let d_lo = _mm256_set1_ps(d * b.scales[2 * g] as f32);
                let d_hi = _mm256_set1_ps(d * b.scales[2 * g + 1] as f32);
                let gs = groups8(v);
                for (i, gi) in gs.into_iter().enumerate() {
                    let f = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(gi));
                    let dd = if i < 2 { d_lo } else { d_hi };
                    store_f32x8(&mut y[8 * i..], _mm256_mul_ps(dd, f));
                }
            }
        }
    }
}

#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) fn dequant_f16(src: &[u8], dst: &mut [f32]) {
    assert_eq!(src.len(), dst.len() * 2);
    let mut xs = src.chunks_exact(16);
    let mut ys = dst.chunks_exact_mut(8);
    for (x, y) in (&mut xs).zip(&mut ys) {
        store_f32x8(y, _mm256_cvtph_ps(load_bytes16(x)));
    }
    crate::scalar::dequant::dequant_f16(xs.remainder(), ys.into_remainder());
}

#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) fn dequant_bf16(src: &[u8], dst: &mut [f32]) {
    assert_eq!(src.len(), dst.len() * 2);
    let mut xs = src.chunks_exact(16);
    let mut ys = dst.chunks_exact_mut(8);
    for (x, y) in (&mut xs).zip(&mut ys) {
        let v = _mm256_slli_epi32::<16>(_mm256_cvtepu16_epi32(load_bytes16(x)));
        store_f32x8(y, _mm256_castsi256_ps(v));
    }
    crate::scalar::dequant::dequant_bf16(xs.remainder(), ys.into_remainder());
}
