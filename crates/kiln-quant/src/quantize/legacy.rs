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
