//! The 32-element block types Q4_0, Q4_1, Q5_0, Q5_1 and Q8_0: dequantization as ggml's
//! reference `dequantize_row_*` (the same float operations, never fused, so the results equal
//! ggml's and the `gguf` Python package's bit for bit), and the dot products with `Q8_0` /
//! `Q8_1` activations written out in the canonical order (see [`super::util`]): the oracle
//! every SIMD kernel must equal bit for bit.

use super::util::{fma, fma8, hsum8, nibbles, quads_ss, quads_us};
use crate::blocks::{
    BlockQ4_0, BlockQ4_1, BlockQ5_0, BlockQ5_1, BlockQ8_0, BlockQ8_1, QK, as_blocks,
};

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

/// Signed 32-value weight blocks × Q8_0: per block the 8 quad sums of the products, then
/// `fma(f16(dx) * f16(dy), q, acc)`.
fn dot_signed_q8_0<B>(w: &[B], a: &[BlockQ8_0], unpack: impl Fn(&B) -> ([i8; 32], f32)) -> f32 {
    assert_eq!(w.len(), a.len());
    let mut acc = [0.0f32; 8];
    for (x, y) in w.iter().zip(a) {
        let (qx, dx) = unpack(x);
        fma8(&mut acc, dx * y.d.to_f32(), &quads_ss(&qx, &y.qs));
    }
    hsum8(&acc)
}

/// Bit `j` of the little-endian `qh`, for element `j`.
fn high_bit(qh: &[u8; 4], j: usize) -> bool {
    (u32::from_le_bytes(*qh) >> j) & 1 != 0
}

pub(crate) fn dot_q4_0(w: &[u8], a: &[u8]) -> f32 {
    dot_signed_q8_0::<BlockQ4_0>(as_blocks(w), as_blocks(a), |x| {
        (nibbles(&x.qs).map(|v| v as i8 - 8), x.d.to_f32())
    })
}

pub(crate) fn dot_q5_0(w: &[u8], a: &[u8]) -> f32 {
    dot_signed_q8_0::<BlockQ5_0>(as_blocks(w), as_blocks(a), |x| {
        let lo = nibbles(&x.qs);
        let q =
            std::array::from_fn(|j| (lo[j] | if high_bit(&x.qh, j) { 16 } else { 0 }) as i8 - 16);
        (q, x.d.to_f32())
    })
}

pub(crate) fn dot_q8_0(w: &[u8], a: &[u8]) -> f32 {
    dot_signed_q8_0::<BlockQ8_0>(as_blocks(w), as_blocks(a), |x| (x.qs, x.d.to_f32()))
}

/// Q4_1 × Q8_1: `fma(dx * dy, q, acc)` on the unsigned nibbles, and the offsets in a scalar
/// chain `summs = fma(m, s, summs)`; the result is `hsum8(acc) + summs`.
pub(crate) fn dot_q4_1(w: &[u8], a: &[u8]) -> f32 {
    let (w, a): (&[BlockQ4_1], &[BlockQ8_1]) = (as_blocks(w), as_blocks(a));
    assert_eq!(w.len(), a.len());
    let mut acc = [0.0f32; 8];
    let mut summs = 0.0f32;
    for (x, y) in w.iter().zip(a) {
        summs = fma(x.m.to_f32(), y.s.to_f32(), summs);
        fma8(
            &mut acc,
            x.d.to_f32() * y.d.to_f32(),
            &quads_us(&nibbles(&x.qs), &y.qs),
        );
    }
    hsum8(&acc) + summs
}

/// Q5_1 × Q8_1: as [`dot_q4_1`] with five-bit values (bit 4 of element `j` is bit `j` of
/// `qh`).
pub(crate) fn dot_q5_1(w: &[u8], a: &[u8]) -> f32 {
    let (w, a): (&[BlockQ5_1], &[BlockQ8_1]) = (as_blocks(w), as_blocks(a));
    assert_eq!(w.len(), a.len());
    let mut acc = [0.0f32; 8];
    let mut summs = 0.0f32;
    for (x, y) in w.iter().zip(a) {
        summs = fma(x.m.to_f32(), y.s.to_f32(), summs);
        let lo = nibbles(&x.qs);
        let q: [u8; 32] = std::array::from_fn(|j| lo[j] | if high_bit(&x.qh, j) { 16 } else { 0 });
        fma8(&mut acc, x.d.to_f32() * y.d.to_f32(), &quads_us(&q, &y.qs));
    }
    hsum8(&acc) + summs
}
