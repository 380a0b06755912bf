//! Row quantizers for the symmetric 256-element K-quants (`Q3_K`, `Q6_K`: one signed scale
//! per 16-element sub-block, no minimum), as ggml's `quantize_row_*_ref`.

use half::f16;

use super::k::pack_2bit;
use super::legacy::nearest_int;

/// ggml's `GROUP_MAX_EPS`: a group whose largest magnitude is below this is all zero.
const GROUP_MAX_EPS: f32 = 1e-15;

/// The value of largest magnitude (the first one if tied) and that magnitude.
fn signed_max(x: &[f32]) -> (f32, f32) {
    let (mut amax, mut max) = (0.0f32, 0.0f32);
    for &v in x {
        if v.abs() > amax {
            amax = v.abs();
            max = v;
        }
    }
    (max, amax)
}

/// ggml's `make_qx_quants` with `rmse_type = 1` and no importance weights: levels
/// `-nmax..nmax-1` (stored shifted by `nmax` in `l`) for the scale, among 19 candidates
/// around `max / -nmax`, that maximizes `(Σ w x l)² / Σ w l²` with weights `x²`. Returns
/// the least-squares scale for the chosen levels.
fn make_qx_quants(nmax: i32, x: &[f32], l: &mut [i8]) -> f32 {
    let (max, amax) = signed_max(x);
    if amax < GROUP_MAX_EPS {
        l.fill(0);
        return 0.0;
    }
    let level = |iscale: f32, v: f32| nearest_int(iscale * v).clamp(-nmax, nmax - 1);
    let sums = |iscale: f32| {
        let (mut sumlx, mut suml2) = (0.0f32, 0.0f32);
        for &v in x {
            let q = level(iscale, v) as f32;
            let w = v * v;
            sumlx += w * v * q;
            suml2 += w * q * q;
        }
        (sumlx, suml2)
    };
    let mut iscale = -(nmax as f32) / max;
    for (li, &v) in l.iter_mut().zip(x) {
        *li = (level(iscale, v) + nmax) as i8;
    }
    let (sumlx, suml2) = sums(iscale);
    let mut scale = if suml2 != 0.0 { sumlx / suml2 } else { 0.0 };
    let mut best = scale * sumlx;
    for is in -9i32..=9 {
        if is == 0 {
            continue;
        }
        iscale = -(nmax as f32 + 0.1 * is as f32) / max;
        let (sumlx, suml2) = sums(iscale);
        if suml2 > 0.0 && sumlx * sumlx > best * suml2 {
            for (li, &v) in l.iter_mut().zip(x) {
                *li = (level(iscale, v) + nmax) as i8;
            }
            scale = sumlx / suml2;
            best = scale * sumlx;
        }
    }
    scale
}

/// ggml's `make_q3_quants` with `do_rmse`: levels `-nmax..nmax-1` (stored shifted by
/// `nmax`) from the scale `max / -nmax`, then up to five passes that move single levels
/// while that raises `(Σ w x l)² / Σ w l²` (weights `x²`). Returns the least-squares scale.
fn make_q3_quants(nmax: i32, x: &[f32], l: &mut [i8]) -> f32 {
    let (max, amax) = signed_max(x);
    if amax < GROUP_MAX_EPS {
        l.fill(0);
        return 0.0;
    }
    let iscale = -(nmax as f32) / max;
    let (mut sumlx, mut suml2) = (0.0f32, 0.0f32);
    for (li, &v) in l.iter_mut().zip(x) {
        let q = nearest_int(iscale * v).clamp(-nmax, nmax - 1);
        *li = q as i8;
        let w = v * v;
        sumlx += w * v * q as f32;
        suml2 += w * q as f32 * q as f32;
    }
    for _ in 0..5 {
        let mut changed = false;
        for (li, &v) in l.iter_mut().zip(x) {
            let w = v * v;
            let cur = f32::from(*li);
            let mut slx = sumlx - w * v * cur;
            if slx > 0.0 {
                let mut sl2 = suml2 - w * cur * cur;
                let new_l = nearest_int(v * sl2 / slx).clamp(-nmax, nmax - 1);
                if new_l != i32::from(*li) {
                    let nl = new_l as f32;
                    slx += w * v * nl;
                    sl2 += w * nl * nl;
                    if sl2 > 0.0 && slx * slx * suml2 > sumlx * sumlx * sl2 {
                        *li = new_l as i8;
                        sumlx = slx;
                        suml2 = sl2;
                        changed = true;
                    }
                }
            }
        }
        if !changed {
            break;
        }
    }
    for li in l.iter_mut() {
        *li += nmax as i8;
    }
    if suml2 > 0.0 { sumlx / suml2 } else { 0.0 }
}

/// `Q3_K`: per block of 256, sixteen sub-blocks of 16 with levels `-4..3`
/// (`make_q3_quants`), their signed scales quantized to 6 bits against one f16
/// super-scale (ggml's `quantize_row_q3_K_ref`). Layout: `hmask` (bit 2 of element
/// `32 b + i` in bit `b` of byte `i`), the low two bits as `Q2_K`'s `qs`, 12 bytes of
/// scales (low nibbles in bytes 0..8, high two bits in bytes 8..12), `d`.
pub(crate) fn quantize_row_q3_k(x: &[f32], out: &mut [u8]) {
    for (xb, ob) in x.chunks_exact(256).zip(out.chunks_exact_mut(110)) {
        let mut l = [0i8; 256];
        let mut scales = [0.0f32; 16];
        let (mut max_scale, mut amax) = (0.0f32, 0.0f32);
        for j in 0..16 {
            scales[j] = make_q3_quants(4, &xb[16 * j..16 * j + 16], &mut l[16 * j..16 * j + 16]);
            if scales[j].abs() > amax {
                amax = scales[j].abs();
                max_scale = scales[j];
            }
        }
        let mut sc = [0u8; 12];
        let mut d = f16::from_f32(0.0);
        if max_scale != 0.0 {
            let iscale = -32.0 / max_scale;
            for (j, &s) in scales.iter().enumerate() {
                // ggml keeps nearest_int in an int8_t before clamping.
                let q = (i32::from(nearest_int(iscale * s) as i8).clamp(-32, 31) + 32) as u8;
                if j < 8 {
                    sc[j] = q & 0xF;
                } else {
                    sc[j - 8] |= (q & 0xF) << 4;
                }
                sc[j % 4 + 8] |= (q >> 4) << (2 * (j / 4));
            }
            d = f16::from_f32(1.0 / iscale);
        }
        for j in 0..16 {
            let low = if j < 8 { sc[j] & 0xF } else { sc[j - 8] >> 4 };
            let s = i32::from(low | (((sc[8 + j % 4] >> (2 * (j / 4))) & 3) << 4)) - 32;
            let dj = d.to_f32() * s as f32;
            if dj == 0.0 {
                continue;
            }
            for i in 0..16 {
                let q = nearest_int(xb[16 * j + i] / dj).clamp(-4, 3);
                l[16 * j + i] = (q + 4) as i8;
            }
        }
        let hmask = &mut ob[..32];
        hmask.fill(0);
        let mut levels = [0u8; 256];
        for (j, (&q, lv)) in l.iter().zip(levels.iter_mut()).enumerate() {
            let mut q = q as u8;
            if q > 3 {
                hmask[j % 32] |= 1 << (j / 32);
                q -= 4;
            }
            *lv = q;
        }
        pack_2bit(&levels, &mut ob[32..96]);
        ob[96..108].copy_from_slice(&sc);
        ob[108..110].copy_from_slice(&d.to_le_bytes());
    }
}

/// `Q6_K`: per block of 256, sixteen sub-blocks of 16 with levels `-32..31`
/// (`make_qx_quants`), their scales quantized to signed bytes against one f16
/// super-scale (ggml's `quantize_row_q6_K_ref`). Layout: `ql` (low nibbles), `qh` (high
/// two bits), `scales`, `d`; per half of 128, `ql[l]` holds elements `l` and `l + 64`,
/// `ql[l + 32]` elements `l + 32` and `l + 96`, `qh[l]` their high bits in that order.
pub(crate) fn quantize_row_q6_k(x: &[f32], out: &mut [u8]) {
    for (xb, ob) in x.chunks_exact(256).zip(out.chunks_exact_mut(210)) {
        let mut l = [0i8; 256];
        let mut scales = [0.0f32; 16];
        let (mut max_scale, mut max_abs) = (0.0f32, 0.0f32);
        for j in 0..16 {
            scales[j] = make_qx_quants(32, &xb[16 * j..16 * j + 16], &mut l[16 * j..16 * j + 16]);
            if scales[j].abs() > max_abs {
                max_abs = scales[j].abs();
                max_scale = scales[j];
            }
        }
        if max_abs < GROUP_MAX_EPS {
            ob.fill(0);
            continue;
        }
        let iscale = -128.0 / max_scale;
        let d = f16::from_f32(1.0 / iscale);
        let mut sc = [0i8; 16];
        for (b, &s) in sc.iter_mut().zip(&scales) {
            *b = nearest_int(iscale * s).min(127) as i8;
        }
        for j in 0..16 {
            let dj = d.to_f32() * f32::from(sc[j]);
            if dj == 0.0 {
                continue;
            }
            for i in 0..16 {
                let q = nearest_int(xb[16 * j + i] / dj).clamp(-32, 31);
                l[16 * j + i] = (q + 32) as i8;
            }
        }
        let (ql, rest) = ob.split_at_mut(128);
        let (qh, rest) = rest.split_at_mut(64);
        for h in 0..2 {
            for i in 0..32 {
                let e = 128 * h + i;
                let q = [l[e], l[e + 32], l[e + 64], l[e + 96]].map(|v| v as u8);
                ql[64 * h + i] = (q[0] & 0xF) | ((q[2] & 0xF) << 4);
                ql[64 * h + i + 32] = (q[1] & 0xF) | ((q[3] & 0xF) << 4);
                qh[32 * h + i] =
                    (q[0] >> 4) | ((q[1] >> 4) << 2) | ((q[2] >> 4) << 4) | ((q[3] >> 4) << 6);
            }
        }
        for (b, &s) in rest[..16].iter_mut().zip(&sc) {
            *b = s as u8;
        }
        rest[16..18].copy_from_slice(&d.to_le_bytes());
    }
}
