//! AVX2 dot products of Q2_K, Q3_K, Q5_K and IQ4_XS with `Q8_K` activations. Each performs
//! the operations of ggml's AVX2 `ggml_vec_dot_<type>_q8_K` in the same order (per
//! super-block an exact 8-lane integer sum, converted to float and `fma`-accumulated with the
//! super-block scale; Q2_K's mins in the same accumulator first, Q5_K's in a scalar chain),
//! so they equal the scalar oracle in `scalar::kquants` bit for bit. Where ggml broadcasts a
//! sub-block scale with a byte shuffle we use `set1`: the integer lanes are identical.
//!
//! The GEMV (`dotr4`) entries are repeated single dots, and so are the GEMM (`dot4`) entries
//! except Q5_K's, a micro-kernel that unpacks each weight block once for four tokens.

use std::arch::x86_64::*;

use super::float::{dot4_by_dot, dotr4_by_dot};
use super::legacy::rows4;
use super::util::*;
use crate::blocks::{
    BlockIQ4XS, BlockQ2K, BlockQ3K, BlockQ5K, BlockQ8K, IQ4NL_VALUES, as_blocks, iq4xs_scale,
    q3k_scales, q4k_scales_mins,
};
use crate::kernels::ActRows;

/// 16 `i16` lanes: 8 of `lo`, then 8 of `hi` (the scales of the two 16-element halves of a
/// 32-element group).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn scale_pair(lo: i16, hi: i16) -> __m256i {
    _mm256_set_m128i(_mm_set1_epi16(hi), _mm_set1_epi16(lo))
}

/// `v >> n` in each 16-bit lane, `n` at run time.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn srl16(v: __m256i, n: usize) -> __m256i {
    _mm256_srl_epi16(v, _mm_cvtsi32_si128(n as i32))
}

/// The 32 two-bit values of group `k` (0..4) in 32 bytes of Q2_K/Q3_K `qs`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn two_bits(bits: __m256i, k: usize) -> __m256i {
    _mm256_and_si256(srl16(bits, 2 * k), _mm256_set1_epi8(3))
}

// ---------------------------------------------------------------- Q2_K × Q8_K

#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) fn dot_q2_k(w: &[u8], a: &[u8]) -> f32 {
    let (w, a): (&[BlockQ2K], &[BlockQ8K]) = (as_blocks(w), as_blocks(a));
    assert_eq!(w.len(), a.len());
    let m4 = _mm_set1_epi8(0x0F);
    let mut acc = _mm256_setzero_ps();
    for (x, y) in w.iter().zip(a) {
        let dm = f16x2_to_f32(x.d, x.dmin);
        let yd = y.d.get();
        let d = yd * _mm_cvtss_f32(dm);
        let dmin = -yd * _mm_cvtss_f32(_mm_movehdup_ps(dm));
        let packed = load_bytes16(&x.scales);
        let mins = _mm256_cvtepi8_epi16(_mm_and_si128(_mm_srli_epi16::<4>(packed), m4));
        let prod = _mm256_madd_epi16(mins, load_bytes32(&y.bsums));
        acc = _mm256_fmadd_ps(_mm256_set1_ps(dmin), _mm256_cvtepi32_ps(prod), acc);
        let sc = x.scales.map(|s| (s & 0x0F) as i16);
        let mut sumi = _mm256_setzero_si256();
        for h in 0..2 {
            let bits = load_bytes32(&x.qs[32 * h..32 * h + 32]);
            for k in 0..4 {
                let g = 4 * h + k;
                let q8 = load_bytes32(&y.qs[32 * g..32 * g + 32]);
                let p16 = _mm256_maddubs_epi16(two_bits(bits, k), q8);
                let p = _mm256_madd_epi16(scale_pair(sc[2 * g], sc[2 * g + 1]), p16);
                sumi = _mm256_add_epi32(sumi, p);
            }
        }
        acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc);
    }
    hsum_f32x8(acc)
}

// ---------------------------------------------------------------- Q3_K × Q8_K

#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) fn dot_q3_k(w: &[u8], a: &[u8]) -> f32 {
    let (w, a): (&[BlockQ3K], &[BlockQ8K]) = (as_blocks(w), as_blocks(a));
    assert_eq!(w.len(), a.len());
    let zero = _mm256_setzero_si256();
    let four = _mm256_set1_epi8(4);
    let mut acc = _mm256_setzero_ps();
    for (x, y) in w.iter().zip(a) {
        let d = y.d.get() * f16_to_f32(x.d);
        let sc = q3k_scales(&x.scales).map(|s| s as i16);
        let hbits = load_bytes32(&x.hmask);
        let mut sumi = _mm256_setzero_si256();
        for h in 0..2 {
            let bits = load_bytes32(&x.qs[32 * h..32 * h + 32]);
            for k in 0..4 {
                let g = 4 * h + k;
                let q8 = load_bytes32(&y.qs[32 * g..32 * g + 32]);
                // 4 where the high bit is clear: the value is `low - 4` there.
                let bit = _mm256_set1_epi8((1u8 << g) as i8);
                let clear = _mm256_cmpeq_epi8(_mm256_and_si256(hbits, bit), zero);
                let sub = _mm256_and_si256(clear, four);
                let p16 = _mm256_sub_epi16(
                    _mm256_maddubs_epi16(two_bits(bits, k), q8),
                    _mm256_maddubs_epi16(sub, q8),
                );
                let p = _mm256_madd_epi16(scale_pair(sc[2 * g], sc[2 * g + 1]), p16);
                sumi = _mm256_add_epi32(sumi, p);
            }
        }
        acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc);
    }
    hsum_f32x8(acc)
}

// ---------------------------------------------------------------- Q5_K × Q8_K

/// `sum_j m_j * (bsum_2j + bsum_2j+1)` (pair sums wrapped to `i16` by `hadd_epi16`), exact.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn q5k_mins(m: [u8; 8], y: &BlockQ8K) -> i32 {
    let mins = _mm_cvtepu8_epi16(_mm_set_epi64x(0, i64::from_le_bytes(m)));
    let q8sums = load_bytes32(&y.bsums);
    let q8s = _mm_hadd_epi16(
        _mm256_castsi256_si128(q8sums),
        _mm256_extracti128_si256::<1>(q8sums),
    );
    let prod = _mm_madd_epi16(mins, q8s);
    let s = _mm_add_epi32(prod, _mm_unpackhi_epi64(prod, prod));
    _mm_cvtsi128_si32(_mm_add_epi32(s, _mm_shuffle_epi32::<1>(s)))
}

/// The eight 32-byte groups of 5-bit values (0..32) of a Q5_K block, sub-block order.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn q5k_values(x: &BlockQ5K) -> [__m256i; 8] {
    let m4 = _mm256_set1_epi8(0x0F);
    let one = _mm256_set1_epi8(1);
    let hbits = load_bytes32(&x.qh);
    std::array::from_fn(|g| {
        let bits = load_bytes32(&x.qs[32 * (g / 2)..32 * (g / 2) + 32]);
        let lo = if g % 2 == 0 {
            _mm256_and_si256(bits, m4)
        } else {
            _mm256_and_si256(_mm256_srli_epi16::<4>(bits), m4)
        };
        let hi = _mm256_slli_epi16::<4>(_mm256_and_si256(srl16(hbits, g), one));
        _mm256_or_si256(lo, hi)
    })
}

#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) fn dot_q5_k(w: &[u8], a: &[u8]) -> f32 {
    let (w, a): (&[BlockQ5K], &[BlockQ8K]) = (as_blocks(w), as_blocks(a));
    assert_eq!(w.len(), a.len());
    let m4 = _mm256_set1_epi8(0x0F);
    let one = _mm256_set1_epi8(1);
    let mut acc = _mm256_setzero_ps();
    let mut summs = 0.0f32;
    for (x, y) in w.iter().zip(a) {
        let (sc, m) = q4k_scales_mins(&x.scales);
        let dm = f16x2_to_f32(x.d, x.dmin);
        let yd = y.d.get();
        let d = yd * _mm_cvtss_f32(dm);
        let dmin = -yd * _mm_cvtss_f32(_mm_movehdup_ps(dm));
        summs = dmin.mul_add(q5k_mins(m, y) as f32, summs);
        let hbits = load_bytes32(&x.qh);
        let mut sumi = _mm256_setzero_si256();
        for j in 0..4 {
            let bits = load_bytes32(&x.qs[32 * j..32 * j + 32]);
            let h0 = _mm256_slli_epi16::<4>(_mm256_and_si256(srl16(hbits, 2 * j), one));
            let h1 = _mm256_slli_epi16::<4>(_mm256_and_si256(srl16(hbits, 2 * j + 1), one));
            let q0 = _mm256_or_si256(_mm256_and_si256(bits, m4), h0);
            let q1 = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16::<4>(bits), m4), h1);
            let q8l = load_bytes32(&y.qs[64 * j..64 * j + 32]);
            let q8h = load_bytes32(&y.qs[64 * j + 32..64 * j + 64]);
            let s0 = _mm256_set1_epi16(sc[2 * j] as i16);
            let s1 = _mm256_set1_epi16(sc[2 * j + 1] as i16);
            let p0 = _mm256_madd_epi16(s0, _mm256_maddubs_epi16(q0, q8l));
            let p1 = _mm256_madd_epi16(s1, _mm256_maddubs_epi16(q1, q8h));
            sumi = _mm256_add_epi32(sumi, _mm256_add_epi32(p0, p1));
        }
        acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc);
    }
    hsum_f32x8(acc) + summs
}

/// One Q5_K row × four Q8_K rows: each block's values unpacked once, then per token the
/// operations of [`dot_q5_k`] in its order (bit-identical to four single dots).
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) fn dot4_q5_k(w: &[u8], a: ActRows<'_>, out: &mut [f32; 4]) {
    let w: &[BlockQ5K] = as_blocks(w);
    let ys = rows4::<BlockQ8K>(&a, w.len());
    let mut acc = [_mm256_setzero_ps(); 4];
    let mut summs = [0.0f32; 4];
    for (i, x) in w.iter().enumerate() {
        let (sc, m) = q4k_scales_mins(&x.scales);
        let dm = f16x2_to_f32(x.d, x.dmin);
        let (dx, dminx) = (_mm_cvtss_f32(dm), _mm_cvtss_f32(_mm_movehdup_ps(dm)));
        let q = q5k_values(x);
        let scales: [__m256i; 8] = std::array::from_fn(|g| _mm256_set1_epi16(sc[g] as i16));
        for t in 0..4 {
            let y = &ys[t][i];
            let yd = y.d.get();
            let d = yd * dx;
            let dmin = -yd * dminx;
            summs[t] = dmin.mul_add(q5k_mins(m, y) as f32, summs[t]);
            let mut sumi = _mm256_setzero_si256();
            for j in 0..4 {
                let (g0, g1) = (2 * j, 2 * j + 1);
                let q8l = load_bytes32(&y.qs[32 * g0..32 * g0 + 32]);
                let q8h = load_bytes32(&y.qs[32 * g1..32 * g1 + 32]);
                let p0 = _mm256_madd_epi16(scales[g0], _mm256_maddubs_epi16(q[g0], q8l));
                let p1 = _mm256_madd_epi16(scales[g1], _mm256_maddubs_epi16(q[g1], q8h));
                sumi = _mm256_add_epi32(sumi, _mm256_add_epi32(p0, p1));
            }
            acc[t] = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc[t]);
        }
    }
    for t in 0..4 {
        out[t] = hsum_f32x8(acc[t]) + summs[t];
    }
}

// ---------------------------------------------------------------- IQ4_XS × Q8_K

/// The 32 signed levels of 16 bytes of IQ4 nibbles (low nibbles first): a byte shuffle
/// through the level table.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) fn iq4_levels(qs: &[u8]) -> __m256i {
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
pub(crate) fn mul_add_i8(x: __m256i, y: __m256i) -> __m256i {
    _mm256_maddubs_epi16(_mm256_sign_epi8(x, x), _mm256_sign_epi8(y, x))
}

#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) fn dot_iq4_xs(w: &[u8], a: &[u8]) -> f32 {
    let (w, a): (&[BlockIQ4XS], &[BlockQ8K]) = (as_blocks(w), as_blocks(a));
    assert_eq!(w.len(), a.len());
    let mut acc = _mm256_setzero_ps();
    for (x, y) in w.iter().zip(a) {
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

dotr4_by_dot!(dotr4_q2_k, dot_q2_k);
dotr4_by_dot!(dotr4_q3_k, dot_q3_k);
dotr4_by_dot!(dotr4_q5_k, dot_q5_k);
dotr4_by_dot!(dotr4_iq4_xs, dot_iq4_xs);
dot4_by_dot!(dot4_q2_k, dot_q2_k);
dot4_by_dot!(dot4_q3_k, dot_q3_k);
dot4_by_dot!(dot4_iq4_xs, dot_iq4_xs);
