//! Row quantizers for the non-linear 4-bit types `IQ4_NL` and `IQ4_XS`, as ggml's
//! `quantize_iq4_nl` / `quantize_iq4_xs` without an importance matrix (both run
//! `quantize_row_iq4_nl_impl` with 7 scale trials either side, which is what
//! `llama-quantize` writes).

use half::f16;

use super::legacy::nearest_int;

/// The 16 levels of the IQ4 types (ggml's `kvalues_iq4nl`).
const VALUES: [i8; 16] = [
    -127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113,
];

/// Scale trials either side of the first guess (ggml's `ntry`).
const NTRY: i32 = 7;

/// ggml's `GROUP_MAX_EPS`.
const GROUP_MAX_EPS: f32 = 1e-15;

/// ggml's `best_index_int8`: the index of the level nearest to `x` (the lower one on a
/// tie), found by bisection.
fn best_index(x: f32) -> u8 {
    let v = |i: usize| f32::from(VALUES[i]);
    if x <= v(0) {
        return 0;
    }
    if x >= v(15) {
        return 15;
    }
    let (mut lo, mut hi) = (0usize, 15usize);
    while hi - lo > 1 {
        let mid = (lo + hi) / 2;
        if x < v(mid) {
            hi = mid;
        } else {
            lo = mid;
        }
    }
    if x - v(hi - 1) < v(hi) - x {
        (hi - 1) as u8
    } else {
        hi as u8
    }
}

/// The best scale of one 32-element block (weights `x²`): the first guess
/// `max / -127`, then the least-squares scales of 15 trial level assignments, keeping
/// the one that maximizes `(Σ w q x)² / Σ w q²`. Returns 0 for an all-zero block.
fn block_scale(xb: &[f32]) -> f32 {
    let (mut amax, mut max) = (0.0f32, 0.0f32);
    for &v in xb {
        if v.abs() > amax {
            amax = v.abs();
            max = v;
        }
    }
    if amax < GROUP_MAX_EPS {
        return 0.0;
    }
    let sums = |id: f32| {
        let (mut sumqx, mut sumq2) = (0.0f32, 0.0f32);
        for &v in xb {
            let q = f32::from(VALUES[usize::from(best_index(id * v))]);
            let w = v * v;
            sumqx += w * q * v;
            sumq2 += w * q * q;
        }
        (sumqx, sumq2)
    };
    let d = -max / f32::from(VALUES[0]);
    let (sumqx, sumq2) = sums(1.0 / d);
    let mut d = if sumq2 > 0.0 { sumqx / sumq2 } else { 0.0 };
    let mut best = d * sumqx;
    for itry in -NTRY..=NTRY {
        let id = (itry + i32::from(VALUES[0])) as f32 / max;
        let (sumqx, sumq2) = sums(id);
        if sumq2 > 0.0 && sumqx * sumqx > best * sumq2 {
            d = sumqx / sumq2;
            best = d * sumqx;
        }
    }
    d
}

/// Packs 32 indices: element `j` in the low nibble of byte `j`, `j + 16` in its high one.
fn pack(levels: &[u8; 32], qs: &mut [u8]) {
    for j in 0..16 {
        qs[j] = levels[j] | (levels[j + 16] << 4);
    }
}

/// `IQ4_NL`: per block of 32, an f16 scale `d` and 4-bit indices into [`VALUES`]
/// (`x ≈ d · VALUES[q]`).
pub(crate) fn quantize_row_iq4_nl(x: &[f32], out: &mut [u8]) {
    for (xb, ob) in x.chunks_exact(32).zip(out.chunks_exact_mut(18)) {
        let d = block_scale(xb);
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        let mut levels = [0u8; 32];
        for (l, &v) in levels.iter_mut().zip(xb) {
            *l = best_index(id * v);
        }
        ob[..2].copy_from_slice(&f16::from_f32(d).to_le_bytes());
        pack(&levels, &mut ob[2..]);
    }
}

/// `IQ4_XS`: per block of 256, eight sub-blocks of 32 as `IQ4_NL` whose scales are
/// quantized to 6 bits (`-32..31`, stored `+32`) against one f16 super-scale
/// `d = max_scale / -32`; low nibbles of the scales in `scales_l`, high two bits in the
/// little-endian `scales_h`.
pub(crate) fn quantize_row_iq4_xs(x: &[f32], out: &mut [u8]) {
    for (xb, ob) in x.chunks_exact(256).zip(out.chunks_exact_mut(136)) {
        let mut scales = [0.0f32; 8];
        let (mut max_scale, mut amax_scale) = (0.0f32, 0.0f32);
        for (s, sub) in scales.iter_mut().zip(xb.chunks_exact(32)) {
            *s = block_scale(sub);
            if s.abs() > amax_scale {
                amax_scale = s.abs();
                max_scale = *s;
            }
        }
        let d = -max_scale / 32.0;
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        let mut scales_h = 0u16;
        let mut scales_l = [0u8; 4];
        for (ib, (&s, sub)) in scales.iter().zip(xb.chunks_exact(32)).enumerate() {
            let l = nearest_int(id * s).clamp(-32, 31);
            let dl = d * l as f32;
            let idl = if dl != 0.0 { 1.0 / dl } else { 0.0 };
            let mut levels = [0u8; 32];
            for (q, &v) in levels.iter_mut().zip(sub) {
                *q = best_index(idl * v);
            }
            pack(&levels, &mut ob[8 + 16 * ib..8 + 16 * ib + 16]);
            let l = (l + 32) as u8;
            scales_l[ib / 2] |= (l & 0xF) << (4 * (ib % 2));
            scales_h |= u16::from(l >> 4) << (2 * ib);
        }
        ob[..2].copy_from_slice(&f16::from_f32(d).to_le_bytes());
        ob[2..4].copy_from_slice(&scales_h.to_le_bytes());
        ob[4..8].copy_from_slice(&scales_l);
    }
}
