//! Row quantizers for the 256-element K-quants, as ggml's `quantize_row_*_ref`.

use half::f16;

use super::legacy::nearest_int;

/// ggml's `make_qkx2_quants`: the scale and (negated) minimum of an affine `n`-value
/// quantization to `0..=nmax`, refined by a weighted least-squares search over `nstep`
/// candidate scales. Writes the levels to `l`.
#[allow(clippy::too_many_arguments)]
pub(crate) fn make_qkx2_quants(
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
pub(crate) fn quantize_row_q4_k(x: &[f32], out: &mut [u8]) {
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
            let (sc, m) = crate::blocks::q4k_scale_min(j, &packed);
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
