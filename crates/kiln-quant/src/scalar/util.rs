//! The canonical summation order, spelled out lane by lane.
//!
//! Kiln's dot products are defined by one fixed order of float operations, the one ggml's
//! AVX2 kernels use, so every implementation (this scalar one, AVX2, NEON, …) gives the same
//! bits:
//!
//! * a block's integer products are summed exactly into **8 `i32` lanes**, lane `l` holding
//!   the sum over bytes `4l .. 4l + 4` of each 32-byte group (AVX2 `maddubs` + `madd`, or
//!   NEON/VNNI `sdot`). Integer sums are exact, so any order gives the same lane values;
//!   only the `i16` saturation of `maddubs` is observable, and is reproduced here;
//! * each lane is converted to `f32` (round to nearest even) and fused-multiply-added into an
//!   8-lane `f32` accumulator with the block's scale (`fma(d, q, acc)`, one rounding);
//! * at the end of the row the 8 lanes are reduced as [`hsum8`] does: `(a_i + a_{i+4})`,
//!   then `(r0 + r2) + (r1 + r3)`.
//!
//! Types with additive offsets (Q4_1, Q5_1: `m`; the K-quants' mins) keep those in a second,
//! scalar or 4-lane accumulator, reduced as each kernel documents.

/// `f32` fused multiply-add: `a * b + c` with one rounding (the `vfmadd` instructions).
#[inline(always)]
pub(crate) fn fma(a: f32, b: f32, c: f32) -> f32 {
    a.mul_add(b, c)
}

/// Reduces 8 lanes in AVX2's `hsum_float_8` order.
#[inline(always)]
pub(crate) fn hsum8(a: &[f32; 8]) -> f32 {
    let r = [a[0] + a[4], a[1] + a[5], a[2] + a[6], a[3] + a[7]];
    (r[0] + r[2]) + (r[1] + r[3])
}

/// Reduces 4 lanes: `(a0 + a2) + (a1 + a3)`.
#[inline(always)]
pub(crate) fn hsum4(a: &[f32; 4]) -> f32 {
    (a[0] + a[2]) + (a[1] + a[3])
}

/// `acc[l] = fma(d, q[l] as f32, acc[l])` for the 8 lanes.
#[inline(always)]
pub(crate) fn fma8(acc: &mut [f32; 8], d: f32, q: &[i32; 8]) {
    for (a, &v) in acc.iter_mut().zip(q) {
        *a = fma(d, v as f32, *a);
    }
}

/// `maddubs` for one pair: unsigned × signed bytes, summed with `i16` saturation.
#[inline(always)]
fn maddubs_pair(a0: u8, b0: i8, a1: u8, b1: i8) -> i32 {
    (a0 as i32 * b0 as i32 + a1 as i32 * b1 as i32).clamp(i16::MIN as i32, i16::MAX as i32)
}

/// Unsigned × signed bytes (32 each) into 8 quad sums: `madd(maddubs(a, b), 1)`.
#[inline(always)]
pub(crate) fn quads_us(a: &[u8; 32], b: &[i8; 32]) -> [i32; 8] {
    std::array::from_fn(|l| {
        let i = 4 * l;
        maddubs_pair(a[i], b[i], a[i + 1], b[i + 1])
            + maddubs_pair(a[i + 2], b[i + 2], a[i + 3], b[i + 3])
    })
}

/// AVX2's sign trick for signed × signed bytes: `(|x|, y with x's sign)`, both with 8-bit
/// wrapping (`_mm256_sign_epi8(x, x)`, `_mm256_sign_epi8(y, x)`), ready for `maddubs`.
#[inline(always)]
pub(crate) fn sign_trick(x: &[i8; 32], y: &[i8; 32]) -> ([u8; 32], [i8; 32]) {
    let ax: [u8; 32] = std::array::from_fn(|i| x[i].unsigned_abs());
    let sy: [i8; 32] = std::array::from_fn(|i| match x[i] {
        0 => 0,
        v if v < 0 => y[i].wrapping_neg(),
        _ => y[i],
    });
    (ax, sy)
}

/// Signed × signed bytes through AVX2's sign trick ([`sign_trick`], then [`quads_us`]), so
/// `-128` behaves as it does there.
#[inline(always)]
pub(crate) fn quads_ss(x: &[i8; 32], y: &[i8; 32]) -> [i32; 8] {
    let (ax, sy) = sign_trick(x, y);
    quads_us(&ax, &sy)
}

/// Quad sums of small signed values × signed bytes, each pair times an `i16` scale as in
/// [`quads_us_scaled`], computed exactly. For weights with `|a| <= 4` (Q3_K), where AVX2's
/// `maddubs` pairs cannot saturate, so any exact evaluation gives its lanes.
#[inline(always)]
pub(crate) fn quads_small_scaled(a: &[i8; 32], b: &[i8; 32], lo: i32, hi: i32) -> [i32; 8] {
    std::array::from_fn(|l| {
        let i = 4 * l;
        let s = if l < 4 { lo } else { hi };
        let p = |k: usize| a[k] as i32 * b[k] as i32 + a[k + 1] as i32 * b[k + 1] as i32;
        s * p(i) + s * p(i + 2)
    })
}

/// Quad sums of 32 bytes each multiplied by one `i16` scale (`madd(s, maddubs(a, b))`): lane
/// `l` is `scale_lo * (pair 2l) + scale_lo * (pair 2l + 1)` for `l < 4` and `scale_hi` for
/// the upper four lanes.
#[inline(always)]
pub(crate) fn quads_us_scaled(a: &[u8; 32], b: &[i8; 32], lo: i32, hi: i32) -> [i32; 8] {
    std::array::from_fn(|l| {
        let i = 4 * l;
        let s = if l < 4 { lo } else { hi };
        s * maddubs_pair(a[i], b[i], a[i + 1], b[i + 1])
            + s * maddubs_pair(a[i + 2], b[i + 2], a[i + 3], b[i + 3])
    })
}

/// Lane-wise wrapping add of 8 lanes.
#[inline(always)]
pub(crate) fn add8(acc: &mut [i32; 8], v: &[i32; 8]) {
    for (a, &x) in acc.iter_mut().zip(v) {
        *a = a.wrapping_add(x);
    }
}

/// A 32-byte group of a slice as an array.
#[inline(always)]
pub(crate) fn arr32<T: Copy>(s: &[T], at: usize) -> &[T; 32] {
    match s[at..at + 32].try_into() {
        Ok(a) => a,
        Err(_) => unreachable!("a 32-element slice"),
    }
}

/// The 32 values of a nibble block: element `j` is the low nibble of `qs[j]`, element
/// `j + 16` the high one.
pub(crate) fn nibbles(qs: &[u8; 16]) -> [u8; 32] {
    std::array::from_fn(|i| {
        if i < 16 {
            qs[i] & 0x0F
        } else {
            qs[i - 16] >> 4
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hsum8_adds_the_halves_first() {
        // Values chosen so that a left-to-right sum rounds differently.
        let a = [1e8f32, 1.0, -1e8, 1.0, 1.0, 1.0, 1.0, 1.0];
        let left: f32 = a.iter().sum();
        assert_eq!(hsum8(&a), ((1e8f32 + 1.0) + (-1e8 + 1.0)) + (2.0 + 2.0));
        assert_ne!(hsum8(&a), left);
    }

    #[test]
    fn the_sign_trick_wraps_minus_128_like_avx2() {
        let mut x = [0i8; 32];
        let mut y = [0i8; 32];
        x[0] = -1;
        y[0] = -128; // -(-128) wraps to -128: the product reads as -128, not 128
        x[4] = -128;
        y[4] = 1;
        let q = quads_ss(&x, &y);
        assert_eq!(q[0], -128);
        assert_eq!(q[1], -128);
    }

    #[test]
    fn maddubs_saturates_pairs() {
        let a = [255u8; 32];
        let b = [127i8; 32];
        assert_eq!(quads_us(&a, &b)[0], 2 * i16::MAX as i32);
    }
}
