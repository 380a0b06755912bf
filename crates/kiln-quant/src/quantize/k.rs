//! Row quantizers for the affine 256-element K-quants (`Q2_K`, `Q4_K`, `Q5_K`: a scale and
//! a minimum per sub-block), as ggml's `quantize_row_*_ref`.

use half::f16;

use super::legacy::nearest_int;

/// ggml's `make_qkx2_quants`: the scale and (negated) minimum of an affine `n`-value
/// quantization to `0..=nmax`, refined by a weighted least-squares search over `nstep`
/// candidate scales. Writes the levels to `l`. The error is squared, or absolute with
/// `use_mad`.
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
    use_mad: bool,
) -> (f32, f32) {
    let n = x.len();
    let mut min = x[0];
    let mut max = x[0];
    let mut sum_w = weights[0];
    let mut sum_x = sum_w * x[0];
    for i in 1..n {
        if x[i] < min {
            min = x[i];
        }
        if x[i] > max {
            max = x[i];
        }
        sum_w += weights[i];
        sum_x += weights[i] * x[i];
    }
    if min > 0.0 {
        min = 0.0;
    }
    let err = |d: f32| if use_mad { d.abs() } else { d * d };
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
        best_error += weights[i] * err(diff);
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
                cur_error += weights[i] * err(diff);
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

/// The part `Q4_K` and `Q5_K` share: eight sub-blocks of 32 quantized affinely to
/// `0..=nmax` with ggml's `make_qkx2_quants` (weights `rms(x) + |x|`), their scales and
/// mins quantized to 6 bits against two f16 super-scales, then every level recomputed
/// from the rounded scales. Returns `(d, dmin, packed scales)`; the levels go to `levels`.
fn affine_sub_blocks(
    xb: &[f32],
    nmax: i32,
    rmin: f32,
    nstep: i32,
    levels: &mut [u8; 256],
) -> (f16, f16, [u8; 12]) {
    let mut laux = [0u8; 32];
    let mut weights = [0.0f32; 32];
    let mut scales = [0.0f32; 8];
    let mut mins = [0.0f32; 8];
    let (mut max_scale, mut max_min) = (0.0f32, 0.0f32);
    for j in 0..8 {
        let xs = &xb[32 * j..32 * j + 32];
        let mut sum_x2 = 0.0f32;
        for &v in xs {
            sum_x2 += v * v;
        }
        let av_x = (sum_x2 / 32.0).sqrt();
        for (w, &v) in weights.iter_mut().zip(xs) {
            *w = av_x + v.abs();
        }
        let (s, m) = make_qkx2_quants(
            nmax,
            xs,
            &weights,
            &mut levels[32 * j..32 * j + 32],
            &mut laux,
            rmin,
            0.1,
            nstep,
            false,
        );
        scales[j] = s;
        mins[j] = m;
        if s > max_scale {
            max_scale = s;
        }
        if m > max_min {
            max_min = m;
        }
    }
    let inv_scale = if max_scale > 0.0 {
        63.0 / max_scale
    } else {
        0.0
    };
    let inv_min = if max_min > 0.0 { 63.0 / max_min } else { 0.0 };
    let mut packed = [0u8; 12];
    for j in 0..8 {
        // ggml stores nearest_int in a uint8_t before clamping to 63.
        let ls = (nearest_int(inv_scale * scales[j]) as u8).min(63);
        let lm = (nearest_int(inv_min * mins[j]) as u8).min(63);
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
            let q = nearest_int((xb[32 * j + i] + dm) / dj).clamp(0, nmax);
            levels[32 * j + i] = q as u8;
        }
    }
    (d, dmin, packed)
}

/// `Q4_K`: per block of 256, eight sub-blocks of 32 quantized affinely to 4 bits with
/// 6-bit scales and mins (ggml's `quantize_row_q4_K_ref`).
pub(crate) fn quantize_row_q4_k(x: &[f32], out: &mut [u8]) {
    for (xb, ob) in x.chunks_exact(256).zip(out.chunks_exact_mut(144)) {
        let mut levels = [0u8; 256];
        let (d, dmin, packed) = affine_sub_blocks(xb, 15, -1.0, 20, &mut levels);
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

/// `Q5_K`: as `Q4_K` with 5-bit levels (ggml's `quantize_row_q5_K_ref`): the low nibbles
/// packed as in `Q4_K`, bit 4 of element `64 c + i` in bit `2 c` of `qh[i]` and of element
/// `64 c + 32 + i` in bit `2 c + 1`.
pub(crate) fn quantize_row_q5_k(x: &[f32], out: &mut [u8]) {
    for (xb, ob) in x.chunks_exact(256).zip(out.chunks_exact_mut(176)) {
        let mut levels = [0u8; 256];
        let (d, dmin, packed) = affine_sub_blocks(xb, 31, -0.5, 15, &mut levels);
        ob[0..2].copy_from_slice(&d.to_le_bytes());
        ob[2..4].copy_from_slice(&dmin.to_le_bytes());
        ob[4..16].copy_from_slice(&packed);
        let (qh, qs) = ob[16..].split_at_mut(32);
        qh.fill(0);
        for (c, chunk) in levels.chunks_exact(64).enumerate() {
            for i in 0..32 {
                let (lo, hi) = (chunk[i], chunk[i + 32]);
                qh[i] |= ((lo >> 4) << (2 * c)) | ((hi >> 4) << (2 * c + 1));
                qs[32 * c + i] = (lo & 0xF) | ((hi & 0xF) << 4);
            }
        }
    }
}

/// `Q2_K`: per block of 256, sixteen sub-blocks of 16 quantized affinely to 2 bits
/// (`make_qkx2_quants` with weights `|x|` and absolute error), their scales and mins to
/// 4 bits against two f16 super-scales (ggml's `quantize_row_q2_K_ref`). Byte `32 h + l`
/// of `qs` holds elements `128 h + l + 32 s` in bits `2 s`.
pub(crate) fn quantize_row_q2_k(x: &[f32], out: &mut [u8]) {
    for (xb, ob) in x.chunks_exact(256).zip(out.chunks_exact_mut(84)) {
        let mut levels = [0u8; 256];
        let mut laux = [0u8; 16];
        let mut weights = [0.0f32; 16];
        let mut scales = [0.0f32; 16];
        let mut mins = [0.0f32; 16];
        let (mut max_scale, mut max_min) = (0.0f32, 0.0f32);
        for j in 0..16 {
            let xs = &xb[16 * j..16 * j + 16];
            for (w, &v) in weights.iter_mut().zip(xs) {
                *w = v.abs();
            }
            let (s, m) = make_qkx2_quants(
                3,
                xs,
                &weights,
                &mut levels[16 * j..16 * j + 16],
                &mut laux,
                -0.5,
                0.1,
                15,
                true,
            );
            scales[j] = s;
            mins[j] = m;
            if s > max_scale {
                max_scale = s;
            }
            if m > max_min {
                max_min = m;
            }
        }
        let mut sc = [0u8; 16];
        let mut d = f16::from_f32(0.0);
        let mut dmin = f16::from_f32(0.0);
        if max_scale > 0.0 {
            let iscale = 15.0 / max_scale;
            for (b, &s) in sc.iter_mut().zip(&scales) {
                *b = nearest_int(iscale * s) as u8;
            }
            d = f16::from_f32(max_scale / 15.0);
        }
        if max_min > 0.0 {
            let iscale = 15.0 / max_min;
            for (b, &m) in sc.iter_mut().zip(&mins) {
                *b |= (nearest_int(iscale * m) << 4) as u8;
            }
            dmin = f16::from_f32(max_min / 15.0);
        }
        for j in 0..16 {
            let dj = d.to_f32() * (sc[j] & 0xF) as f32;
            if dj == 0.0 {
                continue;
            }
            let dm = dmin.to_f32() * (sc[j] >> 4) as f32;
            for i in 0..16 {
                let q = nearest_int((xb[16 * j + i] + dm) / dj).clamp(0, 3);
                levels[16 * j + i] = q as u8;
            }
        }
        ob[..16].copy_from_slice(&sc);
        pack_2bit(&levels, &mut ob[16..80]);
        ob[80..82].copy_from_slice(&d.to_le_bytes());
        ob[82..84].copy_from_slice(&dmin.to_le_bytes());
    }
}

/// Packs 256 two-bit levels as `Q2_K` and `Q3_K` store them: byte `32 h + l` holds
/// elements `128 h + l + 32 s` in bits `2 s .. 2 s + 2`.
pub(crate) fn pack_2bit(levels: &[u8; 256], qs: &mut [u8]) {
    for h in 0..2 {
        for l in 0..32 {
            let e = 128 * h + l;
            qs[32 * h + l] =
                levels[e] | (levels[e + 32] << 2) | (levels[e + 64] << 4) | (levels[e + 96] << 6);
        }
    }
}
