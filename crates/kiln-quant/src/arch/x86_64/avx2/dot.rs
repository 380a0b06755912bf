//! AVX2 dot products for the 32-element block types and the float types, plus their
//! four-token GEMM micro-kernels.
//!
//! Each single dot performs the operations of ggml's AVX2 `ggml_vec_dot_*` in the same order
//! (8-lane integer sums of four products, converted to float, `fma`-accumulated per block,
//! then `hsum_float_8`), so with the same quantized activations the result is ggml's bit for
//! bit. Each `dot4_*` unpacks a weight block once and runs exactly the same per-token
//! operations for four tokens: its results equal the single dot's bit for bit.

use std::arch::x86_64::*;

use bytemuck::Pod;

use super::util::*;
use crate::blocks::{BlockQ4_0, BlockQ4_1, BlockQ5_0, BlockQ8_0, BlockQ8_1, as_blocks};

/// The four activation rows of a `dot4` call, each `n` blocks long.
#[inline(always)]
pub(crate) fn rows4<B: Pod>(a: &[u8], stride: usize, n: usize) -> [&[B]; 4] {
    let len = n * size_of::<B>();
    std::array::from_fn(|t| as_blocks(&a[t * stride..t * stride + len]))
}

// ---------------------------------------------------------------- Q4_0 × Q8_0

#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) fn dot_q4_0(w: &[u8], a: &[u8]) -> f32 {
    let (w, a): (&[BlockQ4_0], &[BlockQ8_0]) = (as_blocks(w), as_blocks(a));
    assert_eq!(w.len(), a.len());
    let mut acc = _mm256_setzero_ps();
    for (x, y) in w.iter().zip(a) {
        let d = _mm256_set1_ps(f16_to_f32(x.d) * f16_to_f32(y.d));
        let qx = _mm256_sub_epi8(nibbles32(&x.qs), _mm256_set1_epi8(8));
        let q = mul_sum_i8_pairs_f32(qx, load_i8x32(&y.qs));
        acc = _mm256_fmadd_ps(d, q, acc);
    }
    hsum_f32x8(acc)
}

#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) fn dot4_q4_0(w: &[u8], a: &[u8], stride: usize, out: &mut [f32; 4]) {
    let w: &[BlockQ4_0] = as_blocks(w);
    let ys = rows4::<BlockQ8_0>(a, stride, w.len());
    let mut acc = [_mm256_setzero_ps(); 4];
    for (i, x) in w.iter().enumerate() {
        let dx = f16_to_f32(x.d);
        let qx = _mm256_sub_epi8(nibbles32(&x.qs), _mm256_set1_epi8(8));
        let ax = _mm256_sign_epi8(qx, qx);
        for t in 0..4 {
            let y = &ys[t][i];
            let d = _mm256_set1_ps(dx * f16_to_f32(y.d));
            let sy = _mm256_sign_epi8(load_i8x32(&y.qs), qx);
            acc[t] = _mm256_fmadd_ps(d, mul_sum_us8_pairs_f32(ax, sy), acc[t]);
        }
    }
    for t in 0..4 {
        out[t] = hsum_f32x8(acc[t]);
    }
}

// ---------------------------------------------------------------- Q4_1 × Q8_1

/// The per-block scalars of Q4_1 × Q8_1: lane 0 of `[dx, mx] * [dy, sy]` is the combined
/// scale; lane 1 of `fma([dx, mx], [dy, sy], summs)` is ggml's `summs += m * s` (fused, as
/// gcc contracts it). Both are exactly the scalar operations, done in vector lanes.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn q4_1_scales(x: &BlockQ4_1, y: &BlockQ8_1, summs: &mut __m128) -> __m256 {
    let xv = f16x2_to_f32(x.d, x.m);
    let yv = f16x2_to_f32(y.d, y.s);
    *summs = _mm_fmadd_ps(xv, yv, *summs);
    _mm256_broadcastss_ps(_mm_mul_ps(xv, yv))
}

/// Lane 1 of the `summs` vector (see [`q4_1_scales`]).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn lane1(v: __m128) -> f32 {
    _mm_cvtss_f32(_mm_movehdup_ps(v))
}

#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) fn dot_q4_1(w: &[u8], a: &[u8]) -> f32 {
    let (w, a): (&[BlockQ4_1], &[BlockQ8_1]) = (as_blocks(w), as_blocks(a));
    assert_eq!(w.len(), a.len());
    let mut acc = _mm256_setzero_ps();
    let mut summs = _mm_setzero_ps();
    for (x, y) in w.iter().zip(a) {
        let d = q4_1_scales(x, y, &mut summs);
        let xy = mul_sum_us8_pairs_f32(nibbles32(&x.qs), load_i8x32(&y.qs));
        acc = _mm256_fmadd_ps(d, xy, acc);
    }
    hsum_f32x8(acc) + lane1(summs)
}

#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) fn dot4_q4_1(w: &[u8], a: &[u8], stride: usize, out: &mut [f32; 4]) {
    let w: &[BlockQ4_1] = as_blocks(w);
    let ys = rows4::<BlockQ8_1>(a, stride, w.len());
    let mut acc = [_mm256_setzero_ps(); 4];
    let mut summs = [_mm_setzero_ps(); 4];
    for (i, x) in w.iter().enumerate() {
        let qx = nibbles32(&x.qs);
        for t in 0..4 {
            let y = &ys[t][i];
            let d = q4_1_scales(x, y, &mut summs[t]);
            let xy = mul_sum_us8_pairs_f32(qx, load_i8x32(&y.qs));
            acc[t] = _mm256_fmadd_ps(d, xy, acc[t]);
        }
    }
    for t in 0..4 {
        out[t] = hsum_f32x8(acc[t]) + lane1(summs[t]);
    }
}

// ---------------------------------------------------------------- Q5_0 × Q8_0

/// The 32 five-bit values of a Q5_0 block as signed bytes `q - 16`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn unpack_q5_0(x: &BlockQ5_0) -> __m256i {
    let hi = _mm256_andnot_si256(bits32(&x.qh), _mm256_set1_epi8(0xF0u8 as i8));
    _mm256_or_si256(nibbles32(&x.qs), hi)
}

#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) fn dot_q5_0(w: &[u8], a: &[u8]) -> f32 {
    let (w, a): (&[BlockQ5_0], &[BlockQ8_0]) = (as_blocks(w), as_blocks(a));
    assert_eq!(w.len(), a.len());
    let mut acc = _mm256_setzero_ps();
    for (x, y) in w.iter().zip(a) {
        let d = _mm256_set1_ps(f16_to_f32(x.d) * f16_to_f32(y.d));
        let q = mul_sum_i8_pairs_f32(unpack_q5_0(x), load_i8x32(&y.qs));
        acc = _mm256_fmadd_ps(d, q, acc);
    }
    hsum_f32x8(acc)
}

#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) fn dot4_q5_0(w: &[u8], a: &[u8], stride: usize, out: &mut [f32; 4]) {
    let w: &[BlockQ5_0] = as_blocks(w);
    let ys = rows4::<BlockQ8_0>(a, stride, w.len());
    let mut acc = [_mm256_setzero_ps(); 4];
    for (i, x) in w.iter().enumerate() {
        let dx = f16_to_f32(x.d);
        let qx = unpack_q5_0(x);
        let ax = _mm256_sign_epi8(qx, qx);
        for t in 0..4 {
            let y = &ys[t][i];
            let d = _mm256_set1_ps(dx * f16_to_f32(y.d));
            let sy = _mm256_sign_epi8(load_i8x32(&y.qs), qx);
            acc[t] = _mm256_fmadd_ps(d, mul_sum_us8_pairs_f32(ax, sy), acc[t]);
        }
    }
    for t in 0..4 {
        out[t] = hsum_f32x8(acc[t]);
    }
}

// ---------------------------------------------------------------- Q8_0 × Q8_0

#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) fn dot_q8_0(w: &[u8], a: &[u8]) -> f32 {
    let (w, a): (&[BlockQ8_0], &[BlockQ8_0]) = (as_blocks(w), as_blocks(a));
    assert_eq!(w.len(), a.len());
    let mut acc = _mm256_setzero_ps();
    for (x, y) in w.iter().zip(a) {
        let d = _mm256_set1_ps(f16_to_f32(x.d) * f16_to_f32(y.d));
        let q = mul_sum_i8_pairs_f32(load_i8x32(&x.qs), load_i8x32(&y.qs));
        acc = _mm256_fmadd_ps(d, q, acc);
    }
    hsum_f32x8(acc)
}

#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) fn dot4_q8_0(w: &[u8], a: &[u8], stride: usize, out: &mut [f32; 4]) {
    let w: &[BlockQ8_0] = as_blocks(w);
    let ys = rows4::<BlockQ8_0>(a, stride, w.len());
    let mut acc = [_mm256_setzero_ps(); 4];
    for (i, x) in w.iter().enumerate() {
        let dx = f16_to_f32(x.d);
        let qx = load_i8x32(&x.qs);
        let ax = _mm256_sign_epi8(qx, qx);
        for t in 0..4 {
            let y = &ys[t][i];
            let d = _mm256_set1_ps(dx * f16_to_f32(y.d));
            let sy = _mm256_sign_epi8(load_i8x32(&y.qs), qx);
            acc[t] = _mm256_fmadd_ps(d, mul_sum_us8_pairs_f32(ax, sy), acc[t]);
        }
    }
    for t in 0..4 {
        out[t] = hsum_f32x8(acc[t]);
    }
}

// ---------------------------------------------------------------- F32, F16, BF16

/// ggml's `GGML_F32x8_REDUCE` over four accumulators: (s0 + s2) + (s1 + s3), then the
/// 128-bit halves, then two `hadd`s.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn reduce4(s: [__m256; 4]) -> f32 {
    let s0 = _mm256_add_ps(s[0], s[2]);
    let s1 = _mm256_add_ps(s[1], s[3]);
    let s0 = _mm256_add_ps(s0, s1);
    let t0 = _mm_add_ps(_mm256_castps256_ps128(s0), _mm256_extractf128_ps::<1>(s0));
    let t1 = _mm_hadd_ps(t0, t0);
    _mm_cvtss_f32(_mm_hadd_ps(t1, t1))
}

/// `ggml_vec_dot_f32` (AVX + FMA): 32 elements per step in four 8-lane FMA accumulators,
/// reduced, then the tail added one product at a time in `f64`.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) fn dot_f32(w: &[u8], a: &[u8]) -> f32 {
    assert_eq!(w.len(), a.len());
    let n = w.len() / 4;
    let np = n & !31;
    let mut s = [_mm256_setzero_ps(); 4];
    for i in (0..np).step_by(32) {
        for (j, sj) in s.iter_mut().enumerate() {
            let k = 4 * (i + 8 * j);
            *sj = _mm256_fmadd_ps(load_f32x8_bytes(&w[k..]), load_f32x8_bytes(&a[k..]), *sj);
        }
    }
    let mut sum = reduce4(s) as f64;
    let f = |b: &[u8], i: usize| f32::from_le_bytes([b[4 * i], b[4 * i + 1], b[4 * i + 2], b[4 * i + 3]]);
    for i in np..n {
        sum += (f(w, i) * f(a, i)) as f64;
    }
    sum as f32
}

/// 8 floats from the first 32 bytes of `p` (any alignment).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn load_f32x8_bytes(p: &[u8]) -> __m256 {
    _mm256_castsi256_ps(load_bytes32(&p[..32]))
}

#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn load_f16x8(p: &[u8]) -> __m256 {
    _mm256_cvtph_ps(load_bytes16(&p[..16]))
}

/// `ggml_vec_dot_f16` (F16C + FMA): as [`dot_f32`] on widened values.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) fn dot_f16(w: &[u8], a: &[u8]) -> f32 {
    assert_eq!(w.len(), a.len());
    let n = w.len() / 2;
    let np = n & !31;
    let mut s = [_mm256_setzero_ps(); 4];
    for i in (0..np).step_by(32) {
        for (j, sj) in s.iter_mut().enumerate() {
            let k = 2 * (i + 8 * j);
            *sj = _mm256_fmadd_ps(load_f16x8(&w[k..]), load_f16x8(&a[k..]), *sj);
        }
    }
    let mut sum = reduce4(s) as f64;
    let h = |b: &[u8], i: usize| half::f16::from_bits(u16::from_le_bytes([b[2 * i], b[2 * i + 1]]));
    for i in np..n {
        sum += (h(w, i).to_f32() * h(a, i).to_f32()) as f64;
    }
    sum as f32
}

#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn load_bf16x8(p: &[u8]) -> __m256 {
    let v = _mm256_cvtepu16_epi32(load_bytes16(&p[..16]));
    _mm256_castsi256_ps(_mm256_slli_epi32::<16>(v))
}

/// `ggml_vec_dot_bf16` (AVX2): four accumulators over 32-element steps, combined as
/// (c1 + c3) + (c2 + c4), summed like `hsum_float_8`, tail in `f64`. ggml writes
/// `c = c + x * y`; gcc's default `-ffp-contract=fast` fuses it, so this uses FMA.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) fn dot_bf16(w: &[u8], a: &[u8]) -> f32 {
    assert_eq!(w.len(), a.len());
    let n = w.len() / 2;
    let np = n & !31;
    let mut c = [_mm256_setzero_ps(); 4];
    for i in (0..np).step_by(32) {
        for (j, cj) in c.iter_mut().enumerate() {
            let k = 2 * (i + 8 * j);
            *cj = _mm256_fmadd_ps(load_bf16x8(&w[k..]), load_bf16x8(&a[k..]), *cj);
        }
    }
    let c1 = _mm256_add_ps(_mm256_add_ps(c[0], c[2]), _mm256_add_ps(c[1], c[3]));
    let mut sum = hsum_f32x8(c1) as f64;
    let b = |s: &[u8], i: usize| crate::blocks::bf16_to_f32(u16::from_le_bytes([s[2 * i], s[2 * i + 1]]));
    for i in np..n {
        sum += (b(w, i) * b(a, i)) as f64;
    }
    sum as f32
}

/// Four-row dots of the float types: four single dots (bit-identical by construction; these
/// types are rare as matmul weights, so no dedicated micro-kernel).
macro_rules! dot4_by_dot {
    ($name:ident, $dot:ident) => {
        #[target_feature(enable = "avx2,fma,f16c")]
        pub(crate) fn $name(w: &[u8], a: &[u8], stride: usize, out: &mut [f32; 4]) {
            let len = a.len() - 3 * stride;
            for (t, o) in out.iter_mut().enumerate() {
                *o = $dot(w, &a[t * stride..t * stride + len]);
            }
        }
    };
}
dot4_by_dot!(dot4_f32, dot_f32);
dot4_by_dot!(dot4_f16, dot_f16);
dot4_by_dot!(dot4_bf16, dot_bf16);
