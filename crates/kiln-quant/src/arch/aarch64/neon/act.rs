//! NEON activation quantizers for Q8_0 and Q8_1, giving the bytes of the scalar oracle
//! (`scalar::act`), which reproduces ggml's x86 build: the block maximum of `|x|` reduced in
//! AVX2's lane order with `maxps` semantics (a NaN operand yields the second one), the
//! multiplier `127 / amax`, rounding to nearest with ties to even, `cvtps2dq`'s
//! `i32::MIN` for NaN and out-of-range values (NEON's conversion saturates instead, so that
//! case is selected explicitly), then saturation to `i8`.

use std::arch::aarch64::*;

use super::util::load_f32x4;
use crate::blocks::{BlockQ8_0, BlockQ8_1, BlockQ8K, F16Le, F32Le, QK, QK_K, as_blocks_mut};
use crate::scalar::act::x86_max;

/// x86 `maxps` lane by lane: `a` where `a > b`, else `b`.
#[inline]
#[target_feature(enable = "neon")]
fn max_x86(a: float32x4_t, b: float32x4_t) -> float32x4_t {
    vbslq_f32(vcgtq_f32(a, b), a, b)
}

/// One block: `d = amax / 127` (unrounded) and the 32 values before saturation, as
/// `cvtps2dq` would produce them.
#[inline]
#[target_feature(enable = "neon")]
fn q8_block(x: &[f32]) -> (f32, [int32x4_t; 8]) {
    let v: [float32x4_t; 8] = std::array::from_fn(|k| load_f32x4(&x[4 * k..]));
    // AVX2 lanes 0..4 of its 8-wide vectors are v[2i], lanes 4..8 are v[2i + 1].
    let mut lo = vabsq_f32(v[0]);
    let mut hi = vabsq_f32(v[1]);
    for k in 1..4 {
        lo = max_x86(lo, vabsq_f32(v[2 * k]));
        hi = max_x86(hi, vabsq_f32(v[2 * k + 1]));
    }
    let m4 = max_x86(hi, lo);
    let m2 = [
        x86_max(vgetq_lane_f32::<0>(m4), vgetq_lane_f32::<2>(m4)),
        x86_max(vgetq_lane_f32::<1>(m4), vgetq_lane_f32::<3>(m4)),
    ];
    let amax = x86_max(m2[0], m2[1]);
    let d = amax / 127.0;
    let id = if amax != 0.0 { 127.0 / amax } else { 0.0 };
    let limit = vdupq_n_f32(2_147_483_648.0);
    let q = v.map(|vi| {
        let r = vrndnq_f32(vmulq_n_f32(vi, id));
        // In range (and not NaN): the exact integer; otherwise x86's "integer indefinite".
        vbslq_s32(vcltq_f32(r, limit), vcvtq_s32_f32(r), vdupq_n_s32(i32::MIN))
    });
    (d, q)
}

/// Saturating narrowing of the 32 values to bytes, stored in element order.
#[inline]
#[target_feature(enable = "neon")]
fn pack_store(q: [int32x4_t; 8], out: &mut [i8; QK]) {
    for (k, o) in out.chunks_exact_mut(16).enumerate() {
        let a = vqmovn_high_s32(vqmovn_s32(q[4 * k]), q[4 * k + 1]);
        let b = vqmovn_high_s32(vqmovn_s32(q[4 * k + 2]), q[4 * k + 3]);
        let p = vqmovn_high_s16(vqmovn_s16(a), b);
        assert_eq!(o.len(), 16);
        // SAFETY: `o` is 16 writable bytes (asserted); `st1` has no alignment requirement.
        unsafe { vst1q_s8(o.as_mut_ptr(), p) }
    }
}

#[target_feature(enable = "neon")]
pub(crate) fn quantize_q8_0(src: &[f32], dst: &mut [u8]) {
    let dst: &mut [BlockQ8_0] = as_blocks_mut(dst);
    assert_eq!(src.len(), dst.len() * QK);
    for (x, y) in src.chunks_exact(QK).zip(dst) {
        let (d, q) = q8_block(x);
        y.d = F16Le::from_f32(d);
        pack_store(q, &mut y.qs);
    }
}

#[target_feature(enable = "neon")]
pub(crate) fn quantize_q8_1(src: &[f32], dst: &mut [u8]) {
    let dst: &mut [BlockQ8_1] = as_blocks_mut(dst);
    assert_eq!(src.len(), dst.len() * QK);
    for (x, y) in src.chunks_exact(QK).zip(dst) {
        let (d, q) = q8_block(x);
        y.d = F16Le::from_f32(d);
        // The sum of the 32-bit values before saturation, wrapping (as the oracle).
        let mut s = q[0];
        for v in &q[1..] {
            s = vaddq_s32(s, *v);
        }
        y.s = F16Le::from_f32(d * vaddvq_s32(s) as f32);
        pack_store(q, &mut y.qs);
    }
}

/// Q8_K as `scalar::act::quantize_q8_k` (ggml's `quantize_row_q8_K_ref`): the scale from
/// the signed value of largest magnitude (the first on ties; NaNs never win), `iscale =
/// -127 / max`, `q = min(127, nearest_int(iscale * x))` with ggml's `1.5 · 2^23` trick
/// reproduced bit for bit (so even out-of-range values truncate alike), `d = 1 / iscale`
/// and the 16-value `bsums`.
#[target_feature(enable = "neon")]
pub(crate) fn quantize_q8_k(src: &[f32], dst: &mut [u8]) {
    let dst: &mut [BlockQ8K] = as_blocks_mut(dst);
    assert_eq!(src.len(), dst.len() * QK_K);
    for (x, y) in src.chunks_exact(QK_K).zip(dst) {
        // `maxnm` ignores NaN as the oracle's `>` does; an all-NaN block gives NaN here and
        // 0 there, and is treated as the zero block below either way.
        let mut m = vabsq_f32(load_f32x4(x));
        for k in 1..QK_K / 4 {
            m = vmaxnmq_f32(m, vabsq_f32(load_f32x4(&x[4 * k..])));
        }
        let amax = vmaxnmvq_f32(m);
        let first = (amax > 0.0)
            .then(|| x.iter().position(|v| v.abs() == amax))
            .flatten();
        let Some(at) = first else {
            y.d = F32Le::new(0.0);
            y.qs = [0; QK_K];
            y.bsums = [[0; 2]; QK_K / 16];
            continue;
        };
        let iscale = -127.0 / x[at];
        let magic = vdupq_n_f32(12_582_912.0);
        let mant = vdupq_n_s32(0x007f_ffff);
        let bias = vdupq_n_s32(0x0040_0000);
        let top = vdupq_n_s32(127);
        for (k, (out, bs)) in
            y.qs.chunks_exact_mut(16)
                .zip(y.bsums.iter_mut())
                .enumerate()
        {
            let q: [int32x4_t; 4] = std::array::from_fn(|j| {
                let v = vaddq_f32(vmulq_n_f32(load_f32x4(&x[16 * k + 4 * j..]), iscale), magic);
                let n = vsubq_s32(vandq_s32(vreinterpretq_s32_f32(v), mant), bias);
                vminq_s32(n, top)
            });
            // `as i8`: truncating narrows.
            let a = vmovn_high_s32(vmovn_s32(q[0]), q[1]);
            let b = vmovn_high_s32(vmovn_s32(q[2]), q[3]);
            let p = vmovn_high_s16(vmovn_s16(a), b);
            assert_eq!(out.len(), 16);
            // SAFETY: `out` is 16 writable bytes (asserted); `st1` has no alignment needs.
            unsafe { vst1q_s8(out.as_mut_ptr(), p) }
            *bs = vaddlvq_s8(p).to_le_bytes();
        }
        y.d = F32Le::new(1.0 / iscale);
    }
}
