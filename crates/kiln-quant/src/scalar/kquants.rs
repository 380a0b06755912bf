//! Dot products with `Q8_K` activations of the K-quants other than Q4_K/Q6_K (those are in
//! [`super::legacy`]): Q2_K, Q3_K, Q5_K and IQ4_XS, each in the order of ggml's AVX2
//! `ggml_vec_dot_<type>_q8_K` (see [`super::util`]).

use super::util::{
    add8, arr32, fma, fma8, hsum8, quads_small_scaled, quads_us_scaled, sign_trick,
};
use crate::blocks::{
    BlockIQ4XS, BlockQ2K, BlockQ3K, BlockQ5K, BlockQ8K, IQ4NL_VALUES, QK_K, as_blocks, iq4xs_scale,
    q3k_scales, q4k_scales_mins,
};

/// The two-bit values of 32-element group `k` (0..4) of half `h` (0..2) of a Q2_K/Q3_K
/// `qs`: bits `2k, 2k + 1` of `qs[32 h + l]`.
fn two_bits(qs: &[u8; QK_K / 4], h: usize, k: usize) -> [u8; 32] {
    arr32(qs, 32 * h).map(|b| (b >> (2 * k)) & 3)
}

/// Q2_K × Q8_K, per super-block: first the mins, 8 lanes of `m_2l * bsum_2l + m_2l+1 *
/// bsum_2l+1`, `fma(-dy * dmin, lanes, acc)`; then the 8 lanes of `sum sc * q2 * q8` (group
/// `g` of 32: lanes 0..4 scale `2g`, lanes 4..8 scale `2g + 1`), `fma(dy * d, lanes, acc)`.
/// Result `hsum8(acc)`.
pub(crate) fn dot_q2_k(w: &[u8], a: &[u8]) -> f32 {
    let (w, a): (&[BlockQ2K], &[BlockQ8K]) = (as_blocks(w), as_blocks(a));
    assert_eq!(w.len(), a.len());
    let mut acc = [0.0f32; 8];
    for (x, y) in w.iter().zip(a) {
        let yd = y.d.get();
        let d = yd * x.d.to_f32();
        let dmin = -yd * x.dmin.to_f32();
        let m = |j: usize| (x.scales[j] >> 4) as i32;
        let prod: [i32; 8] = std::array::from_fn(|l| {
            m(2 * l) * y.bsum(2 * l) as i32 + m(2 * l + 1) * y.bsum(2 * l + 1) as i32
        });
        fma8(&mut acc, dmin, &prod);
        let sc = |j: usize| (x.scales[j] & 0x0F) as i32;
        let mut sumi = [0i32; 8];
        for h in 0..2 {
            for k in 0..4 {
                let g = 4 * h + k;
                let q = two_bits(&x.qs, h, k);
                let p = quads_us_scaled(&q, arr32(&y.qs, 32 * g), sc(2 * g), sc(2 * g + 1));
                add8(&mut sumi, &p);
            }
        }
        fma8(&mut acc, d, &sumi);
    }
    hsum8(&acc)
}

/// Q3_K × Q8_K, per super-block: the 8 lanes of `sum sc * (q - 4 * !h) * q8` (group `g` of
/// 32: lanes 0..4 scale `2g`, lanes 4..8 scale `2g + 1`; `sc` unbiased), `fma(dy * d,
/// lanes, acc)`. Result `hsum8(acc)`.
pub(crate) fn dot_q3_k(w: &[u8], a: &[u8]) -> f32 {
    let (w, a): (&[BlockQ3K], &[BlockQ8K]) = (as_blocks(w), as_blocks(a));
    assert_eq!(w.len(), a.len());
    let mut acc = [0.0f32; 8];
    for (x, y) in w.iter().zip(a) {
        let d = y.d.get() * x.d.to_f32();
        let sc = q3k_scales(&x.scales);
        let mut sumi = [0i32; 8];
        for h in 0..2 {
            for k in 0..4 {
                let g = 4 * h + k;
                let lo = two_bits(&x.qs, h, k);
                let q: [i8; 32] = std::array::from_fn(|l| {
                    let high = (x.hmask[l] >> g) & 1 != 0;
                    lo[l] as i8 - if high { 0 } else { 4 }
                });
                let (s0, s1) = (sc[2 * g] as i32, sc[2 * g + 1] as i32);
                add8(
                    &mut sumi,
                    &quads_small_scaled(&q, arr32(&y.qs, 32 * g), s0, s1),
                );
            }
        }
        fma8(&mut acc, d, &sumi);
    }
    hsum8(&acc)
}

/// Q5_K × Q8_K, per super-block: the 8 lanes of `sum sc_g * q5 * q8` over the 8 sub-blocks
/// of 32, `fma(dy * d, lanes, acc)`; the mins as one exact integer `sum_j m_j * (bsum_2j +
/// bsum_2j+1)` (the pair sums wrapped to `i16`, as `hadd_epi16` does), `summs = fma(-dy *
/// dmin, mins, summs)`. Result `hsum8(acc) + summs`.
pub(crate) fn dot_q5_k(w: &[u8], a: &[u8]) -> f32 {
    let (w, a): (&[BlockQ5K], &[BlockQ8K]) = (as_blocks(w), as_blocks(a));
    assert_eq!(w.len(), a.len());
    let mut acc = [0.0f32; 8];
    let mut summs = 0.0f32;
    for (x, y) in w.iter().zip(a) {
        let (sc, m) = q4k_scales_mins(&x.scales);
        let yd = y.d.get();
        let d = yd * x.d.to_f32();
        let dmin = -yd * x.dmin.to_f32();
        let mins = (0..8).fold(0i32, |s, j| {
            let q8s = (y.bsum(2 * j) as i32 + y.bsum(2 * j + 1) as i32) as i16 as i32;
            s.wrapping_add(m[j] as i32 * q8s)
        });
        summs = fma(dmin, mins as f32, summs);
        let mut sumi = [0i32; 8];
        for (g, &s) in sc.iter().enumerate() {
            let bits = arr32(&x.qs, 32 * (g / 2));
            let q: [u8; 32] = std::array::from_fn(|l| {
                let lo = if g % 2 == 0 {
                    bits[l] & 0x0F
                } else {
                    bits[l] >> 4
                };
                lo | (((x.qh[l] >> g) & 1) << 4)
            });
            let s = s as i32;
            add8(&mut sumi, &quads_us_scaled(&q, arr32(&y.qs, 32 * g), s, s));
        }
        fma8(&mut acc, d, &sumi);
    }
    hsum8(&acc) + summs
}

/// IQ4_XS × Q8_K, per super-block: the 8 lanes of `sum ls_j * v * q8` over the 8 sub-blocks
/// of 32 (`v` the signed levels, multiplied through AVX2's sign trick), `fma(f16(d) * dy,
/// lanes, acc)`. Result `hsum8(acc)`.
pub(crate) fn dot_iq4_xs(w: &[u8], a: &[u8]) -> f32 {
    let (w, a): (&[BlockIQ4XS], &[BlockQ8K]) = (as_blocks(w), as_blocks(a));
    assert_eq!(w.len(), a.len());
    let mut acc = [0.0f32; 8];
    for (x, y) in w.iter().zip(a) {
        let mut sumi = [0i32; 8];
        for j in 0..8 {
            let qs = &x.qs[16 * j..16 * j + 16];
            let v: [i8; 32] = std::array::from_fn(|l| {
                let q = if l < 16 {
                    qs[l] & 0x0F
                } else {
                    qs[l - 16] >> 4
                };
                IQ4NL_VALUES[q as usize]
            });
            let (av, sy) = sign_trick(&v, arr32(&y.qs, 32 * j));
            let ls = iq4xs_scale(x, j) as i32;
            add8(&mut sumi, &quads_us_scaled(&av, &sy, ls, ls));
        }
        fma8(&mut acc, x.d.to_f32() * y.d.get(), &sumi);
    }
    hsum8(&acc)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn two_bit_groups_walk_the_shifts_then_the_halves() {
        let mut qs = [0u8; 64];
        qs[33] = 0b1110_0100; // half 1, element 1: groups 0..4 hold 0, 1, 2, 3
        for k in 0..4 {
            assert_eq!(two_bits(&qs, 1, k)[1], k as u8);
            assert_eq!(two_bits(&qs, 0, k)[1], 0);
        }
    }
}
