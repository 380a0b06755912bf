//! Row quantizers for the 32-element legacy types, as ggml's `quantize_row_*_ref`.

use half::f16;

/// ggml's `nearest_int`: round half to even (valid for |x| < 2^22).
#[inline]
pub(crate) fn nearest_int(x: f32) -> i32 {
    x.round_ties_even() as i32
}

/// `Q8_0`: per block of 32, `d = amax / 127`, `q = round(x / d)` (half away from zero).
pub(crate) fn quantize_row_q8_0(x: &[f32], out: &mut [u8]) {
    for (xb, ob) in x.chunks_exact(32).zip(out.chunks_exact_mut(34)) {
        let amax = xb.iter().fold(0.0f32, |m, v| m.max(v.abs()));
        let d = amax / 127.0;
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        ob[..2].copy_from_slice(&f16::from_f32(d).to_le_bytes());
        for (q, &v) in ob[2..].iter_mut().zip(xb) {
            *q = ((v * id).round() as i8) as u8;
        }
    }
}

/// `Q4_0`: per block of 32, `d = max / -8` where `max` is the value of largest magnitude,
/// `q = min(15, trunc(x / d + 8.5))`; element `j` in the low nibble of byte `j`, element
/// `j + 16` in its high nibble.
pub(crate) fn quantize_row_q4_0(x: &[f32], out: &mut [u8]) {
    for (xb, ob) in x.chunks_exact(32).zip(out.chunks_exact_mut(18)) {
        let (mut amax, mut max) = (0.0f32, 0.0f32);
        for &v in xb {
            if v.abs() > amax {
                amax = v.abs();
                max = v;
            }
        }
        let d = max / -8.0;
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        ob[..2].copy_from_slice(&f16::from_f32(d).to_le_bytes());
        for j in 0..16 {
            let q0 = ((xb[j] * id + 8.5) as i8).min(15) as u8;
            let q1 = ((xb[j + 16] * id + 8.5) as i8).min(15) as u8;
            ob[2 + j] = q0 | (q1 << 4);
        }
    }
}

/// Minimum and maximum of a block, compared as ggml does (`v < min`, `v > max`, starting
/// from `±FLT_MAX`).
fn min_max(xb: &[f32]) -> (f32, f32) {
    let (mut min, mut max) = (f32::MAX, -f32::MAX);
    for &v in xb {
        if v < min {
            min = v;
        }
        if v > max {
            max = v;
        }
    }
    (min, max)
}

/// `Q4_1`: per block of 32, `d = (max - min) / 15`, `m = min`,
/// `q = min(15, trunc((x - min) / d + 0.5))`; nibbles laid out as in `Q4_0`.
pub(crate) fn quantize_row_q4_1(x: &[f32], out: &mut [u8]) {
    for (xb, ob) in x.chunks_exact(32).zip(out.chunks_exact_mut(20)) {
        let (min, max) = min_max(xb);
        let d = (max - min) / 15.0;
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        ob[..2].copy_from_slice(&f16::from_f32(d).to_le_bytes());
        ob[2..4].copy_from_slice(&f16::from_f32(min).to_le_bytes());
        for j in 0..16 {
            let q0 = (((xb[j] - min) * id + 0.5) as i8).min(15) as u8;
            let q1 = (((xb[j + 16] - min) * id + 0.5) as i8).min(15) as u8;
            ob[4 + j] = q0 | (q1 << 4);
        }
    }
}

/// Packs 32 five-bit levels: low nibbles as in `Q4_0` into `qs`, bit 4 of element `j` into
/// bit `j` of the little-endian `qh`.
fn pack_q5(levels: &[u8; 32], qh: &mut [u8], qs: &mut [u8]) {
    let mut h = 0u32;
    for j in 0..16 {
        let (a, b) = (levels[j], levels[j + 16]);
        qs[j] = (a & 0x0F) | ((b & 0x0F) << 4);
        h |= u32::from((a & 0x10) >> 4) << j;
        h |= u32::from((b & 0x10) >> 4) << (j + 16);
    }
    qh.copy_from_slice(&h.to_le_bytes());
}

/// `Q5_0`: per block of 32, `d = max / -16` where `max` is the value of largest magnitude,
/// `q = min(31, trunc(x / d + 16.5))`.
pub(crate) fn quantize_row_q5_0(x: &[f32], out: &mut [u8]) {
    for (xb, ob) in x.chunks_exact(32).zip(out.chunks_exact_mut(22)) {
        let (mut amax, mut max) = (0.0f32, 0.0f32);
        for &v in xb {
            if amax < v.abs() {
                amax = v.abs();
                max = v;
            }
        }
        let d = max / -16.0;
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        let mut levels = [0u8; 32];
        for (l, &v) in levels.iter_mut().zip(xb) {
            *l = ((v * id + 16.5) as i8).min(31) as u8;
        }
        ob[..2].copy_from_slice(&f16::from_f32(d).to_le_bytes());
        let (qh, qs) = ob[2..].split_at_mut(4);
        pack_q5(&levels, qh, qs);
    }
}

/// `Q5_1`: per block of 32, `d = (max - min) / 31`, `m = min`,
/// `q = trunc((x - min) / d + 0.5)`.
pub(crate) fn quantize_row_q5_1(x: &[f32], out: &mut [u8]) {
    for (xb, ob) in x.chunks_exact(32).zip(out.chunks_exact_mut(24)) {
        let (min, max) = min_max(xb);
        let d = (max - min) / 31.0;
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        let mut levels = [0u8; 32];
        for (l, &v) in levels.iter_mut().zip(xb) {
            *l = ((v - min) * id + 0.5) as u8;
        }
        ob[..2].copy_from_slice(&f16::from_f32(d).to_le_bytes());
        ob[2..4].copy_from_slice(&f16::from_f32(min).to_le_bytes());
        let (qh, qs) = ob[4..].split_at_mut(4);
        pack_q5(&levels, qh, qs);
    }
}
