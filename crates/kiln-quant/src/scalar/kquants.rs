//! The K-quants Q2_K, Q3_K, Q4_K, Q5_K and Q6_K (256-element super-blocks): dequantization as
//! ggml's reference `dequantize_row_*` (never fused; bit for bit ggml's and the `gguf` Python
//! package's), and the dot products with `Q8_K` activations, each in the order of ggml's AVX2
//! `ggml_vec_dot_<type>_q8_K` (see [`super::util`]).

use super::util::{add8, arr32, fma, fma8, hsum4, hsum8, quads_small_scaled, quads_us_scaled};
use crate::blocks::{
    BlockQ2K, BlockQ3K, BlockQ4K, BlockQ5K, BlockQ6K, BlockQ8K, QK_K, as_blocks, q3k_scales,
    q4k_scale_min, q4k_scales_mins,
};

pub(crate) fn dequant_q2_k(src: &[u8], dst: &mut [f32]) {
    let blocks: &[BlockQ2K] = as_blocks(src);
    assert_eq!(blocks.len() * QK_K, dst.len());
    for (b, y) in blocks.iter().zip(dst.chunks_exact_mut(QK_K)) {
        let d = b.d.to_f32();
        let min = b.dmin.to_f32();
        // Sub-block `j` of 16: elements 16 j .. 16 j + 16, scale byte `j`.
        for (j, y) in y.chunks_exact_mut(16).enumerate() {
            let (h, k, l0) = (j / 8, (j % 8) / 2, 16 * (j % 2));
            let sc = b.scales[j];
            let dl = d * (sc & 0x0F) as f32;
            let ml = min * (sc >> 4) as f32;
            for (l, o) in y.iter_mut().enumerate() {
                let q = (b.qs[32 * h + l0 + l] >> (2 * k)) & 3;
                *o = dl * q as f32 - ml;
            }
        }
    }
}

pub(crate) fn dequant_q3_k(src: &[u8], dst: &mut [f32]) {
    let blocks: &[BlockQ3K] = as_blocks(src);
    assert_eq!(blocks.len() * QK_K, dst.len());
    for (b, y) in blocks.iter().zip(dst.chunks_exact_mut(QK_K)) {
        let d = b.d.to_f32();
        let sc = q3k_scales(&b.scales);
        for (j, y) in y.chunks_exact_mut(16).enumerate() {
            let (h, k, l0) = (j / 8, (j % 8) / 2, 16 * (j % 2));
            let g = 4 * h + k; // the 32-element group: its bit in `hmask`
            let dl = d * sc[j] as f32;
            for (l, o) in y.iter_mut().enumerate() {
                let lo = ((b.qs[32 * h + l0 + l] >> (2 * k)) & 3) as i32;
                let high = (b.hmask[l0 + l] >> g) & 1 != 0;
                *o = dl * (lo - if high { 0 } else { 4 }) as f32;
            }
        }
    }
}

pub(crate) fn dequant_q4_k(src: &[u8], dst: &mut [f32]) {
    let blocks: &[BlockQ4K] = as_blocks(src);
    assert_eq!(blocks.len() * QK_K, dst.len());
    for (b, y) in blocks.iter().zip(dst.chunks_exact_mut(QK_K)) {
        let d = b.d.to_f32();
        let min = b.dmin.to_f32();
        for (j, (q, y)) in
            b.qs.chunks_exact(32)
                .zip(y.chunks_exact_mut(64))
                .enumerate()
        {
            let (sc1, m1) = q4k_scale_min(2 * j, &b.scales);
            let (sc2, m2) = q4k_scale_min(2 * j + 1, &b.scales);
            let (d1, m1) = (d * sc1 as f32, min * m1 as f32);
            let (d2, m2) = (d * sc2 as f32, min * m2 as f32);
            for l in 0..32 {
                y[l] = d1 * (q[l] & 0x0F) as f32 - m1;
                y[l + 32] = d2 * (q[l] >> 4) as f32 - m2;
            }
        }
    }
}

pub(crate) fn dequant_q5_k(src: &[u8], dst: &mut [f32]) {
    let blocks: &[BlockQ5K] = as_blocks(src);
    assert_eq!(blocks.len() * QK_K, dst.len());
    for (b, y) in blocks.iter().zip(dst.chunks_exact_mut(QK_K)) {
        let d = b.d.to_f32();
        let min = b.dmin.to_f32();
        for (g, y) in y.chunks_exact_mut(32).enumerate() {
            let (sc, m) = q4k_scale_min(g, &b.scales);
            let (dl, ml) = (d * sc as f32, min * m as f32);
            let q = &b.qs[32 * (g / 2)..32 * (g / 2) + 32];
            for (l, o) in y.iter_mut().enumerate() {
                let lo = if g % 2 == 0 { q[l] & 0x0F } else { q[l] >> 4 };
                let v = lo | (((b.qh[l] >> g) & 1) << 4);
                *o = dl * v as f32 - ml;
            }
        }
    }
}

pub(crate) fn dequant_q6_k(src: &[u8], dst: &mut [f32]) {
    let blocks: &[BlockQ6K] = as_blocks(src);
    assert_eq!(blocks.len() * QK_K, dst.len());
    for (b, y) in blocks.iter().zip(dst.chunks_exact_mut(QK_K)) {
        let d = b.d.to_f32();
        for half in 0..2 {
            let ql = &b.ql[64 * half..64 * half + 64];
            let qh = &b.qh[32 * half..32 * half + 32];
            let sc = &b.scales[8 * half..8 * half + 8];
            let y = &mut y[128 * half..128 * half + 128];
            for l in 0..32 {
                let is = l / 16;
                let q1 = ((ql[l] & 0x0F) | ((qh[l] & 3) << 4)) as i32 - 32;
                let q2 = ((ql[l + 32] & 0x0F) | (((qh[l] >> 2) & 3) << 4)) as i32 - 32;
                let q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) as i32 - 32;
                let q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) as i32 - 32;
                y[l] = d * sc[is] as f32 * q1 as f32;
                y[l + 32] = d * sc[is + 2] as f32 * q2 as f32;
                y[l + 64] = d * sc[is + 4] as f32 * q3 as f32;
                y[l + 96] = d * sc[is + 6] as f32 * q4 as f32;
            }
        }
    }
}

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

/// Q4_K × Q8_K, per super-block: the 8 lanes of `sum_j sc_j * q4 * q8` (sub-blocks `2i`,
/// `2i + 1` are the low and high nibbles of `qs[32 i ..]`), `fma(dy * d, lanes, acc)`; the
/// mins in 4 lanes, lane `k` = `m_2k * (bsum_4k + bsum_4k+1) + m_2k+1 * (bsum_4k+2 +
/// bsum_4k+3)`, `fma(-dy * dmin, lanes, acc_m)`. Result `hsum8(acc) + hsum4(acc_m)`.
pub(crate) fn dot_q4_k(w: &[u8], a: &[u8]) -> f32 {
    let (w, a): (&[BlockQ4K], &[BlockQ8K]) = (as_blocks(w), as_blocks(a));
    assert_eq!(w.len(), a.len());
    let mut acc = [0.0f32; 8];
    let mut acc_m = [0.0f32; 4];
    for (x, y) in w.iter().zip(a) {
        let (sc, m) = q4k_scales_mins(&x.scales);
        let yd = y.d.get();
        let d = yd * x.d.to_f32();
        let dmin = -yd * x.dmin.to_f32();
        let q8s: [i32; 8] = std::array::from_fn(|i| {
            (y.bsum(2 * i) as i32 + y.bsum(2 * i + 1) as i32) as i16 as i32
        });
        for (k, am) in acc_m.iter_mut().enumerate() {
            let prod = m[2 * k] as i32 * q8s[2 * k] + m[2 * k + 1] as i32 * q8s[2 * k + 1];
            *am = fma(dmin, prod as f32, *am);
        }
        let mut sumi = [0i32; 8];
        for j in 0..QK_K / 64 {
            let q = arr32(&x.qs, 32 * j);
            let lo: [u8; 32] = q.map(|b| b & 0x0F);
            let hi: [u8; 32] = q.map(|b| b >> 4);
            let (sl, sh) = (sc[2 * j] as i32, sc[2 * j + 1] as i32);
            add8(
                &mut sumi,
                &quads_us_scaled(&lo, arr32(&y.qs, 64 * j), sl, sl),
            );
            add8(
                &mut sumi,
                &quads_us_scaled(&hi, arr32(&y.qs, 64 * j + 32), sh, sh),
            );
        }
        fma8(&mut acc, d, &sumi);
    }
    hsum8(&acc) + hsum4(&acc_m)
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

/// The 6-bit values (0..64, unbiased) of a Q6_K block in element order.
fn q6k_values(x: &BlockQ6K) -> [u8; QK_K] {
    let mut q = [0u8; QK_K];
    for half in 0..2 {
        let ql = &x.ql[64 * half..64 * half + 64];
        let qh = &x.qh[32 * half..32 * half + 32];
        let q = &mut q[128 * half..128 * half + 128];
        for l in 0..32 {
            q[l] = (ql[l] & 0x0F) | ((qh[l] & 3) << 4);
            q[l + 32] = (ql[l + 32] & 0x0F) | (((qh[l] >> 2) & 3) << 4);
            q[l + 64] = (ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4);
            q[l + 96] = (ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4);
        }
    }
    q
}

/// Q6_K × Q8_K, per super-block: the 8 lanes of `sum sc * q * q8` over the unbiased values
/// (group `g` of 32 elements: lanes 0..4 take scale `2g`, lanes 4..8 scale `2g + 1`), minus
/// `32 * (bsum_2l * sc_2l + bsum_2l+1 * sc_2l+1)` per lane `l`, then `fma(dy * d, lanes,
/// acc)`; result `hsum8(acc)`.
pub(crate) fn dot_q6_k(w: &[u8], a: &[u8]) -> f32 {
    let (w, a): (&[BlockQ6K], &[BlockQ8K]) = (as_blocks(w), as_blocks(a));
    assert_eq!(w.len(), a.len());
    let mut acc = [0.0f32; 8];
    for (x, y) in w.iter().zip(a) {
        let q = q6k_values(x);
        let sc = &x.scales;
        let mut sumi = [0i32; 8];
        for g in 0..8 {
            let p = quads_us_scaled(
                arr32(&q, 32 * g),
                arr32(&y.qs, 32 * g),
                sc[2 * g] as i32,
                sc[2 * g + 1] as i32,
            );
            add8(&mut sumi, &p);
        }
        for (l, s) in sumi.iter_mut().enumerate() {
            let bias = y.bsum(2 * l) as i32 * sc[2 * l] as i32
                + y.bsum(2 * l + 1) as i32 * sc[2 * l + 1] as i32;
            *s = s.wrapping_sub(bias << 5);
        }
        fma8(&mut acc, y.d.get() * x.d.to_f32(), &sumi);
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
