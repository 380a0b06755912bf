//! AVX2 kernels of the non-linear 4-bit types: IQ4_NL (32-element blocks × Q8_0) and IQ4_XS
//! (256-element super-blocks × Q8_K), which share the level lookup (a byte shuffle through
//! the 16 levels) and the signed × signed multiply. Each dot follows ggml's AVX2
//! `ggml_vec_dot_iq4_nl_q8_0` / `ggml_vec_dot_iq4_xs_q8_K` in order, equal to the scalar
//! oracle in `scalar::iquants` bit for bit. The GEMV (`dotr4`) and GEMM (`dot4`) entries are
//! repeated single dots; dequantization is the scalar kernel (off the hot path).

use std::arch::x86_64::*;

use super::util::*;
use crate::blocks::{
    BlockIQ4NL, BlockIQ4XS, BlockQ8_0, BlockQ8K, IQ4NL_VALUES, as_blocks, iq4xs_scale,
};
use crate::table::ActRows;

/// The 32 signed levels of 16 bytes of IQ4 nibbles (low nibbles first): a byte shuffle
/// through the level table.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn iq4_levels(qs: &[u8]) -> __m256i {
    let table = load_bytes16(&IQ4NL_VALUES);
    let m4 = _mm_set1_epi8(0x0F);
    let bits = load_bytes16(qs);
    let lo = _mm_shuffle_epi8(table, _mm_and_si128(bits, m4));
    let hi = _mm_shuffle_epi8(table, _mm_and_si128(_mm_srli_epi16::<4>(bits), m4));
    _mm256_set_m128i(hi, lo)
}

/// Signed × signed bytes through the sign trick, as `i16` pair sums (ggml's `mul_add_epi8`).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn mul_add_i8(x: __m256i, y: __m256i) -> __m256i {
    _mm256_maddubs_epi16(_mm256_sign_epi8(x, x), _mm256_sign_epi8(y, x))
}

// ---------------------------------------------------------------- IQ4_NL × Q8_0

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
        prefetch_row_ahead(w, 2 * i);
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

// ---------------------------------------------------------------- IQ4_XS × Q8_K

#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) fn dot_iq4_xs(w: &[u8], a: &[u8]) -> f32 {
    let (w, a): (&[BlockIQ4XS], &[BlockQ8K]) = (as_blocks(w), as_blocks(a));
    assert_eq!(w.len(), a.len());
    let mut acc = _mm256_setzero_ps();
    for (i, (x, y)) in w.iter().zip(a).enumerate() {
        prefetch_row_ahead(w, i);
        let mut sumi = _mm256_setzero_si256();
        for j in 0..8 {
            let q = iq4_levels(&x.qs[16 * j..16 * j + 16]);
            let q8 = load_bytes32(&y.qs[32 * j..32 * j + 32]);
            let ls = _mm256_set1_epi16(iq4xs_scale(x, j) as i16);
            sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(mul_add_i8(q, q8), ls));
        }
        let d = f16_to_f32(x.d) * y.d.get();
        acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc);
    }
    hsum_f32x8(acc)
}

dotr4_by_dot!(dotr4_iq4_nl, dot_iq4_nl);
dotr4_by_dot!(dotr4_iq4_xs, dot_iq4_xs);
dot4_by_dot!(dot4_iq4_nl, dot_iq4_nl);
dot4_by_dot!(dot4_iq4_xs, dot_iq4_xs);
