//! The float weight types F32, F16 and BF16: dequantization (exact widening) and the dot
//! products of ggml's `ggml_vec_dot_f32/f16/bf16` AVX2 paths, in their order.

use super::util::{fma, hsum8};
use crate::blocks::bf16_to_f32;
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

fn f32_at(b: &[u8], i: usize) -> f32 {
    f32::from_le_bytes([b[4 * i], b[4 * i + 1], b[4 * i + 2], b[4 * i + 3]])
}

fn f16_at(b: &[u8], i: usize) -> f32 {
    f16::from_bits(u16::from_le_bytes([b[2 * i], b[2 * i + 1]])).to_f32()
}

fn bf16_at(b: &[u8], i: usize) -> f32 {
    bf16_to_f32(u16::from_le_bytes([b[2 * i], b[2 * i + 1]]))
}

/// The float dot products (ggml's `ggml_vec_dot_f32/f16/bf16` AVX2 paths): 32 elements per
/// step into four 8-lane FMA accumulators (`s[j]` takes elements `8j .. 8j + 8` of each
/// step), reduced by `reduce`, then the tail (fewer than 32 elements) added one product at
/// a time in `f64`.
fn dot_float(n: usize, at: impl Fn(usize) -> (f32, f32), reduce: fn(&[[f32; 8]; 4]) -> f32) -> f32 {
    let np = n & !31;
    let mut s = [[0.0f32; 8]; 4];
    for i in (0..np).step_by(32) {
        for (j, sj) in s.iter_mut().enumerate() {
            for (l, v) in sj.iter_mut().enumerate() {
                let (x, y) = at(i + 8 * j + l);
                *v = fma(x, y, *v);
            }
        }
    }
    let mut sum = reduce(&s) as f64;
    for i in np..n {
        let (x, y) = at(i);
        sum += (x * y) as f64;
    }
    sum as f32
}

/// ggml's `GGML_F32x8_REDUCE`: `(s0 + s2) + (s1 + s3)` lane-wise, the 128-bit halves added,
/// then two horizontal pair additions.
fn reduce_f32x8(s: &[[f32; 8]; 4]) -> f32 {
    let v: [f32; 8] = std::array::from_fn(|l| (s[0][l] + s[2][l]) + (s[1][l] + s[3][l]));
    let t: [f32; 4] = std::array::from_fn(|l| v[l] + v[l + 4]);
    (t[0] + t[1]) + (t[2] + t[3])
}

/// The bf16 reduction: `(c0 + c2) + (c1 + c3)`, then [`hsum8`].
fn reduce_bf16(s: &[[f32; 8]; 4]) -> f32 {
    let v: [f32; 8] = std::array::from_fn(|l| (s[0][l] + s[2][l]) + (s[1][l] + s[3][l]));
    hsum8(&v)
}

pub(crate) fn dot_f32(w: &[u8], a: &[u8]) -> f32 {
    assert_eq!(w.len(), a.len());
    dot_float(w.len() / 4, |i| (f32_at(w, i), f32_at(a, i)), reduce_f32x8)
}

pub(crate) fn dot_f16(w: &[u8], a: &[u8]) -> f32 {
    assert_eq!(w.len(), a.len());
    dot_float(w.len() / 2, |i| (f16_at(w, i), f16_at(a, i)), reduce_f32x8)
}

pub(crate) fn dot_bf16(w: &[u8], a: &[u8]) -> f32 {
    assert_eq!(w.len(), a.len());
    dot_float(w.len() / 2, |i| (bf16_at(w, i), bf16_at(a, i)), reduce_bf16)
}
