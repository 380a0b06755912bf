//! AVX-512 GEMM micro-kernels of the 16-bit float weight types (F16, BF16): one weight row
//! against four or eight tokens, and four rows against eight.
//!
//! Each keeps the float operations of the single dot (`super::super::avx2::float`)
//! exactly. That dot keeps four 8-lane accumulators, `s[j]` taking elements
//! `i + 8j .. i + 8j + 8` of every 32-element step; here one `zmm` holds `s[0]` and `s[1]`
//! (elements `i .. i + 16`) and another `s[2]` and `s[3]`, so every lane sees the same FMAs
//! in the same order. The halves are then reduced as the single dot reduces, and the tail
//! is its tail. Weights are widened once per step for all the tokens; activations are read
//! widened (`ActRows::sc`, exact).
//!
//! The four-row tiles (`dot8r4`) walk their rows four times: for the `s[0] | s[1]`
//! accumulators and then the `s[2] | s[3]` ones, of tokens 0–3 and then 4–7, sixteen `zmm`
//! (four rows × four tokens) each time. Each activation vector is then loaded once for four
//! rows, where the one-row kernel loads one per FMA (Qwen2.5-Coder-0.5B in F16, its
//! matrices for 64 tokens, two threads: 685 → 430 ms; docs/kernels.md, "A few tokens on
//! AVX-512"). Rows left after whole groups of four take the one-row `dot8`.

use std::arch::x86_64::*;

use super::util::*;
use crate::arch::x86_64::avx2::float::{reduce_bf16, reduce4};
use crate::arch::x86_64::avx2::util::prefetch_row_ahead;
use crate::blocks::bf16_to_f32;
use crate::table::ActRows;

fn f16_at(b: &[u8], i: usize) -> f32 {
    half::f16::from_bits(u16::from_le_bytes([b[2 * i], b[2 * i + 1]])).to_f32()
}

fn bf16_at(b: &[u8], i: usize) -> f32 {
    bf16_to_f32(u16::from_le_bytes([b[2 * i], b[2 * i + 1]]))
}

/// One (row, token) dot from its two accumulators (`s[0] | s[1]`, `s[2] | s[3]`): reduced
/// as the single dot reduces (`reduce`), then the elements from `np` added one product at
/// a time in `f64` (`elem` widens weight `i` of `row`).
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
fn finish(
    lo: __m512,
    hi: __m512,
    row: &[u8],
    xt: &[f32],
    np: usize,
    reduce: impl Fn([__m256; 4]) -> f32,
    elem: impl Fn(&[u8], usize) -> f32,
) -> f32 {
    let (s0, s1) = halves_ps(lo);
    let (s2, s3) = halves_ps(hi);
    let mut sum = reduce([s0, s1, s2, s3]) as f64;
    for (i, &xi) in (np..xt.len()).zip(&xt[np..]) {
        sum += (elem(row, i) * xi) as f64;
    }
    sum as f32
}

/// `T` tokens' dots with one 16-bit float weight row (see the module docs). Each step
/// also prefetches the same step two rows further on, as the single dot does (a matrix's
/// rows are contiguous), so a four-token pass over weights out of cache streams them.
macro_rules! dots_float16 {
    ($name:ident, $load_at:ident, $reduce:ident, $elem:ident) => {
        #[inline]
        #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
        fn $name<const T: usize>(w: &[u8], a: ActRows<'_>, out: &mut [f32; T]) {
            let n = w.len() / 2;
            let np = n & !31;
            let stride = a.sc_stride;
            let x = &a.sc[..(T - 1) * stride + n];
            let (wp, xp) = (w.as_ptr(), x.as_ptr());
            let mut lo = [_mm512_setzero_ps(); T];
            let mut hi = [_mm512_setzero_ps(); T];
            for i in (0..np).step_by(32) {
                prefetch_row_ahead(w, 2 * i);
                // SAFETY: `i + 32 <= np <= n`: the 64 bytes at `2i` of the row and the 32
                // floats at `i` of every token (`x` holds `T` rows of `n` at `stride`) are
                // in bounds; the loads are unaligned.
                unsafe {
                    let w0 = $load_at(wp.add(2 * i));
                    let w1 = $load_at(wp.add(2 * i + 32));
                    for t in 0..T {
                        let xt = xp.add(t * stride + i);
                        lo[t] = _mm512_fmadd_ps(w0, _mm512_loadu_ps(xt), lo[t]);
                        hi[t] = _mm512_fmadd_ps(w1, _mm512_loadu_ps(xt.add(16)), hi[t]);
                    }
                }
            }
            for (t, o) in out.iter_mut().enumerate() {
                *o = finish(
                    lo[t],
                    hi[t],
                    w,
                    &x[t * stride..t * stride + n],
                    np,
                    |s| $reduce(s),
                    $elem,
                );
            }
        }
    };
}

/// The four-row × eight-token tile of a 16-bit float type: for each half of the
/// accumulators and each four of the tokens, `$quarter` walks the four rows with sixteen
/// accumulators (four rows × four tokens), so each activation vector is loaded once for
/// four rows, which for long rows (eight tokens of 4,864 columns are 155 KB, read from L2)
/// sets the pace.
macro_rules! tile4_float16 {
    ($quarter:ident, $tile:ident, $load_at:ident, $reduce:ident, $elem:ident) => {
        /// Accumulators `h` (`0`: elements `i .. i + 16` of each 32-element step, `1`:
        /// `i + 16 .. i + 32`) of rows `w[r * row_bytes..]` (four) and tokens
        /// `x[t * stride..]` (four), over the first `np` elements (a multiple of 32).
        #[inline]
        #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
        fn $quarter(
            w: &[u8],
            row_bytes: usize,
            x: &[f32],
            stride: usize,
            np: usize,
            h: usize,
            prefetch: bool,
        ) -> [[__m512; 4]; 4] {
            assert!(np.is_multiple_of(32) && h < 2);
            assert!(3 * row_bytes + 2 * np <= w.len() && 3 * stride + np <= x.len());
            let (w0, xp) = (w.as_ptr(), x.as_ptr());
            let mut acc = [[_mm512_setzero_ps(); 4]; 4];
            let mut i = 16 * h;
            while i < np {
                if prefetch {
                    // The same step of the next four rows (rows are contiguous); a hint,
                    // formed with `wrapping_add`, never dereferenced.
                    for r in 4..8 {
                        _mm_prefetch::<_MM_HINT_T0>(w0.wrapping_add(r * row_bytes + 2 * i).cast());
                    }
                }
                // SAFETY: `i + 16 <= np`: the 32 bytes at `2i` of the four rows and the 16
                // floats at `i` of the four tokens are in bounds (asserted above); the loads
                // are unaligned.
                unsafe {
                    let wv: [__m512; 4] =
                        std::array::from_fn(|r| $load_at(w0.add(r * row_bytes + 2 * i)));
                    for t in 0..4 {
                        let xv = _mm512_loadu_ps(xp.add(t * stride + i));
                        for (acc, wv) in acc.iter_mut().zip(&wv) {
                            acc[t] = _mm512_fmadd_ps(*wv, xv, acc[t]);
                        }
                    }
                }
                i += 32;
            }
            acc
        }

        #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
        pub(crate) fn $tile(w: &[u8], row_bytes: usize, a: ActRows<'_>, out: &mut [[f32; 8]; 4]) {
            let n = row_bytes / 2;
            let np = n & !31;
            let stride = a.sc_stride;
            let x = &a.sc[..7 * stride + n];
            for t0 in [0, 4] {
                let xs = &x[t0 * stride..];
                let lo = $quarter(w, row_bytes, xs, stride, np, 0, t0 == 0);
                let hi = $quarter(w, row_bytes, xs, stride, np, 1, false);
                for (r, o) in out.iter_mut().enumerate() {
                    let row = &w[r * row_bytes..(r + 1) * row_bytes];
                    for t in 0..4 {
                        let xt = &xs[t * stride..t * stride + n];
                        o[t0 + t] = finish(lo[r][t], hi[r][t], row, xt, np, |s| $reduce(s), $elem);
                    }
                }
            }
        }
    };
}

/// Sixteen F16 weights at `p` widened.
///
/// # Safety
/// `p` points at 32 readable bytes.
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
unsafe fn load_f16x16_at(p: *const u8) -> __m512 {
    // SAFETY: 32 readable bytes (the caller's contract); the load is unaligned.
    _mm512_cvtph_ps(unsafe { _mm256_loadu_si256(p.cast()) })
}

/// Sixteen BF16 weights at `p` widened.
///
/// # Safety
/// `p` points at 32 readable bytes.
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
unsafe fn load_bf16x16_at(p: *const u8) -> __m512 {
    // SAFETY: 32 readable bytes (the caller's contract); the load is unaligned.
    let v = _mm512_cvtepu16_epi32(unsafe { _mm256_loadu_si256(p.cast()) });
    _mm512_castsi512_ps(_mm512_slli_epi32::<16>(v))
}

dots_float16!(dots_f16, load_f16x16_at, reduce4, f16_at);
dots_float16!(dots_bf16, load_bf16x16_at, reduce_bf16, bf16_at);
tile4_float16!(quarter_f16, dot8r4_f16, load_f16x16_at, reduce4, f16_at);
tile4_float16!(
    quarter_bf16,
    dot8r4_bf16,
    load_bf16x16_at,
    reduce_bf16,
    bf16_at
);

#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
pub(crate) fn dot4_f16(w: &[u8], a: ActRows<'_>, out: &mut [f32; 4]) {
    dots_f16(w, a, out)
}

#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
pub(crate) fn dot8_f16(w: &[u8], a: ActRows<'_>, out: &mut [f32; 8]) {
    dots_f16(w, a, out)
}

#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
pub(crate) fn dot4_bf16(w: &[u8], a: ActRows<'_>, out: &mut [f32; 4]) {
    dots_bf16(w, a, out)
}

#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
pub(crate) fn dot8_bf16(w: &[u8], a: ActRows<'_>, out: &mut [f32; 8]) {
    dots_bf16(w, a, out)
}
