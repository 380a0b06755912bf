//! Dot products of a weight row with an activation row of its `vec_dot_type`: the readable
//! oracle, in the shape of ggml's `ggml_vec_dot_*_generic`. Integer parts are exact; the
//! float accumulation order differs from the SIMD kernels, which tests allow for.

use crate::blocks::{
    BlockQ4_0, BlockQ4_1, BlockQ4K, BlockQ5_0, BlockQ6K, BlockQ8_0, BlockQ8_1, BlockQ8K, QK, QK_K,
    as_blocks, bf16_to_f32, q4k_scales_mins,
};
use half::f16;

fn f32s(b: &[u8]) -> impl Iterator<Item = f32> + '_ {
    b.chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
}

fn u16s(b: &[u8]) -> impl Iterator<Item = u16> + '_ {
    b.chunks_exact(2).map(|c| u16::from_le_bytes([c[0], c[1]]))
}

/// Products in `f32`, summed in `f64` (ggml's `ggml_float`).
pub(crate) fn dot_f32(w: &[u8], a: &[u8]) -> f32 {
    assert_eq!(w.len(), a.len());
    f32s(w)
        .zip(f32s(a))
        .map(|(x, y)| (x * y) as f64)
        .sum::<f64>() as f32
}

pub(crate) fn dot_f16(w: &[u8], a: &[u8]) -> f32 {
    assert_eq!(w.len(), a.len());
    let h = |b| f16::from_bits(b).to_f32();
    u16s(w)
        .zip(u16s(a))
        .map(|(x, y)| (h(x) * h(y)) as f64)
        .sum::<f64>() as f32
}

pub(crate) fn dot_bf16(w: &[u8], a: &[u8]) -> f32 {
    assert_eq!(w.len(), a.len());
    u16s(w)
        .zip(u16s(a))
        .map(|(x, y)| (bf16_to_f32(x) * bf16_to_f32(y)) as f64)
        .sum::<f64>() as f32
}

pub(crate) fn dot_q4_0(w: &[u8], a: &[u8]) -> f32 {
    let (w, a): (&[BlockQ4_0], &[BlockQ8_0]) = (as_blocks(w), as_blocks(a));
    assert_eq!(w.len(), a.len());
    let mut sum = 0.0f32;
    for (x, y) in w.iter().zip(a) {
        let mut sumi = 0i32;
        for j in 0..QK / 2 {
            let v0 = (x.qs[j] & 0x0F) as i32 - 8;
            let v1 = (x.qs[j] >> 4) as i32 - 8;
            sumi += v0 * y.qs[j] as i32 + v1 * y.qs[j + QK / 2] as i32;
        }
        sum += sumi as f32 * (x.d.to_f32() * y.d.to_f32());
    }
    sum
}

pub(crate) fn dot_q4_1(w: &[u8], a: &[u8]) -> f32 {
    let (w, a): (&[BlockQ4_1], &[BlockQ8_1]) = (as_blocks(w), as_blocks(a));
    assert_eq!(w.len(), a.len());
    let mut sum = 0.0f32;
    for (x, y) in w.iter().zip(a) {
        let mut sumi = 0i32;
        for j in 0..QK / 2 {
            let v0 = (x.qs[j] & 0x0F) as i32;
            let v1 = (x.qs[j] >> 4) as i32;
            sumi += v0 * y.qs[j] as i32 + v1 * y.qs[j + QK / 2] as i32;
        }
        // x = d_x q_x + m_x, y ≈ d_y q_y: sum x y = d_x d_y sum q_x q_y + m_x (d_y sum q_y).
        sum += (x.d.to_f32() * y.d.to_f32()) * sumi as f32 + x.m.to_f32() * y.s.to_f32();
    }
    sum
}

pub(crate) fn dot_q5_0(w: &[u8], a: &[u8]) -> f32 {
    let (w, a): (&[BlockQ5_0], &[BlockQ8_0]) = (as_blocks(w), as_blocks(a));
    assert_eq!(w.len(), a.len());
    let mut sum = 0.0f32;
    for (x, y) in w.iter().zip(a) {
        let qh = u32::from_le_bytes(x.qh);
        let mut sumi = 0i32;
        for j in 0..QK / 2 {
            let h0 = ((qh >> j) << 4) & 0x10;
            let h1 = (qh >> (j + 12)) & 0x10;
            let v0 = ((x.qs[j] & 0x0F) as u32 | h0) as i32 - 16;
            let v1 = ((x.qs[j] >> 4) as u32 | h1) as i32 - 16;
            sumi += v0 * y.qs[j] as i32 + v1 * y.qs[j + QK / 2] as i32;
        }
        sum += (x.d.to_f32() * y.d.to_f32()) * sumi as f32;
    }
    sum
}

pub(crate) fn dot_q8_0(w: &[u8], a: &[u8]) -> f32 {
    let (w, a): (&[BlockQ8_0], &[BlockQ8_0]) = (as_blocks(w), as_blocks(a));
    assert_eq!(w.len(), a.len());
    let mut sum = 0.0f32;
    for (x, y) in w.iter().zip(a) {
        let sumi: i32 =
            x.qs.iter()
                .zip(&y.qs)
                .map(|(&p, &q)| p as i32 * q as i32)
                .sum();
        sum += sumi as f32 * (x.d.to_f32() * y.d.to_f32());
    }
    sum
}

pub(crate) fn dot_q4_k(w: &[u8], a: &[u8]) -> f32 {
    let (w, a): (&[BlockQ4K], &[BlockQ8K]) = (as_blocks(w), as_blocks(a));
    assert_eq!(w.len(), a.len());
    let mut sum = 0.0f32;
    for (x, y) in w.iter().zip(a) {
        let (sc, m) = q4k_scales_mins(&x.scales);
        // sum over sub-blocks j of sc_j * sum(q4 * q8)
        let mut sumi = 0i32;
        for j in 0..QK_K / 64 {
            let q4 = &x.qs[32 * j..32 * j + 32];
            let (lo, hi) = (&y.qs[64 * j..64 * j + 32], &y.qs[64 * j + 32..64 * j + 64]);
            let mut s_lo = 0i32;
            let mut s_hi = 0i32;
            for l in 0..32 {
                s_lo += (q4[l] & 0x0F) as i32 * lo[l] as i32;
                s_hi += (q4[l] >> 4) as i32 * hi[l] as i32;
            }
            sumi += sc[2 * j] as i32 * s_lo + sc[2 * j + 1] as i32 * s_hi;
        }
        // the mins: sum over sub-blocks of m_j * sum(q8 in sub-block j), from bsums
        let mut summ = 0i32;
        for (j, &mj) in m.iter().enumerate() {
            summ += mj as i32 * (y.bsum(2 * j) as i32 + y.bsum(2 * j + 1) as i32);
        }
        let dy = y.d.get();
        sum += dy * x.d.to_f32() * sumi as f32 - dy * x.dmin.to_f32() * summ as f32;
    }
    sum
}

pub(crate) fn dot_q6_k(w: &[u8], a: &[u8]) -> f32 {
    let (w, a): (&[BlockQ6K], &[BlockQ8K]) = (as_blocks(w), as_blocks(a));
    assert_eq!(w.len(), a.len());
    let mut sum = 0.0f32;
    for (x, y) in w.iter().zip(a) {
        let mut q = [0i8; QK_K];
        for half in 0..2 {
            let ql = &x.ql[64 * half..64 * half + 64];
            let qh = &x.qh[32 * half..32 * half + 32];
            let q = &mut q[128 * half..128 * half + 128];
            for l in 0..32 {
                q[l] = ((ql[l] & 0x0F) | ((qh[l] & 3) << 4)) as i8 - 32;
                q[l + 32] = ((ql[l + 32] & 0x0F) | (((qh[l] >> 2) & 3) << 4)) as i8 - 32;
                q[l + 64] = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) as i8 - 32;
                q[l + 96] = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) as i8 - 32;
            }
        }
        let mut sumi = 0i32;
        for j in 0..QK_K / 16 {
            let s: i32 = (16 * j..16 * j + 16)
                .map(|l| q[l] as i32 * y.qs[l] as i32)
                .sum();
            sumi += x.scales[j] as i32 * s;
        }
        sum += y.d.get() * x.d.to_f32() * sumi as f32;
    }
    sum
}
