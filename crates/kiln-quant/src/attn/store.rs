//! Conversion of K/V rows to the types a KV cache stores them in, as ggml's CPU backend
//! writes its cache (`set_rows` through the type's CPU `from_float`): F16 and Q8_0 through
//! the activation converters (F16C rounding; Q8_0 with the x86 build's multiplier
//! `127/amax` and ties-to-even), Q4_0 / Q4_1 / Q5_0 through ggml's reference quantizers
//! (`quantize_row_q4_0_ref` …), F32 as a copy.

use kiln_format::GgmlType;

use crate::QuantError;
use crate::blocks::{BlockQ4_0, BlockQ4_1, BlockQ5_0, F16Le, QK, as_blocks_mut};
use crate::kernels::kernels;

/// The types [`store_row`] writes: what a KV cache page can hold.
pub const KV_STORE_TYPES: [GgmlType; 6] = [
    GgmlType::F32,
    GgmlType::F16,
    GgmlType::Q8_0,
    GgmlType::Q4_0,
    GgmlType::Q4_1,
    GgmlType::Q5_0,
];

/// Converts one row of `src` to `ty` into `dst` (exactly the row's bytes). `src.len()` must
/// be a whole number of `ty`'s blocks.
pub fn store_row(ty: GgmlType, src: &[f32], dst: &mut [u8]) -> Result<(), QuantError> {
    if !KV_STORE_TYPES.contains(&ty) {
        return Err(QuantError::unsupported(ty));
    }
    if !src.len().is_multiple_of(ty.block_elems()) {
        return Err(QuantError::PartialBlock {
            type_name: ty.name(),
            elems: src.len(),
            block_elems: ty.block_elems(),
        });
    }
    let need = src.len() / ty.block_elems() * ty.block_bytes();
    if dst.len() != need {
        return Err(QuantError::BadShape {
            type_name: ty.name(),
            what: "stored row bytes",
            expected: need,
            actual: dst.len(),
        });
    }
    match ty {
        GgmlType::F32 => {
            for (d, &x) in dst.chunks_exact_mut(4).zip(src) {
                d.copy_from_slice(&x.to_le_bytes());
            }
        }
        GgmlType::F16 | GgmlType::Q8_0 => kernels().quantize_activations(ty, src, dst)?,
        GgmlType::Q4_0 => quantize_q4_0(src, as_blocks_mut(dst)),
        GgmlType::Q4_1 => quantize_q4_1(src, as_blocks_mut(dst)),
        GgmlType::Q5_0 => quantize_q5_0(src, as_blocks_mut(dst)),
        _ => return Err(QuantError::unsupported(ty)),
    }
    Ok(())
}

/// The element of largest magnitude (the first one on ties), with its sign.
fn signed_absmax(x: &[f32]) -> f32 {
    let (mut amax, mut max) = (0.0f32, 0.0f32);
    for &v in x {
        if amax < v.abs() {
            amax = v.abs();
            max = v;
        }
    }
    max
}

/// `quantize_row_q4_0_ref`: `d = max / -8`, `q = min(15, trunc(x/d + 8.5))`.
fn quantize_q4_0(x: &[f32], out: &mut [BlockQ4_0]) {
    for (xb, b) in x.chunks_exact(QK).zip(out) {
        let d = signed_absmax(xb) / -8.0;
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        b.d = F16Le::from_f32(d);
        for j in 0..QK / 2 {
            let q0 = ((xb[j] * id + 8.5) as i8).min(15) as u8;
            let q1 = ((xb[j + QK / 2] * id + 8.5) as i8).min(15) as u8;
            b.qs[j] = q0 | (q1 << 4);
        }
    }
}

/// `quantize_row_q4_1_ref`: `d = (max − min) / 15`, `m = min`,
/// `q = min(15, trunc((x − min)/d + 0.5))`.
fn quantize_q4_1(x: &[f32], out: &mut [BlockQ4_1]) {
    for (xb, b) in x.chunks_exact(QK).zip(out) {
        let (mut min, mut max) = (f32::MAX, -f32::MAX);
        for &v in xb {
            if v < min {
                min = v;
            }
            if v > max {
                max = v;
            }
        }
        let d = (max - min) / 15.0;
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        b.d = F16Le::from_f32(d);
        b.m = F16Le::from_f32(min);
        for j in 0..QK / 2 {
            let q0 = (((xb[j] - min) * id + 0.5) as i8).min(15) as u8;
            let q1 = (((xb[j + QK / 2] - min) * id + 0.5) as i8).min(15) as u8;
            b.qs[j] = q0 | (q1 << 4);
        }
    }
}

/// `quantize_row_q5_0_ref`: `d = max / -16`, `q = min(31, trunc(x/d + 16.5))`, bit 4 of
/// element `j` in bit `j` of `qh`.
fn quantize_q5_0(x: &[f32], out: &mut [BlockQ5_0]) {
    for (xb, b) in x.chunks_exact(QK).zip(out) {
        let d = signed_absmax(xb) / -16.0;
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        b.d = F16Le::from_f32(d);
        let mut qh = 0u32;
        for j in 0..QK / 2 {
            let q0 = ((xb[j] * id + 16.5) as i8).min(31) as u8;
            let q1 = ((xb[j + QK / 2] * id + 16.5) as i8).min(31) as u8;
            b.qs[j] = (q0 & 0x0F) | ((q1 & 0x0F) << 4);
            qh |= ((q0 as u32 & 0x10) >> 4) << j;
            qh |= ((q1 as u32 & 0x10) >> 4) << (j + QK / 2);
        }
        b.qh = qh.to_le_bytes();
    }
}
