//! AVX-512 GEMM micro-kernels of the 16-bit float weight types (F16, BF16): one weight row
//! against four or eight tokens.
//!
//! Each keeps the float operations of the single dot (`super::super::avx2::float`)
//! exactly. That dot keeps four 8-lane accumulators, `s[j]` taking elements
//! `i + 8j .. i + 8j + 8` of every 32-element step; here one `zmm` holds `s[0]` and `s[1]`
//! (elements `i .. i + 16`) and another `s[2]` and `s[3]`, so every lane sees the same FMAs
//! in the same order. The halves are then reduced as the single dot reduces, and the tail
//! is its tail. Weights are widened once per step for all the tokens; activations are read
//! widened (`ActRows::sc`, exact).

use std::arch::x86_64::*;

use super::util::*;
use crate::arch::x86_64::avx2::float::{reduce_bf16, reduce4};
use crate::blocks::bf16_to_f32;
use crate::table::ActRows;

/// Sixteen F16 weights (32 bytes, checked) widened.
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
fn load_f16x16(p: &[u8]) -> __m512 {
    _mm512_cvtph_ps(load256(&p[..32]))
}

/// Sixteen BF16 weights (32 bytes, checked) widened.
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
fn load_bf16x16(p: &[u8]) -> __m512 {
    let v = _mm512_cvtepu16_epi32(load256(&p[..32]));
    _mm512_castsi512_ps(_mm512_slli_epi32::<16>(v))
}

/// Sixteen floats from a slice that has at least sixteen (checked).
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
fn load_f32x16(p: &[f32]) -> __m512 {
    assert!(p.len() >= 16);
    // SAFETY: at least sixteen readable floats (asserted); the load is unaligned.
    unsafe { _mm512_loadu_ps(p.as_ptr()) }
}

fn f16_at(b: &[u8], i: usize) -> f32 {
    half::f16::from_bits(u16::from_le_bytes([b[2 * i], b[2 * i + 1]])).to_f32()
}

fn bf16_at(b: &[u8], i: usize) -> f32 {
    bf16_to_f32(u16::from_le_bytes([b[2 * i], b[2 * i + 1]]))
}

/// `T` tokens' dots with one 16-bit float weight row (see the module docs).
macro_rules! dots_float16 {
    ($name:ident, $load:ident, $reduce:ident, $elem:ident) => {
        #[inline]
        #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
        fn $name<const T: usize>(w: &[u8], a: ActRows<'_>, out: &mut [f32; T]) {
            let n = w.len() / 2;
            let np = n & !31;
            let x: [&[f32]; T] = std::array::from_fn(|t| a.scales(t, n));
            let mut lo = [_mm512_setzero_ps(); T];
            let mut hi = [_mm512_setzero_ps(); T];
            for i in (0..np).step_by(32) {
                let w0 = $load(&w[2 * i..]);
                let w1 = $load(&w[2 * i + 32..]);
                for ((l, h), xt) in lo.iter_mut().zip(hi.iter_mut()).zip(&x) {
                    *l = _mm512_fmadd_ps(w0, load_f32x16(&xt[i..]), *l);
                    *h = _mm512_fmadd_ps(w1, load_f32x16(&xt[i + 16..]), *h);
                }
            }
            for (((o, l), h), xt) in out.iter_mut().zip(lo).zip(hi).zip(&x) {
                let (s0, s1) = halves_ps(l);
                let (s2, s3) = halves_ps(h);
                let mut sum = $reduce([s0, s1, s2, s3]) as f64;
                for (i, &xi) in (np..n).zip(&xt[np..]) {
                    sum += ($elem(w, i) * xi) as f64;
                }
                *o = sum as f32;
            }
        }
    };
}

dots_float16!(dots_f16, load_f16x16, reduce4, f16_at);
dots_float16!(dots_bf16, load_bf16x16, reduce_bf16, bf16_at);

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
