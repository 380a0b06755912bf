//! AVX2 kernels of the float weight types (F32, F16, BF16): dequantization (F16C / shift
//! widening, exact) and dot products, each the operations of ggml's
//! `ggml_vec_dot_f32/f16/bf16` AVX2 path in the same order. `dotr4` is four single dots;
//! the F16 and BF16 `dot4`, `dot2` and `dot3` (GEMM: one weight row, four, two or three
//! tokens) widen each weight vector once for the tokens and read the activations already
//! widened (`ActRows::sc`, exact), with each token's lanes, FMAs, reduction and tail those of
//! the single dot. F32's `dot4` is four single dots (rare as matmul weights). The F16 and
//! BF16 dots and tiles prefetch the rows after theirs (see [`dot_f16`]); a prefetch changes
//! no result.

use std::arch::x86_64::*;

use super::util::*;
use crate::table::ActRows;

#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) fn dequant_f16(src: &[u8], dst: &mut [f32]) {
    assert_eq!(src.len(), dst.len() * 2);
    let mut xs = src.chunks_exact(16);
    let mut ys = dst.chunks_exact_mut(8);
    for (x, y) in (&mut xs).zip(&mut ys) {
        store_f32x8(y, _mm256_cvtph_ps(load_bytes16(x)));
    }
    crate::scalar::float::dequant_f16(xs.remainder(), ys.into_remainder());
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
    crate::scalar::float::dequant_bf16(xs.remainder(), ys.into_remainder());
}

// ---------------------------------------------------------------- F32, F16, BF16

/// ggml's `GGML_F32x8_REDUCE` over four accumulators: (s0 + s2) + (s1 + s3), then the
/// 128-bit halves, then two `hadd`s.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) fn reduce4(s: [__m256; 4]) -> f32 {
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
    let f = |b: &[u8], i: usize| {
        f32::from_le_bytes([b[4 * i], b[4 * i + 1], b[4 * i + 2], b[4 * i + 3]])
    };
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
pub(crate) fn load_f16x8(p: &[u8]) -> __m256 {
    _mm256_cvtph_ps(load_bytes16(&p[..16]))
}

/// `ggml_vec_dot_f16` (F16C + FMA): as [`dot_f32`] on widened values. Each 32-element
/// step also prefetches the same step two rows further on (`prefetch_row_ahead`; rows of
/// a matrix are contiguous, and a hint past the end is harmless), so a GEMV of repeated
/// single dots streams its rows instead of waiting on each row's first lines (Qwen2.5-Coder-
/// 0.5B in F16, two threads, a one-token pass of its matrices: 73–82 ms → 60–65).
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) fn dot_f16(w: &[u8], a: &[u8]) -> f32 {
    assert_eq!(w.len(), a.len());
    let n = w.len() / 2;
    let np = n & !31;
    let mut s = [_mm256_setzero_ps(); 4];
    for i in (0..np).step_by(32) {
        prefetch_row_ahead(w, 2 * i);
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
pub(crate) fn load_bf16x8(p: &[u8]) -> __m256 {
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
        prefetch_row_ahead(w, 2 * i);
        for (j, cj) in c.iter_mut().enumerate() {
            let k = 2 * (i + 8 * j);
            *cj = _mm256_fmadd_ps(load_bf16x8(&w[k..]), load_bf16x8(&a[k..]), *cj);
        }
    }
    let mut sum = reduce_bf16(c) as f64;
    let b = |s: &[u8], i: usize| {
        crate::blocks::bf16_to_f32(u16::from_le_bytes([s[2 * i], s[2 * i + 1]]))
    };
    for i in np..n {
        sum += (b(w, i) * b(a, i)) as f64;
    }
    sum as f32
}

/// The bf16 dot's reduction: `(c0 + c2) + (c1 + c3)` lane-wise, then `hsum_float_8`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) fn reduce_bf16(c: [__m256; 4]) -> f32 {
    hsum_f32x8(_mm256_add_ps(
        _mm256_add_ps(c[0], c[2]),
        _mm256_add_ps(c[1], c[3]),
    ))
}

/// The GEMM micro-kernels of a 16-bit float type (one weight row, two, three or four
/// tokens): `$load` widens eight weights, `$reduce` is the single dot's reduction and
/// `$elem` its tail's widening of one weight. Accumulator `j` of a token takes elements
/// `i + 8j .. i + 8j + 8` of every 32-element step, as in the single dot. `$tile::<T, J>`
/// walks the row `4 / J` times, each walk for `J` of the four accumulators: `T × J`
/// independent FMA chains (eight for two, three or four tokens) keep both FMA units busy
/// where four chains waited on each FMA's latency, and with the `J` widened weight vectors
/// they fit the sixteen registers. The activations are read widened from `a.sc`
/// (`act_scales`: exact), and each accumulator takes its FMAs in the single dot's order, so
/// every product and sum is the single dot's.
macro_rules! float16_tiles {
    ($tile:ident, $dot2:ident, $dot3:ident, $dot4:ident, $load:ident, $reduce:ident, $elem:expr) => {
        #[inline]
        #[target_feature(enable = "avx2,fma,f16c")]
        fn $tile<const T: usize, const J: usize>(w: &[u8], a: &ActRows<'_>) -> [f32; T] {
            let n = w.len() / 2;
            let np = n & !31;
            let x: [&[f32]; T] = std::array::from_fn(|t| a.scales(t, n));
            let mut s = [[_mm256_setzero_ps(); 4]; T];
            for j0 in (0..4).step_by(J) {
                let mut acc = [[_mm256_setzero_ps(); J]; T];
                for i in (0..np).step_by(32) {
                    if j0 == 0 {
                        // The rows after this one, as in the single dot (the F16 model's
                        // two-token pass of its matrices: 84–88 ms → 72).
                        prefetch_row_ahead(w, 2 * i);
                    }
                    let k = i + 8 * j0;
                    let wb = &w[2 * k..2 * k + 16 * J];
                    let wv: [__m256; J] = std::array::from_fn(|j| $load(&wb[16 * j..]));
                    for (at, xt) in acc.iter_mut().zip(&x) {
                        let xs = &xt[k..k + 8 * J];
                        for j in 0..J {
                            at[j] = _mm256_fmadd_ps(wv[j], load_f32x8(&xs[8 * j..]), at[j]);
                        }
                    }
                }
                for (st, at) in s.iter_mut().zip(acc) {
                    st[j0..j0 + J].copy_from_slice(&at);
                }
            }
            let elem = $elem;
            std::array::from_fn(|t| {
                let mut sum = $reduce(s[t]) as f64;
                for (i, &xi) in (np..n).zip(&x[t][np..]) {
                    sum += (elem(w, i) * xi) as f64;
                }
                sum as f32
            })
        }

        #[target_feature(enable = "avx2,fma,f16c")]
        pub(crate) fn $dot2(w: &[u8], a: ActRows<'_>, out: &mut [f32; 4]) {
            out[..2].copy_from_slice(&$tile::<2, 4>(w, &a));
        }

        #[target_feature(enable = "avx2,fma,f16c")]
        pub(crate) fn $dot3(w: &[u8], a: ActRows<'_>, out: &mut [f32; 4]) {
            out[..3].copy_from_slice(&$tile::<3, 2>(w, &a));
        }

        #[target_feature(enable = "avx2,fma,f16c")]
        pub(crate) fn $dot4(w: &[u8], a: ActRows<'_>, out: &mut [f32; 4]) {
            *out = $tile::<4, 2>(w, &a);
        }
    };
}

dot4_by_dot!(dot4_f32, dot_f32);

float16_tiles!(
    tile_f16,
    dot2_f16,
    dot3_f16,
    dot4_f16,
    load_f16x8,
    reduce4,
    |b: &[u8], i: usize| {
        half::f16::from_bits(u16::from_le_bytes([b[2 * i], b[2 * i + 1]])).to_f32()
    }
);

float16_tiles!(
    tile_bf16,
    dot2_bf16,
    dot3_bf16,
    dot4_bf16,
    load_bf16x8,
    reduce_bf16,
    |b: &[u8], i: usize| {
        crate::blocks::bf16_to_f32(u16::from_le_bytes([b[2 * i], b[2 * i + 1]]))
    }
);

dotr4_by_dot!(dotr4_f32, dot_f32);

dotr4_by_dot!(dotr4_f16, dot_f16);

dotr4_by_dot!(dotr4_bf16, dot_bf16);
