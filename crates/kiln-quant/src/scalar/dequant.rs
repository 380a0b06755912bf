//! Dequantization, written as ggml's reference `dequantize_row_*` (ggml-quants.c): each value
//! is computed with the same float operations in the same order and never fused
//! (`d * q + m` is a multiply, then an add), so results equal ggml's and the `gguf` Python
//! package's bit for bit.

use crate::blocks::{
    BlockIQ4NL, BlockIQ4XS, BlockQ2K, BlockQ3K, BlockQ4_0, BlockQ4_1, BlockQ4K, BlockQ5_0,
    BlockQ5_1, BlockQ5K, BlockQ6K, BlockQ8_0, IQ4NL_VALUES, QK, QK_K, as_blocks, bf16_to_f32,
    iq4xs_scale, q3k_scales, q4k_scale_min,
};
use half::f16;

pub(crate) fn dequant_f32(src: &[u8], dst: &mut [f32]) {
    assert_eq!(src.len(), dst.len() * 4);
    for (o, b) in dst.iter_mut().zip(src.chunks_exact(4)) {
        *o = f32::from_le_bytes([b[0], b[1], b[2], b[3]]);
    }
}

pub(crate) fn dequant_f16(src: &[u8], dst: &mut [f32]) {
    assert_eq!(src.len(), dst.len() * 2);
    for (o, b) in dst.iter_mut().zip(src.chunks_exact(2)) {
        *o = f16::from_bits(u16::from_le_bytes([b[0], b[1]])).to_f32();
    }
}

pub(crate) fn dequant_bf16(src: &[u8], dst: &mut [f32]) {
    assert_eq!(src.len(), dst.len() * 2);
    for (o, b) in dst.iter_mut().zip(src.chunks_exact(2)) {
        *o = bf16_to_f32(u16::from_le_bytes([b[0], b[1]]));
    }
}

pub(crate) fn dequant_q4_0(src: &[u8], dst: &mut [f32]) {
    let blocks: &[BlockQ4_0] = as_blocks(src);
    assert_eq!(blocks.len() * QK, dst.len());
    for (b, y) in blocks.iter().zip(dst.chunks_exact_mut(QK)) {
        let d = b.d.to_f32();
        for j in 0..QK / 2 {
            y[j] = ((b.qs[j] & 0x0F) as i32 - 8) as f32 * d;
            y[j + QK / 2] = ((b.qs[j] >> 4) as i32 - 8) as f32 * d;
        }
    }
}

pub(crate) fn dequant_q4_1(src: &[u8], dst: &mut [f32]) {
    let blocks: &[BlockQ4_1] = as_blocks(src);
    assert_eq!(blocks.len() * QK, dst.len());
    for (b, y) in blocks.iter().zip(dst.chunks_exact_mut(QK)) {
        let d = b.d.to_f32();
        let m = b.m.to_f32();
        for j in 0..QK / 2 {
            y[j] = (b.qs[j] & 0x0F) as f32 * d + m;
            y[j + QK / 2] = (b.qs[j] >> 4) as f32 * d + m;
        }
    }
}

pub(crate) fn dequant_q5_0(src: &[u8], dst: &mut [f32]) {
    let blocks: &[BlockQ5_0] = as_blocks(src);
    assert_eq!(blocks.len() * QK, dst.len());
    for (b, y) in blocks.iter().zip(dst.chunks_exact_mut(QK)) {
        let d = b.d.to_f32();
        let qh = u32::from_le_bytes(b.qh);
        for j in 0..QK / 2 {
            let h0 = ((qh >> j) << 4) & 0x10;
            let h1 = (qh >> (j + 12)) & 0x10;
            let x0 = ((b.qs[j] & 0x0F) as u32 | h0) as i32 - 16;
            let x1 = ((b.qs[j] >> 4) as u32 | h1) as i32 - 16;
            y[j] = x0 as f32 * d;
            y[j + QK / 2] = x1 as f32 * d;
        }
    }
}

pub(crate) fn dequant_q8_0(src: &[u8], dst: &mut [f32]) {
    let blocks: &[BlockQ8_0] = as_blocks(src);
    assert_eq!(blocks.len() * QK, dst.len());
    for (b, y) in blocks.iter().zip(dst.chunks_exact_mut(QK)) {
        let d = b.d.to_f32();
        for (o, &q) in y.iter_mut().zip(&b.qs) {
            *o = q as f32 * d;
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

pub(crate) fn dequant_q5_1(src: &[u8], dst: &mut [f32]) {
    let blocks: &[BlockQ5_1] = as_blocks(src);
    assert_eq!(blocks.len() * QK, dst.len());
    for (b, y) in blocks.iter().zip(dst.chunks_exact_mut(QK)) {
        let d = b.d.to_f32();
        let m = b.m.to_f32();
        let qh = u32::from_le_bytes(b.qh);
        for j in 0..QK / 2 {
            let x0 = (b.qs[j] & 0x0F) as u32 | (((qh >> j) & 1) << 4);
            let x1 = (b.qs[j] >> 4) as u32 | (((qh >> (j + 16)) & 1) << 4);
            y[j] = x0 as f32 * d + m;
            y[j + QK / 2] = x1 as f32 * d + m;
        }
    }
}

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

pub(crate) fn dequant_iq4_nl(src: &[u8], dst: &mut [f32]) {
    let blocks: &[BlockIQ4NL] = as_blocks(src);
    assert_eq!(blocks.len() * QK, dst.len());
    for (b, y) in blocks.iter().zip(dst.chunks_exact_mut(QK)) {
        let d = b.d.to_f32();
        for j in 0..QK / 2 {
            y[j] = d * IQ4NL_VALUES[(b.qs[j] & 0x0F) as usize] as f32;
            y[j + QK / 2] = d * IQ4NL_VALUES[(b.qs[j] >> 4) as usize] as f32;
        }
    }
}

pub(crate) fn dequant_iq4_xs(src: &[u8], dst: &mut [f32]) {
    let blocks: &[BlockIQ4XS] = as_blocks(src);
    assert_eq!(blocks.len() * QK_K, dst.len());
    for (b, y) in blocks.iter().zip(dst.chunks_exact_mut(QK_K)) {
        let d = b.d.to_f32();
        for (j, y) in y.chunks_exact_mut(32).enumerate() {
            let dl = d * iq4xs_scale(b, j) as f32;
            let q = &b.qs[16 * j..16 * j + 16];
            for l in 0..16 {
                y[l] = dl * IQ4NL_VALUES[(q[l] & 0x0F) as usize] as f32;
                y[l + 16] = dl * IQ4NL_VALUES[(q[l] >> 4) as usize] as f32;
            }
        }
    }
}
