//! NEON dot products of the float weight types (F32, F16, BF16) in the oracle's order
//! (`scalar::float::dot_float`): 32 elements per step into four 8-lane FMA accumulators
//! (accumulator `j` takes elements `8j .. 8j + 8` of each step), reduced as ggml's AVX2
//! `GGML_F32x8_REDUCE` (F32, F16) or `(c0 + c2) + (c1 + c3)` then `hsum8` (BF16), then the
//! tail (fewer than 32 elements) one product at a time in `f64`. `dotr4`/`dot4` are four
//! single dots.

use std::arch::aarch64::*;

use super::util::*;
use crate::blocks::bf16_to_f32;
use crate::table::ActRows;

/// Elements `i .. i + 8` of a little-endian `f32` row.
#[inline]
#[target_feature(enable = "neon")]
fn f32x8_at(b: &[u8], i: usize) -> F32x8 {
    let v = load16(&b[4 * i..]);
    let u = load16(&b[4 * i + 16..]);
    F32x8(vreinterpretq_f32_u8(v), vreinterpretq_f32_u8(u))
}

/// Four halves to floats with the base-NEON `fcvtl` (exact).
#[inline]
#[target_feature(enable = "neon")]
fn f16x8_to_f32(h: uint16x8_t) -> F32x8 {
    let (lo, hi): (float32x4_t, float32x4_t);
    // SAFETY: register-only instructions (no memory, no stack, flags untouched); `fcvtl` and
    // `fcvtl2` (half → single) are Armv8.0 Advanced SIMD.
    unsafe {
        std::arch::asm!(
            "fcvtl {lo:v}.4s, {h:v}.4h",
            "fcvtl2 {hi:v}.4s, {h:v}.8h",
            h = in(vreg) h,
            lo = out(vreg) lo,
            hi = out(vreg) hi,
            options(pure, nomem, nostack, preserves_flags),
        );
    }
    F32x8(lo, hi)
}

/// Elements `i .. i + 8` of a little-endian `f16` row.
#[inline]
#[target_feature(enable = "neon")]
fn f16x8_at(b: &[u8], i: usize) -> F32x8 {
    f16x8_to_f32(vreinterpretq_u16_u8(load16(&b[2 * i..])))
}

/// Elements `i .. i + 8` of a little-endian `bf16` row (`bits << 16`, exact).
#[inline]
#[target_feature(enable = "neon")]
fn bf16x8_at(b: &[u8], i: usize) -> F32x8 {
    let h = vreinterpretq_u16_u8(load16(&b[2 * i..]));
    F32x8(
        vreinterpretq_f32_u32(vshll_n_u16::<16>(vget_low_u16(h))),
        vreinterpretq_f32_u32(vshll_high_n_u16::<16>(h)),
    )
}

/// The lane-wise `(s0 + s2) + (s1 + s3)` of both reductions.
#[inline]
#[target_feature(enable = "neon")]
fn combine(s: &[F32x8; 4]) -> F32x8 {
    let h = |k: fn(&F32x8) -> float32x4_t| {
        vaddq_f32(vaddq_f32(k(&s[0]), k(&s[2])), vaddq_f32(k(&s[1]), k(&s[3])))
    };
    F32x8(h(|v| v.0), h(|v| v.1))
}

/// `GGML_F32x8_REDUCE`: then `t_l = v_l + v_{l+4}` and `(t0 + t1) + (t2 + t3)`.
#[inline]
#[target_feature(enable = "neon")]
fn reduce_f32x8(s: &[F32x8; 4]) -> f32 {
    let v = combine(s);
    let t = vaddq_f32(v.0, v.1);
    (vgetq_lane_f32::<0>(t) + vgetq_lane_f32::<1>(t))
        + (vgetq_lane_f32::<2>(t) + vgetq_lane_f32::<3>(t))
}

/// The BF16 reduction: then [`hsum8`].
#[inline]
#[target_feature(enable = "neon")]
fn reduce_bf16(s: &[F32x8; 4]) -> f32 {
    hsum8(combine(s))
}

/// The shared loop: `load8(row, i)` gives elements `i .. i + 8`, `at(row, i)` one element.
#[inline]
#[target_feature(enable = "neon")]
fn dot_float(
    n: usize,
    w: &[u8],
    a: &[u8],
    load8: impl Fn(&[u8], usize) -> F32x8,
    at: impl Fn(&[u8], usize) -> f32,
    reduce: impl Fn(&[F32x8; 4]) -> f32,
) -> f32 {
    let np = n & !31;
    let mut s = [zero8(); 4];
    for i in (0..np).step_by(32) {
        for (j, sj) in s.iter_mut().enumerate() {
            let (x, y) = (load8(w, i + 8 * j), load8(a, i + 8 * j));
            *sj = F32x8(vfmaq_f32(sj.0, x.0, y.0), vfmaq_f32(sj.1, x.1, y.1));
        }
    }
    let mut sum = reduce(&s) as f64;
    for i in np..n {
        sum += (at(w, i) * at(a, i)) as f64;
    }
    sum as f32
}

fn f32_at(b: &[u8], i: usize) -> f32 {
    f32::from_le_bytes([b[4 * i], b[4 * i + 1], b[4 * i + 2], b[4 * i + 3]])
}

fn f16_at(b: &[u8], i: usize) -> f32 {
    half::f16::from_bits(u16::from_le_bytes([b[2 * i], b[2 * i + 1]])).to_f32()
}

fn bf16_at(b: &[u8], i: usize) -> f32 {
    bf16_to_f32(u16::from_le_bytes([b[2 * i], b[2 * i + 1]]))
}

#[target_feature(enable = "neon")]
pub(crate) fn dot_f32(w: &[u8], a: &[u8]) -> f32 {
    assert_eq!(w.len(), a.len());
    dot_float(
        w.len() / 4,
        w,
        a,
        |b, i| f32x8_at(b, i),
        f32_at,
        |s| reduce_f32x8(s),
    )
}

#[target_feature(enable = "neon")]
pub(crate) fn dot_f16(w: &[u8], a: &[u8]) -> f32 {
    assert_eq!(w.len(), a.len());
    dot_float(
        w.len() / 2,
        w,
        a,
        |b, i| f16x8_at(b, i),
        f16_at,
        |s| reduce_f32x8(s),
    )
}

#[target_feature(enable = "neon")]
pub(crate) fn dot_bf16(w: &[u8], a: &[u8]) -> f32 {
    assert_eq!(w.len(), a.len());
    dot_float(
        w.len() / 2,
        w,
        a,
        |b, i| bf16x8_at(b, i),
        bf16_at,
        |s| reduce_bf16(s),
    )
}

/// `dotr4` and `dot4` of one float type as four single dots (bit-identical by construction).
macro_rules! float_rows {
    ($dot:ident, $dotr4:ident, $dot4:ident) => {
        #[target_feature(enable = "neon")]
        pub(crate) fn $dotr4(w: &[u8], row_bytes: usize, a: &[u8], out: &mut [f32; 4]) {
            for (r, o) in out.iter_mut().enumerate() {
                *o = $dot(&w[r * row_bytes..(r + 1) * row_bytes], a);
            }
        }

        #[target_feature(enable = "neon")]
        pub(crate) fn $dot4(w: &[u8], a: ActRows<'_>, out: &mut [f32; 4]) {
            let len = a.a.len() - 3 * a.stride;
            for (t, o) in out.iter_mut().enumerate() {
                *o = $dot(w, a.row(t, len));
            }
        }
    };
}

float_rows!(dot_f32, dotr4_f32, dot4_f32);
float_rows!(dot_f16, dotr4_f16, dot4_f16);
float_rows!(dot_bf16, dotr4_bf16, dot4_bf16);
