//! Activation conversion, reproducing ggml's x86 (AVX2) build bit for bit.
//!
//! * `Q8_0`/`Q8_1` follow `quantize_row_q8_0`/`q8_1` in `ggml-cpu/arch/x86/quants.c`, not the
//!   `_ref` versions: the block maximum of `|x|` is reduced in the same lane order with
//!   `maxps` semantics, the multiplier is `127 / amax` (not `1 / (amax / 127)`), rounding is
//!   to nearest with ties to even (`_mm256_round_ps(_MM_ROUND_NEAREST)`, not `roundf`), and
//!   the conversion to bytes saturates like `cvtps2dq` + `packs`. `Q8_1`'s `s` is
//!   `f16(d * sum(q))` with the unrounded `d = amax / 127`.
//! * `Q8_K` follows `quantize_row_q8_K_ref` (which the x86 build uses): the scale comes from
//!   the *signed* value of largest magnitude (first one on ties), `iscale = -127 / max`,
//!   `q = min(127, nearest_int(iscale * x))` (ties to even), `d = 1 / iscale`, and `bsums`.
//! * `F16` rounds to nearest even (F16C); `BF16` as `ggml_compute_fp32_to_bf16`.

use crate::blocks::{
    BlockQ8_0, BlockQ8_1, BlockQ8K, F16Le, F32Le, QK, QK_K, as_blocks_mut, f32_to_bf16,
};

/// x86 `maxps`/`maxss` for one lane: the first operand if it is greater, else the second
/// (so a NaN in either position yields the second operand).
#[inline(always)]
pub(crate) fn x86_max(a: f32, b: f32) -> f32 {
    if a > b { a } else { b }
}

/// The block maximum of `|x|` over 32 values, reduced exactly as the AVX2 code does:
/// four 8-lane vectors folded left to right, then 8 → 4 (high half first), 4 → 2, 2 → 1.
#[inline(always)]
pub(crate) fn amax32_x86(x: &[f32]) -> f32 {
    let mut m = [0.0f32; 8];
    for (i, mi) in m.iter_mut().enumerate() {
        let mut acc = x[i].abs();
        for v in 1..4 {
            acc = x86_max(acc, x[8 * v + i].abs());
        }
        *mi = acc;
    }
    let m4 = [
        x86_max(m[4], m[0]),
        x86_max(m[5], m[1]),
        x86_max(m[6], m[2]),
        x86_max(m[7], m[3]),
    ];
    let m2 = [x86_max(m4[0], m4[2]), x86_max(m4[1], m4[3])];
    x86_max(m2[0], m2[1])
}

/// `cvtps2dq` on a value that is already integral: out-of-range and NaN give `i32::MIN`.
#[inline(always)]
pub(crate) fn cvt_i32_x86(v: f32) -> i32 {
    if (-2_147_483_648.0..2_147_483_648.0).contains(&v) {
        v as i32
    } else {
        i32::MIN
    }
}

/// `packssdw` then `packsswb`: saturation to `i8`.
#[inline(always)]
pub(crate) fn sat_i8(v: i32) -> i8 {
    v.clamp(-128, 127) as i8
}

/// The shared part of Q8_0 and Q8_1: returns `d` (unrounded) and the 32 `i32` values
/// before saturation.
#[inline(always)]
fn q8_block(x: &[f32]) -> (f32, [i32; QK]) {
    let amax = amax32_x86(x);
    let d = amax / 127.0;
    let id = if amax != 0.0 { 127.0 / amax } else { 0.0 };
    let mut q = [0i32; QK];
    for (qi, &v) in q.iter_mut().zip(x) {
        *qi = cvt_i32_x86((v * id).round_ties_even());
    }
    (d, q)
}

pub(crate) fn quantize_q8_0(src: &[f32], dst: &mut [u8]) {
    let dst: &mut [BlockQ8_0] = as_blocks_mut(dst);
    assert_eq!(src.len(), dst.len() * QK);
    for (x, y) in src.chunks_exact(QK).zip(dst) {
        let (d, q) = q8_block(x);
        y.d = F16Le::from_f32(d);
        for (o, &v) in y.qs.iter_mut().zip(&q) {
            *o = sat_i8(v);
        }
    }
}

pub(crate) fn quantize_q8_1(src: &[f32], dst: &mut [u8]) {
    let dst: &mut [BlockQ8_1] = as_blocks_mut(dst);
    assert_eq!(src.len(), dst.len() * QK);
    for (x, y) in src.chunks_exact(QK).zip(dst) {
        let (d, q) = q8_block(x);
        y.d = F16Le::from_f32(d);
        // The AVX2 code sums the 32-bit values before packing (wrapping, as `paddd`).
        let sum = q.iter().fold(0i32, |s, &v| s.wrapping_add(v));
        y.s = F16Le::from_f32(d * sum as f32);
        for (o, &v) in y.qs.iter_mut().zip(&q) {
            *o = sat_i8(v);
        }
    }
}

/// ggml's `nearest_int`: adds 1.5 * 2^23 and reads the mantissa, i.e. round to nearest
/// with ties to even for |x| < 2^22 (our inputs are within ±128).
#[inline(always)]
pub(crate) fn nearest_int(x: f32) -> i32 {
    let v = x + 12_582_912.0;
    (v.to_bits() & 0x007f_ffff) as i32 - 0x0040_0000
}

pub(crate) fn quantize_q8_k(src: &[f32], dst: &mut [u8]) {
    let dst: &mut [BlockQ8K] = as_blocks_mut(dst);
    assert_eq!(src.len(), dst.len() * QK_K);
    for (x, y) in src.chunks_exact(QK_K).zip(dst) {
        let mut max = 0.0f32;
        let mut amax = 0.0f32;
        for &v in x {
            if v.abs() > amax {
                amax = v.abs();
                max = v;
            }
        }
        if amax == 0.0 {
            y.d = F32Le::new(0.0);
            y.qs = [0; QK_K];
            y.bsums = [[0; 2]; QK_K / 16];
            continue;
        }
        let iscale = -127.0 / max;
        for (q, &v) in y.qs.iter_mut().zip(x) {
            *q = nearest_int(iscale * v).min(127) as i8;
        }
        for j in 0..QK_K / 16 {
            let s: i32 = y.qs[16 * j..16 * j + 16].iter().map(|&q| q as i32).sum();
            y.bsums[j] = (s as i16).to_le_bytes();
        }
        y.d = F32Le::new(1.0 / iscale);
    }
}

pub(crate) fn convert_f32(src: &[f32], dst: &mut [u8]) {
    assert_eq!(src.len() * 4, dst.len());
    for (x, o) in src.iter().zip(dst.chunks_exact_mut(4)) {
        o.copy_from_slice(&x.to_le_bytes());
    }
}

pub(crate) fn convert_f16(src: &[f32], dst: &mut [u8]) {
    assert_eq!(src.len() * 2, dst.len());
    for (x, o) in src.iter().zip(dst.chunks_exact_mut(2)) {
        o.copy_from_slice(&F16Le::from_f32(*x).0);
    }
}

pub(crate) fn convert_bf16(src: &[f32], dst: &mut [u8]) {
    assert_eq!(src.len() * 2, dst.len());
    for (x, o) in src.iter().zip(dst.chunks_exact_mut(2)) {
        o.copy_from_slice(&f32_to_bf16(*x).to_le_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_int_rounds_ties_to_even() {
        for (x, want) in [
            (0.5f32, 0),
            (1.5, 2),
            (2.5, 2),
            (-0.5, 0),
            (-1.5, -2),
            (126.7, 127),
        ] {
            assert_eq!(nearest_int(x), want, "{x}");
            assert_eq!(x.round_ties_even() as i32, want);
        }
    }

    #[test]
    fn x86_max_returns_the_second_operand_on_nan() {
        assert!(x86_max(f32::NAN, 1.0) == 1.0);
        assert!(x86_max(1.0, f32::NAN).is_nan());
    }

    #[test]
    fn q8_0_uses_the_127_over_amax_multiplier_and_ties_to_even() {
        // amax = 127 → id = 1; 2.5 rounds to 2 (roundf would give 3), -3.5 to -4.
        let mut x = [0.0f32; 32];
        x[0] = 127.0;
        x[1] = 2.5;
        x[2] = -3.5;
        x[3] = 0.5;
        let mut out = [0u8; 34];
        quantize_q8_0(&x, &mut out);
        let b: &[BlockQ8_0] = crate::blocks::as_blocks(&out);
        assert_eq!(&b[0].qs[..4], &[127, 2, -4, 0]);
        assert_eq!(b[0].d.to_f32(), 1.0);
    }

    #[test]
    fn q8_k_scale_takes_the_sign_of_the_largest_magnitude() {
        let mut x = [0.0f32; 256];
        x[3] = -2.0;
        x[9] = 2.0; // same magnitude later: the first one wins
        x[10] = 1.0;
        let mut out = vec![0u8; 292];
        quantize_q8_k(&x, &mut out);
        let b: &[BlockQ8K] = crate::blocks::as_blocks(&out);
        // iscale = -127 / -2 = 63.5
        assert_eq!(b[0].qs[3], -127);
        assert_eq!(b[0].qs[9], 127);
        assert_eq!(b[0].qs[10], 64); // 63.5 → ties to even
        assert_eq!(b[0].d.get(), 1.0 / 63.5);
        assert_eq!(b[0].bsum(0), 64);
    }
}
