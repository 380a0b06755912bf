//! AVX2 dot products of the K-quants with `Q8_K` activations, and their four-token GEMM
//! micro-kernels. Same operations and order as ggml's AVX2 `ggml_vec_dot_q4_K_q8_K` /
//! `ggml_vec_dot_q6_K_q8_K`: per super-block an exact 8-lane integer sum, converted to float
//! and `fma`-accumulated with the super-block scale. (Where ggml broadcasts a sub-block scale
//! with a byte shuffle we use `set1`: the integer lanes are identical.)

use std::arch::x86_64::*;

use super::float::dotr4_by_dot;
use super::legacy::rows_n;
use super::util::*;
use crate::blocks::{BlockQ4K, BlockQ6K, BlockQ8K, as_blocks, q4k_scales_mins};
use crate::kernels::ActRows;

// ---------------------------------------------------------------- Q4_K × Q8_K

/// Per-block pieces of a Q4_K block that do not depend on the activations.
struct Q4KBlock {
    d: f32,
    dmin: f32,
    sc: [u8; 8],
    /// The 8 mins as i16 lanes.
    mins: __m128i,
}

#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn q4k_block(x: &BlockQ4K) -> Q4KBlock {
    let (sc, m) = q4k_scales_mins(&x.scales);
    let dm = f16x2_to_f32(x.d, x.dmin);
    let mins = _mm_cvtepu8_epi16(_mm_set_epi64x(0, i64::from_le_bytes(m)));
    Q4KBlock {
        d: _mm_cvtss_f32(dm),
        dmin: _mm_cvtss_f32(_mm_movehdup_ps(dm)),
        sc,
        mins,
    }
}

/// `sum(m_j * sum(q8 in sub-block j))` as 4 i32 lanes (ggml's `prod`), from `bsums`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn q4k_mins_prod(mins: __m128i, y: &BlockQ8K) -> __m128i {
    let q8sums = load_bytes32(&y.bsums);
    let q8s = _mm_hadd_epi16(
        _mm256_castsi256_si128(q8sums),
        _mm256_extracti128_si256::<1>(q8sums),
    );
    _mm_madd_epi16(mins, q8s)
}

/// `sum(sc_j * q4 * q8)` for sub-blocks `2j`, `2j + 1` (32 bytes of `qs`) as 8 i32 lanes.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn q4k_pair(
    q4l: __m256i,
    q4h: __m256i,
    sl: __m256i,
    sh: __m256i,
    y: &BlockQ8K,
    j: usize,
) -> __m256i {
    let q8l = load_bytes32(&y.qs[64 * j..64 * j + 32]);
    let q8h = load_bytes32(&y.qs[64 * j + 32..64 * j + 64]);
    let pl = _mm256_madd_epi16(sl, _mm256_maddubs_epi16(q4l, q8l));
    let ph = _mm256_madd_epi16(sh, _mm256_maddubs_epi16(q4h, q8h));
    _mm256_add_epi32(pl, ph)
}

#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) fn dot_q4_k(w: &[u8], a: &[u8]) -> f32 {
    let (w, a): (&[BlockQ4K], &[BlockQ8K]) = (as_blocks(w), as_blocks(a));
    assert_eq!(w.len(), a.len());
    let m4 = _mm256_set1_epi8(0x0F);
    let mut acc = _mm256_setzero_ps();
    let mut acc_m = _mm_setzero_ps();
    for (x, y) in w.iter().zip(a) {
        let b = q4k_block(x);
        let yd = y.d.get();
        let d = yd * b.d;
        let dmin = -yd * b.dmin;
        let prod = q4k_mins_prod(b.mins, y);
        acc_m = _mm_fmadd_ps(_mm_set1_ps(dmin), _mm_cvtepi32_ps(prod), acc_m);
        let mut sumi = _mm256_setzero_si256();
        for j in 0..4 {
            let bits = load_bytes32(&x.qs[32 * j..32 * j + 32]);
            let q4l = _mm256_and_si256(bits, m4);
            let q4h = _mm256_and_si256(_mm256_srli_epi16::<4>(bits), m4);
            let sl = _mm256_set1_epi16(b.sc[2 * j] as i16);
            let sh = _mm256_set1_epi16(b.sc[2 * j + 1] as i16);
            sumi = _mm256_add_epi32(sumi, q4k_pair(q4l, q4h, sl, sh, y, j));
        }
        acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc);
    }
    hsum_f32x8(acc) + hsum_f32x4(acc_m)
}

/// The 1 × `T` GEMM tile of Q4_K: each weight block unpacked once for `T` tokens, each
/// (row, token) pair computed exactly as [`dot_q4_k`].
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn tile_q4_k<const T: usize>(w: &[BlockQ4K], ys: [&[BlockQ8K]; T]) -> [f32; T] {
    let m4 = _mm256_set1_epi8(0x0F);
    let mut acc = [_mm256_setzero_ps(); T];
    let mut acc_m = [_mm_setzero_ps(); T];
    for (i, x) in w.iter().enumerate() {
        let b = q4k_block(x);
        let yt: [&BlockQ8K; T] = std::array::from_fn(|t| &ys[t][i]);
        let mut sumi = [_mm256_setzero_si256(); T];
        for j in 0..4 {
            let bits = load_bytes32(&x.qs[32 * j..32 * j + 32]);
            let q4l = _mm256_and_si256(bits, m4);
            let q4h = _mm256_and_si256(_mm256_srli_epi16::<4>(bits), m4);
            let sl = _mm256_set1_epi16(b.sc[2 * j] as i16);
            let sh = _mm256_set1_epi16(b.sc[2 * j + 1] as i16);
            for t in 0..T {
                sumi[t] = _mm256_add_epi32(sumi[t], q4k_pair(q4l, q4h, sl, sh, yt[t], j));
            }
        }
        for t in 0..T {
            let yd = yt[t].d.get();
            let d = yd * b.d;
            let dmin = -yd * b.dmin;
            let prod = q4k_mins_prod(b.mins, yt[t]);
            acc_m[t] = _mm_fmadd_ps(_mm_set1_ps(dmin), _mm_cvtepi32_ps(prod), acc_m[t]);
            acc[t] = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi[t]), acc[t]);
        }
    }
    std::array::from_fn(|t| hsum_f32x8(acc[t]) + hsum_f32x4(acc_m[t]))
}

#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) fn dot4_q4_k(w: &[u8], a: ActRows<'_>, out: &mut [f32; 4]) {
    let w: &[BlockQ4K] = as_blocks(w);
    *out = tile_q4_k(w, rows_n::<4, BlockQ8K>(&a, w.len()));
}

#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) fn dot8_q4_k(w: &[u8], a: ActRows<'_>, out: &mut [f32; 8]) {
    let w: &[BlockQ4K] = as_blocks(w);
    *out = tile_q4_k(w, rows_n::<8, BlockQ8K>(&a, w.len()));
}

// ---------------------------------------------------------------- Q6_K × Q8_K

/// The four 32-byte groups of 6-bit values (0..64, unbiased) of half `h` of a Q6_K block.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) fn q6k_groups(x: &BlockQ6K, h: usize) -> [__m256i; 4] {
    let m15 = _mm256_set1_epi8(15);
    let b1 = load_bytes32(&x.ql[64 * h..64 * h + 32]);
    let b2 = load_bytes32(&x.ql[64 * h + 32..64 * h + 64]);
    let bh = load_bytes32(&x.qh[32 * h..32 * h + 32]);
    let h0 = _mm256_slli_epi16::<4>(_mm256_and_si256(bh, _mm256_set1_epi8(3)));
    let h1 = _mm256_slli_epi16::<2>(_mm256_and_si256(bh, _mm256_set1_epi8(12)));
    let h2 = _mm256_and_si256(bh, _mm256_set1_epi8(48));
    let h3 = _mm256_srli_epi16::<2>(_mm256_and_si256(bh, _mm256_set1_epi8(-64)));
    [
        _mm256_or_si256(_mm256_and_si256(b1, m15), h0),
        _mm256_or_si256(_mm256_and_si256(b2, m15), h1),
        _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16::<4>(b1), m15), h2),
        _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16::<4>(b2), m15), h3),
    ]
}

/// Scales for group `g` (0..8) of 32 values: 8 i16 lanes of `sc[2g]`, then 8 of `sc[2g+1]`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn q6k_scale(sc: &[i8; 16], g: usize) -> __m256i {
    _mm256_set_m128i(
        _mm_set1_epi16(sc[2 * g + 1] as i16),
        _mm_set1_epi16(sc[2 * g] as i16),
    )
}

/// The per-lane bias correction `32 * sum(sc * bsum)` (ggml's `q8sclsub`).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn q6k_bias(scales16: __m256i, y: &BlockQ8K) -> __m256i {
    _mm256_slli_epi32::<5>(_mm256_madd_epi16(load_bytes32(&y.bsums), scales16))
}

#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) fn dot_q6_k(w: &[u8], a: &[u8]) -> f32 {
    let (w, a): (&[BlockQ6K], &[BlockQ8K]) = (as_blocks(w), as_blocks(a));
    assert_eq!(w.len(), a.len());
    let mut acc = _mm256_setzero_ps();
    for (x, y) in w.iter().zip(a) {
        let d = y.d.get() * f16_to_f32(x.d);
        let scales16 = _mm256_cvtepi8_epi16(load_bytes16(&x.scales));
        let mut sumi = _mm256_setzero_si256();
        for h in 0..2 {
            let q = q6k_groups(x, h);
            let mut p = [_mm256_setzero_si256(); 4];
            for k in 0..4 {
                let o = 128 * h + 32 * k;
                let q8 = load_bytes32(&y.qs[o..o + 32]);
                let p16 = _mm256_maddubs_epi16(q[k], q8);
                p[k] = _mm256_madd_epi16(q6k_scale(&x.scales, 4 * h + k), p16);
            }
            sumi = _mm256_add_epi32(sumi, _mm256_add_epi32(p[0], p[1]));
            sumi = _mm256_add_epi32(sumi, _mm256_add_epi32(p[2], p[3]));
        }
        sumi = _mm256_sub_epi32(sumi, q6k_bias(scales16, y));
        acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc);
    }
    hsum_f32x8(acc)
}

/// The 1 × `T` GEMM tile of Q6_K: each weight block unpacked once for `T` tokens, each
/// (row, token) pair computed exactly as [`dot_q6_k`].
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn tile_q6_k<const T: usize>(w: &[BlockQ6K], ys: [&[BlockQ8K]; T]) -> [f32; T] {
    let mut acc = [_mm256_setzero_ps(); T];
    for (i, x) in w.iter().enumerate() {
        let dx = f16_to_f32(x.d);
        let yt: [&BlockQ8K; T] = std::array::from_fn(|t| &ys[t][i]);
        let scales16 = _mm256_cvtepi8_epi16(load_bytes16(&x.scales));
        let mut sumi = [_mm256_setzero_si256(); T];
        for h in 0..2 {
            for (k, qk) in q6k_groups(x, h).into_iter().enumerate() {
                let o = 128 * h + 32 * k;
                let sc = q6k_scale(&x.scales, 4 * h + k);
                for t in 0..T {
                    let q8 = load_bytes32(&yt[t].qs[o..o + 32]);
                    let p = _mm256_madd_epi16(sc, _mm256_maddubs_epi16(qk, q8));
                    sumi[t] = _mm256_add_epi32(sumi[t], p);
                }
            }
        }
        for t in 0..T {
            let s = _mm256_sub_epi32(sumi[t], q6k_bias(scales16, yt[t]));
            let d = yt[t].d.get() * dx;
            acc[t] = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(s), acc[t]);
        }
    }
    std::array::from_fn(|t| hsum_f32x8(acc[t]))
}

#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) fn dot4_q6_k(w: &[u8], a: ActRows<'_>, out: &mut [f32; 4]) {
    let w: &[BlockQ6K] = as_blocks(w);
    *out = tile_q6_k(w, rows_n::<4, BlockQ8K>(&a, w.len()));
}

#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) fn dot8_q6_k(w: &[u8], a: ActRows<'_>, out: &mut [f32; 8]) {
    let w: &[BlockQ6K] = as_blocks(w);
    *out = tile_q6_k(w, rows_n::<8, BlockQ8K>(&a, w.len()));
}

dotr4_by_dot!(dotr4_q4_k, dot_q4_k);
dotr4_by_dot!(dotr4_q6_k, dot_q6_k);
