//! NEON kernels for the 32-element block types: Q4_0, Q5_0, Q8_0 (× Q8_0 activations) and
//! Q4_1 (× Q8_1).
//!
//! Every entry point is one instance of a tile kernel computing `R` weight rows × `T`
//! activation rows: `dot` is 1 × 1, the GEMV kernel `dotr4` 4 × 1 (shared activation loads),
//! the GEMM micro-kernel `dot4` 1 × 4 (each weight block unpacked once for four tokens). Each
//! (row, token) pair performs the scalar oracle's operations in its order (`scalar::legacy`):
//! 8 exact `i32` quad sums per block, converted to `f32` and fused-multiply-added with the
//! scale `f16(dx) * f16(dy)`, then `hsum8`. So every shape and both quad-sum paths (`sdot`
//! or widening multiplies, `DP`) give the scalar bits.

use std::arch::aarch64::*;

use super::util::*;
use crate::blocks::{BlockQ4_0, BlockQ4_1, BlockQ5_0, BlockQ8_0, BlockQ8_1, as_blocks};
use crate::table::ActRows;

// ------------------------------------------------- signed weights × Q8_0 (Q4_0, Q5_0, Q8_0)

#[inline]
#[target_feature(enable = "neon")]
fn unpack_q4_0(x: &BlockQ4_0) -> (I8x32, f32) {
    let q = nibbles32(&x.qs);
    let eight = vdupq_n_s8(8);
    (
        I8x32(vsubq_s8(q.0, eight), vsubq_s8(q.1, eight)),
        f16_to_f32(x.d),
    )
}

#[inline]
#[target_feature(enable = "neon")]
fn unpack_q5_0(x: &BlockQ5_0) -> (I8x32, f32) {
    let q = nibbles32(&x.qs);
    let h = bit4_of_32(&x.qh);
    let sixteen = vdupq_n_s8(16);
    (
        I8x32(
            vsubq_s8(vorrq_s8(q.0, h.0), sixteen),
            vsubq_s8(vorrq_s8(q.1, h.1), sixteen),
        ),
        f16_to_f32(x.d),
    )
}

#[inline]
#[target_feature(enable = "neon")]
fn unpack_q8_0(x: &BlockQ8_0) -> (I8x32, f32) {
    (load_i8x32(&x.qs), f16_to_f32(x.d))
}

/// Quad sums of signed weights × Q8_0 activations as the oracle's `quads_ss` (AVX2's sign
/// trick) defines them. The trick equals the plain product except for an activation of
/// `-128` against a negative weight, where `|x| * wrapping_neg(-128)` reads `-128 * |x|`:
/// `has_min` (any `-128` among the activations) adds that correction, `-2 * x * -128` on
/// those bytes. Quantized activations almost never hold `-128`, so the check is one `sminv`
/// per block and token.
#[inline]
#[target_feature(enable = "neon")]
fn quads_ss<const DP: bool>(x: I8x32, y: I8x32, has_min: bool) -> I32x8 {
    let q = quads8::<DP>(x, y);
    if !has_min {
        return q;
    }
    let min = vdupq_n_s8(-128);
    let fix = |x: int8x16_t, y: int8x16_t, q: int32x4_t| {
        let m = vandq_u8(vceqq_s8(y, min), vcltzq_s8(x));
        let xm = vandq_s8(x, vreinterpretq_s8_u8(m));
        let c = quads::<DP>(vdupq_n_s32(0), xm, min);
        vsubq_s32(q, vshlq_n_s32::<1>(c))
    };
    I32x8(fix(x.0, y.0, q.0), fix(x.1, y.1, q.1))
}

/// Whether any of 32 signed bytes is `-128`.
#[inline]
#[target_feature(enable = "neon")]
fn has_min(y: I8x32) -> bool {
    vminvq_s8(vminq_s8(y.0, y.1)) == i8::MIN
}

/// The R × T tile for signed weights and Q8_0 activations. With `PRE`, the activation
/// scales come widened in `sc` (one per block); otherwise they are converted here (once per
/// block and token, shared by the `R` rows).
#[inline]
#[target_feature(enable = "neon")]
fn tile_q8_0<const R: usize, const T: usize, const PRE: bool, const DP: bool, W>(
    w: [&[W]; R],
    ys: [&[BlockQ8_0]; T],
    sc: [&[f32]; T],
    unpack: impl Fn(&W) -> (I8x32, f32),
) -> [[f32; T]; R] {
    let nb = w[0].len();
    assert!(w.iter().all(|row| row.len() == nb));
    for t in 0..T {
        assert_eq!(ys[t].len(), nb);
        assert!(!PRE || sc[t].len() == nb);
    }
    let mut acc = [[zero8(); T]; R];
    for i in 0..nb {
        let mut dy = [0.0f32; T];
        let mut qy = [I8x32(vdupq_n_s8(0), vdupq_n_s8(0)); T];
        let mut min = [false; T];
        for t in 0..T {
            let y = &ys[t][i];
            dy[t] = if PRE { sc[t][i] } else { f16_to_f32(y.d) };
            qy[t] = load_i8x32(&y.qs);
            min[t] = has_min(qy[t]);
        }
        for r in 0..R {
            let (qx, dx) = unpack(&w[r][i]);
            for t in 0..T {
                let q = quads_ss::<DP>(qx, qy[t], min[t]);
                acc[r][t] = fma8(acc[r][t], dx * dy[t], q);
            }
        }
    }
    let mut out = [[0.0; T]; R];
    for r in 0..R {
        for t in 0..T {
            out[r][t] = hsum8(acc[r][t]);
        }
    }
    out
}

tile_entry_points!(dot_q4_0, dotr4_q4_0, dot4_q4_0,
    tile_q8_0[, _](BlockQ4_0, BlockQ8_0, scales per block 1, |x| unpack_q4_0(x)));
tile_entry_points!(dot_q5_0, dotr4_q5_0, dot4_q5_0,
    tile_q8_0[, _](BlockQ5_0, BlockQ8_0, scales per block 1, |x| unpack_q5_0(x)));
tile_entry_points!(dot_q8_0, dotr4_q8_0, dot4_q8_0,
    tile_q8_0[, _](BlockQ8_0, BlockQ8_0, scales per block 1, |x| unpack_q8_0(x)));

// ---------------------------------------------------------------- Q4_1 × Q8_1

/// The R × T tile for Q4_1 × Q8_1: per block and pair, `fma(f16(dx) * f16(dy), quads,
/// acc)` on the unsigned nibbles (no saturation possible: 15 · 128 · 2 < 2^15), and the
/// offsets in the scalar chain `summs = fma(m, s, summs)`; the result is `hsum8 + summs`.
#[inline]
#[target_feature(enable = "neon")]
fn tile_q4_1<const R: usize, const T: usize, const PRE: bool, const DP: bool>(
    w: [&[BlockQ4_1]; R],
    ys: [&[BlockQ8_1]; T],
    sc: [&[f32]; T],
) -> [[f32; T]; R] {
    let nb = w[0].len();
    assert!(w.iter().all(|row| row.len() == nb));
    for t in 0..T {
        assert_eq!(ys[t].len(), nb);
        assert!(!PRE || sc[t].len() == 2 * nb);
    }
    let mut acc = [[zero8(); T]; R];
    let mut summs = [[0.0f32; T]; R];
    for i in 0..nb {
        let mut dy = [0.0f32; T];
        let mut sy = [0.0f32; T];
        let mut qy = [I8x32(vdupq_n_s8(0), vdupq_n_s8(0)); T];
        for t in 0..T {
            let y = &ys[t][i];
            if PRE {
                dy[t] = sc[t][2 * i];
                sy[t] = sc[t][2 * i + 1];
            } else {
                dy[t] = f16_to_f32(y.d);
                sy[t] = f16_to_f32(y.s);
            }
            qy[t] = load_i8x32(&y.qs);
        }
        for r in 0..R {
            let x = &w[r][i];
            let dx = f16_to_f32(x.d);
            let mx = f16_to_f32(x.m);
            let qx = nibbles32(&x.qs);
            for t in 0..T {
                summs[r][t] = mx.mul_add(sy[t], summs[r][t]);
                acc[r][t] = fma8(acc[r][t], dx * dy[t], quads8::<DP>(qx, qy[t]));
            }
        }
    }
    let mut out = [[0.0; T]; R];
    for r in 0..R {
        for t in 0..T {
            out[r][t] = hsum8(acc[r][t]) + summs[r][t];
        }
    }
    out
}

tile_entry_points!(dot_q4_1, dotr4_q4_1, dot4_q4_1,
    tile_q4_1[](BlockQ4_1, BlockQ8_1, scales per block 2));
