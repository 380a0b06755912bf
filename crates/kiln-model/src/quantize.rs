//! Quantize-on-load (`--quantize q8_0|q4_0|q4_k`): float weight matrices converted to a
//! block type once, so an F16/BF16 checkpoint runs on the integer kernels.
//!
//! The row quantizers follow ggml's reference (`quantize_row_*_ref`) algorithms, so a
//! matrix quantized here has the same blocks as `llama-quantize` would write for the same
//! float input (up to f16 rounding of scales, which is the same conversion). They live here
//! until kiln-quant grows weight quantizers; they are not hot (run once per load).

use half::f16;
use kiln_format::GgmlType;
use kiln_quant::QMatrix;
use rayon::prelude::*;

use crate::ModelError;

/// The types `--quantize` accepts.
pub const QUANTIZE_TYPES: &[GgmlType] = &[GgmlType::Q8_0, GgmlType::Q4_0, GgmlType::Q4_K];

/// The type a row of `cols` elements is quantized to when `target` is asked for: `target`
/// itself if the row is a whole number of its blocks, else Q8_0 if it is a whole number of
/// 32-element blocks, else `None` (keep the stored type). llama-quantize makes the same
/// kind of per-tensor fallback.
pub fn fit(target: GgmlType, cols: usize) -> Option<GgmlType> {
    if cols.is_multiple_of(target.block_elems()) {
        Some(target)
    } else if cols.is_multiple_of(32) {
        Some(GgmlType::Q8_0)
    } else {
        None
    }
}

/// Quantizes every row of `src` (any type kiln-quant can dequantize) to `ty`.
pub fn quantize_matrix(src: &QMatrix, ty: GgmlType) -> Result<Vec<u8>, ModelError> {
    let quantize_row: fn(&[f32], &mut [u8]) = match ty {
        GgmlType::Q8_0 => quantize_row_q8_0,
        GgmlType::Q4_0 => quantize_row_q4_0,
        GgmlType::Q4_K => quantize_row_q4_k,
        other => {
            return Err(ModelError::UnsupportedQuantization {
                requested: other.name().to_string(),
                supported: QUANTIZE_TYPES.iter().map(|t| t.name()).collect(),
            });
        }
    };
    let cols = src.cols();
    let row_bytes = cols / ty.block_elems() * ty.block_bytes();
    let mut out = vec![0u8; row_bytes * src.rows()];
    out.par_chunks_mut(row_bytes).enumerate().for_each_init(
        || vec![0.0f32; cols],
        |row, (r, dst)| {
            src.dequantize_row(r, row);
            quantize_row(row, dst);
        },
    );
    Ok(out)
}

/// ggml's `nearest_int`: round half to even (valid for |x| < 2^22).
#[inline]
fn nearest_int(x: f32) -> i32 {
    x.round_ties_even() as i32
}

/// `Q8_0`: per block of 32, `d = amax / 127`, `q = round(x / d)` (half away from zero).
pub fn quantize_row_q8_0(x: &[f32], out: &mut [u8]) {
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
pub fn quantize_row_q4_0(x: &[f32], out: &mut [u8]) {
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

/// ggml's `make_qkx2_quants`: the scale and (negated) minimum of an affine `n`-value
/// quantization to `0..=nmax`, refined by a weighted least-squares search over `nstep`
/// candidate scales. Writes the levels to `l`.
#[allow(clippy::too_many_arguments)]
fn make_qkx2_quants(
    nmax: i32,
    x: &[f32],
    weights: &[f32],
    l: &mut [u8],
    laux: &mut [u8],
    rmin: f32,
    rdelta: f32,
    nstep: i32,
) -> (f32, f32) {
    let n = x.len();
    let mut min = x[0];
    let mut max = x[0];
    let mut sum_w = weights[0];
    let mut sum_x = sum_w * x[0];
    for i in 1..n {
        min = min.min(x[i]);
        max = max.max(x[i]);
        sum_w += weights[i];
        sum_x += weights[i] * x[i];
    }
    if min > 0.0 {
        min = 0.0;
    }
    if max == min {
        l.fill(0);
        return (0.0, -min);
    }
    let mut iscale = nmax as f32 / (max - min);
    let mut scale = 1.0 / iscale;
    let mut best_error = 0.0f32;
    for i in 0..n {
        let q = nearest_int(iscale * (x[i] - min)).clamp(0, nmax);
        l[i] = q as u8;
        let diff = scale * q as f32 + min - x[i];
        best_error += weights[i] * diff * diff;
    }
    for is in 0..=nstep {
        iscale = (rmin + rdelta * is as f32 + nmax as f32) / (max - min);
        let (mut sum_l, mut sum_l2, mut sum_xl) = (0.0f32, 0.0f32, 0.0f32);
        for i in 0..n {
            let q = nearest_int(iscale * (x[i] - min)).clamp(0, nmax);
            laux[i] = q as u8;
            let w = weights[i];
            let qf = q as f32;
            sum_l += w * qf;
            sum_l2 += w * qf * qf;
            sum_xl += w * qf * x[i];
        }
        let det = sum_w * sum_l2 - sum_l * sum_l;
        if det > 0.0 {
            let mut this_scale = (sum_w * sum_xl - sum_x * sum_l) / det;
            let mut this_min = (sum_l2 * sum_x - sum_l * sum_xl) / det;
            if this_min > 0.0 {
                this_min = 0.0;
                this_scale = sum_xl / sum_l2;
            }
            let mut cur_error = 0.0f32;
            for i in 0..n {
                let diff = this_scale * laux[i] as f32 + this_min - x[i];
                cur_error += weights[i] * diff * diff;
            }
            if cur_error < best_error {
                l.copy_from_slice(laux);
                best_error = cur_error;
                scale = this_scale;
                min = this_min;
            }
        }
    }
    (scale, -min)
}

/// `Q4_K`: per block of 256, eight sub-blocks of 32 quantized affinely with 6-bit scales
/// and mins (ggml's `quantize_row_q4_K_ref`).
pub fn quantize_row_q4_k(x: &[f32], out: &mut [u8]) {
    for (xb, ob) in x.chunks_exact(256).zip(out.chunks_exact_mut(144)) {
        let mut levels = [0u8; 256];
        let mut laux = [0u8; 32];
        let mut weights = [0.0f32; 32];
        let mut scales = [0.0f32; 8];
        let mut mins = [0.0f32; 8];
        let (mut max_scale, mut max_min) = (0.0f32, 0.0f32);
        for j in 0..8 {
            let xs = &xb[32 * j..32 * j + 32];
            let sum_x2: f32 = xs.iter().map(|v| v * v).sum();
            let av_x = (sum_x2 / 32.0).sqrt();
            for (w, &v) in weights.iter_mut().zip(xs) {
                *w = av_x + v.abs();
            }
            let (s, m) = make_qkx2_quants(
                15,
                xs,
                &weights,
                &mut levels[32 * j..32 * j + 32],
                &mut laux,
                -1.0,
                0.1,
                20,
            );
            scales[j] = s;
            mins[j] = m;
            max_scale = max_scale.max(s);
            max_min = max_min.max(m);
        }
        let inv_scale = if max_scale > 0.0 {
            63.0 / max_scale
        } else {
            0.0
        };
        let inv_min = if max_min > 0.0 { 63.0 / max_min } else { 0.0 };
        let mut packed = [0u8; 12];
        for j in 0..8 {
            let ls = nearest_int(inv_scale * scales[j]).min(63) as u8;
            let lm = nearest_int(inv_min * mins[j]).min(63) as u8;
            if j < 4 {
                packed[j] = ls;
                packed[j + 4] = lm;
            } else {
                packed[j + 4] = (ls & 0xF) | ((lm & 0xF) << 4);
                packed[j - 4] |= (ls >> 4) << 6;
                packed[j] |= (lm >> 4) << 6;
            }
        }
        let d = f16::from_f32(max_scale / 63.0);
        let dmin = f16::from_f32(max_min / 63.0);
        for j in 0..8 {
            let (sc, m) = kiln_quant::blocks::q4k_scale_min(j, &packed);
            let dj = d.to_f32() * sc as f32;
            if dj == 0.0 {
                continue;
            }
            let dm = dmin.to_f32() * m as f32;
            for i in 0..32 {
                let q = nearest_int((xb[32 * j + i] + dm) / dj).clamp(0, 15);
                levels[32 * j + i] = q as u8;
            }
        }
        ob[0..2].copy_from_slice(&d.to_le_bytes());
        ob[2..4].copy_from_slice(&dmin.to_le_bytes());
        ob[4..16].copy_from_slice(&packed);
        for (c, chunk) in levels.chunks_exact(64).enumerate() {
            for i in 0..32 {
                ob[16 + 32 * c + i] = chunk[i] | (chunk[i + 32] << 4);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn roundtrip(ty: GgmlType, x: &[f32]) -> Vec<f32> {
        let row_bytes = x.len() / ty.block_elems() * ty.block_bytes();
        let mut q = vec![0u8; row_bytes];
        match ty {
            GgmlType::Q8_0 => quantize_row_q8_0(x, &mut q),
            GgmlType::Q4_0 => quantize_row_q4_0(x, &mut q),
            _ => quantize_row_q4_k(x, &mut q),
        }
        let mut y = vec![0.0; x.len()];
        kiln_quant::dequantize_row(ty, &q, &mut y).unwrap();
        y
    }

    fn sample(n: usize) -> Vec<f32> {
        (0..n)
            .map(|i| (i as f32 * 0.618).sin() * 1.7 + (i as f32 * 0.1).cos() * 0.3)
            .collect()
    }

    #[test]
    fn quantized_rows_dequantize_within_each_types_step() {
        let x = sample(512);
        let amax = x.iter().fold(0.0f32, |m, v| m.max(v.abs()));
        for (ty, budget) in [
            (GgmlType::Q8_0, amax / 127.0),
            (GgmlType::Q4_0, amax / 8.0),
            (GgmlType::Q4_K, amax / 7.0),
        ] {
            let y = roundtrip(ty, &x);
            let worst = x
                .iter()
                .zip(&y)
                .map(|(a, b)| (a - b).abs())
                .fold(0.0, f32::max);
            assert!(worst <= budget, "{ty}: worst error {worst} > {budget}");
        }
    }

    #[test]
    fn zero_rows_stay_zero() {
        for ty in QUANTIZE_TYPES {
            assert!(roundtrip(*ty, &[0.0; 256]).iter().all(|&v| v == 0.0));
        }
    }

    fn hex(s: &str) -> Vec<u8> {
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    }

    #[test]
    fn q8_0_and_q4_0_match_the_gguf_python_reference_quantizers() {
        // Blocks written by gguf-py 0.19 (`gguf.quants.quantize`, ggml's reference
        // algorithms) for x[i] = sin(0.618 i)·1.7 + cos(0.1 i)·0.3 in f64, rounded to f32.
        let x: Vec<f32> = (0..64)
            .map(|i| ((i as f64 * 0.618).sin() * 1.7 + (i as f64 * 0.1).cos() * 0.3) as f32)
            .collect();
        let mut q8 = [0u8; 68];
        quantize_row_q8_0(&x, &mut q8);
        assert_eq!(
            q8.to_vec(),
            hex(
                "fe2313527a7b5516d5aaa3c4ff3e6a704f12cf9d90aae2225260450cc9948196cc\
                 0eca23465c4a15d29a8192c60b48675d2eedb2949ece135378744a0acba6a9d213547d"
            )
        );
        let mut q4 = [0u8; 36];
        quantize_row_q4_0(&x, &mut q4);
        assert_eq!(
            q4.to_vec(),
            hex("ee33592d1f3f6da9d5e3c294581c0f1f5d99ba331c2e5d99d5f2f0d194592d3e5e9bd7f3")
        );
    }

    #[test]
    fn rows_that_do_not_fit_fall_back_to_q8_0_then_to_the_stored_type() {
        assert_eq!(fit(GgmlType::Q4_K, 512), Some(GgmlType::Q4_K));
        assert_eq!(fit(GgmlType::Q4_K, 576), Some(GgmlType::Q8_0));
        assert_eq!(fit(GgmlType::Q4_0, 576), Some(GgmlType::Q4_0));
        assert_eq!(fit(GgmlType::Q8_0, 172), None);
    }
}
