//! NEON kernels for Q4_K and Q6_K × Q8_K, as R × T tiles (`dot` 1 × 1, `dotr4` 4 × 1,
//! `dot4` 1 × 4) performing the oracle's operations in its order (`scalar::kquants::dot_q4_k`,
//! `dot_q6_k`): per super-block the 8 exact `i32` lanes of scaled quad sums (no `maddubs`
//! saturation is reachable: 63 · 128 · 2 < 2^15), one `fma` with the super-block scale, and
//! for Q4_K the mins in a 4-lane accumulator.

use std::arch::aarch64::*;

use super::util::*;
use crate::blocks::{BlockQ4K, BlockQ6K, BlockQ8K, QK_K, as_blocks, q4k_scales_mins};
use crate::table::ActRows;

/// The 16 `bsums` of a Q8_K block as two `i16x8`.
#[inline]
#[target_feature(enable = "neon")]
fn bsums(y: &BlockQ8K) -> (int16x8_t, int16x8_t) {
    let b = &y.bsums;
    (
        vreinterpretq_s16_u8(load16(&b[..8])),
        vreinterpretq_s16_u8(load16(&b[8..])),
    )
}

/// `[a0*b0 + a1*b1, a2*b2 + a3*b3, a4*b4 + a5*b5, a6*b6 + a7*b7]` in exact `i32`.
#[inline]
#[target_feature(enable = "neon")]
fn pair_products(a: int16x8_t, b: int16x8_t) -> int32x4_t {
    vpaddq_s32(
        vmull_s16(vget_low_s16(a), vget_low_s16(b)),
        vmull_high_s16(a, b),
    )
}

// ---------------------------------------------------------------- Q4_K × Q8_K

/// Per (row, token): `acc = fma(dy * d, lanes, acc)` where lane `l` sums, over the four
/// 64-element chunks, `sc_lo * quads(low nibbles, y)` and `sc_hi * quads(high nibbles, y)`;
/// `acc_m = fma(-dy * dmin, mins, acc_m)` with lane `k` = `m_2k * q8s_2k + m_2k+1 *
/// q8s_2k+1`, `q8s_i` = `bsum_2i + bsum_2i+1` wrapped to `i16`. Result `hsum8(acc) +
/// hsum4(acc_m)`.
/// (`Q8_K` rows carry no widened scales: `PRE` and `_sc` are unused; the signature is the one
/// `tile_entry_points!` calls.)
#[inline]
#[target_feature(enable = "neon")]
fn tile_q4_k<const R: usize, const T: usize, const PRE: bool, const DP: bool>(
    w: [&[BlockQ4K]; R],
    ys: [&[BlockQ8K]; T],
    _sc: [&[f32]; T],
) -> [[f32; T]; R] {
    let nb = w[0].len();
    assert!(w.iter().all(|row| row.len() == nb));
    for y in ys {
        assert_eq!(y.len(), nb);
    }
    let mut acc = [[zero8(); T]; R];
    let mut acc_m = [[vdupq_n_f32(0.0); T]; R];
    for i in 0..nb {
        let mut q8s = [vdupq_n_s16(0); T];
        for t in 0..T {
            let (b0, b1) = bsums(&ys[t][i]);
            q8s[t] = vpaddq_s16(b0, b1);
        }
        for r in 0..R {
            let x = &w[r][i];
            let (sc, m) = q4k_scales_mins(&x.scales);
            let m16 = vreinterpretq_s16_u16(vmovl_u8(vld1_u8_arr(&m)));
            let xd = f16_to_f32(x.d);
            let xdmin = f16_to_f32(x.dmin);
            // The unpacked nibbles, shared by the T tokens.
            let mut lo = [vdupq_n_s8(0); QK_K / 32];
            let mut hi = [vdupq_n_s8(0); QK_K / 32];
            for c in 0..QK_K / 64 {
                for h in 0..2 {
                    let b = load16(&x.qs[32 * c + 16 * h..]);
                    lo[2 * c + h] = vreinterpretq_s8_u8(vandq_u8(b, vdupq_n_u8(0x0F)));
                    hi[2 * c + h] = vreinterpretq_s8_u8(vshrq_n_u8::<4>(b));
                }
            }
            for t in 0..T {
                let y = &ys[t][i];
                let yd = y.d.get();
                let d = yd * xd;
                let dmin = -yd * xdmin;
                let prod = pair_products(m16, q8s[t]);
                acc_m[r][t] = vfmaq_n_f32(acc_m[r][t], vcvtq_f32_s32(prod), dmin);
                let mut sumi = izero8();
                for c in 0..QK_K / 64 {
                    let (sl, sh) = (sc[2 * c] as i32, sc[2 * c + 1] as i32);
                    let yl = load_i8x32(&y.qs[64 * c..]);
                    let yh = load_i8x32(&y.qs[64 * c + 32..]);
                    let pl = quads8::<DP>(I8x32(lo[2 * c], lo[2 * c + 1]), yl);
                    let ph = quads8::<DP>(I8x32(hi[2 * c], hi[2 * c + 1]), yh);
                    sumi.0 = vmlaq_n_s32(sumi.0, pl.0, sl);
                    sumi.1 = vmlaq_n_s32(sumi.1, pl.1, sl);
                    sumi.0 = vmlaq_n_s32(sumi.0, ph.0, sh);
                    sumi.1 = vmlaq_n_s32(sumi.1, ph.1, sh);
                }
                acc[r][t] = fma8(acc[r][t], d, sumi);
            }
        }
    }
    let mut out = [[0.0; T]; R];
    for r in 0..R {
        for t in 0..T {
            out[r][t] = hsum8(acc[r][t]) + hsum4(acc_m[r][t]);
        }
    }
    out
}

/// 8 bytes of an array as a `uint8x8_t`.
#[inline]
#[target_feature(enable = "neon")]
fn vld1_u8_arr(p: &[u8; 8]) -> uint8x8_t {
    // SAFETY: `p` is 8 readable bytes; `ld1` has no alignment requirement.
    unsafe { vld1_u8(p.as_ptr()) }
}

tile_entry_points!(dot_q4_k, dotr4_q4_k, dot4_q4_k,
    tile_q4_k[](BlockQ4K, BlockQ8K, scales per block 0));

// ---------------------------------------------------------------- Q6_K × Q8_K

/// The 6-bit values (0..64, unbiased) of one Q6_K block, 32-element group `g` as
/// `q[2g]` (elements 0..16 of the group) and `q[2g + 1]` (16..32).
#[inline]
#[target_feature(enable = "neon")]
fn q6k_values(x: &BlockQ6K) -> [int8x16_t; 16] {
    let mut q = [vdupq_n_s8(0); 16];
    let m4 = vdupq_n_u8(0x0F);
    let m2 = vdupq_n_u8(0x03);
    for half in 0..2 {
        for s in 0..2 {
            // Bytes 16s..16s+16 of each group of this half.
            let ql0 = load16(&x.ql[64 * half + 16 * s..]);
            let ql1 = load16(&x.ql[64 * half + 32 + 16 * s..]);
            let qh = load16(&x.qh[32 * half + 16 * s..]);
            let g = [
                vorrq_u8(vandq_u8(ql0, m4), vshlq_n_u8::<4>(vandq_u8(qh, m2))),
                vorrq_u8(
                    vandq_u8(ql1, m4),
                    vshlq_n_u8::<4>(vandq_u8(vshrq_n_u8::<2>(qh), m2)),
                ),
                vorrq_u8(
                    vshrq_n_u8::<4>(ql0),
                    vshlq_n_u8::<4>(vandq_u8(vshrq_n_u8::<4>(qh), m2)),
                ),
                vorrq_u8(vshrq_n_u8::<4>(ql1), vshlq_n_u8::<4>(vshrq_n_u8::<6>(qh))),
            ];
            for (k, v) in g.into_iter().enumerate() {
                q[2 * (4 * half + k) + s] = vreinterpretq_s8_u8(v);
            }
        }
    }
    q
}

/// Per (row, token): lane `l` = `sum_g sc_(2g or 2g+1) * quads(q_g, y_g)` (lanes 0..4 take
/// scale `2g`, lanes 4..8 scale `2g + 1`) minus `32 * (bsum_2l * sc_2l + bsum_2l+1 *
/// sc_2l+1)`, then `fma(dy * d, lanes, acc)`; result `hsum8(acc)`.
/// (`PRE` and `_sc` unused, as for [`tile_q4_k`].)
#[inline]
#[target_feature(enable = "neon")]
fn tile_q6_k<const R: usize, const T: usize, const PRE: bool, const DP: bool>(
    w: [&[BlockQ6K]; R],
    ys: [&[BlockQ8K]; T],
    _sc: [&[f32]; T],
) -> [[f32; T]; R] {
    let nb = w[0].len();
    assert!(w.iter().all(|row| row.len() == nb));
    for y in ys {
        assert_eq!(y.len(), nb);
    }
    let mut acc = [[zero8(); T]; R];
    for i in 0..nb {
        for r in 0..R {
            let x = &w[r][i];
            let q = q6k_values(x);
            let sc = &x.scales;
            let sc8 = vreinterpretq_s8_u8(load16(sc));
            let sc16 = (vmovl_s8(vget_low_s8(sc8)), vmovl_high_s8(sc8));
            let xd = f16_to_f32(x.d);
            for t in 0..T {
                let y = &ys[t][i];
                let mut sumi = izero8();
                for g in 0..8 {
                    let p =
                        quads8::<DP>(I8x32(q[2 * g], q[2 * g + 1]), load_i8x32(&y.qs[32 * g..]));
                    sumi.0 = vmlaq_n_s32(sumi.0, p.0, sc[2 * g] as i32);
                    sumi.1 = vmlaq_n_s32(sumi.1, p.1, sc[2 * g + 1] as i32);
                }
                let (b0, b1) = bsums(y);
                let bias0 = pair_products(b0, sc16.0);
                let bias1 = pair_products(b1, sc16.1);
                sumi.0 = vsubq_s32(sumi.0, vshlq_n_s32::<5>(bias0));
                sumi.1 = vsubq_s32(sumi.1, vshlq_n_s32::<5>(bias1));
                acc[r][t] = fma8(acc[r][t], y.d.get() * xd, sumi);
            }
        }
    }
    let mut out = [[0.0; T]; R];
    for r in 0..R {
        for t in 0..T {
            out[r][t] = hsum8(acc[r][t]);
        }
    }
    out
}

tile_entry_points!(dot_q6_k, dotr4_q6_k, dot4_q6_k,
    tile_q6_k[](BlockQ6K, BlockQ8K, scales per block 0));
