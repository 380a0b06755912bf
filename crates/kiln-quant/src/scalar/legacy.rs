//! Dot products of a weight row with an activation row of its `vec_dot_type`, written out
//! in the canonical order (see [`super::util`]): the oracle every SIMD kernel must equal
//! bit for bit.

use super::util::{add8, arr32, fma, fma8, hsum4, hsum8, quads_ss, quads_us, quads_us_scaled};
use crate::blocks::{
    BlockIQ4NL, BlockQ4_0, BlockQ4_1, BlockQ4K, BlockQ5_0, BlockQ5_1, BlockQ6K, BlockQ8_0,
    BlockQ8_1, BlockQ8K, IQ4NL_VALUES, QK_K, as_blocks, bf16_to_f32, q4k_scales_mins,
};
use half::f16;

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

/// Signed 32-value weight blocks × Q8_0: per block the 8 quad sums of the products, then
/// `fma(f16(dx) * f16(dy), q, acc)`.
fn dot_signed_q8_0<B>(w: &[B], a: &[BlockQ8_0], unpack: impl Fn(&B) -> ([i8; 32], f32)) -> f32 {
    assert_eq!(w.len(), a.len());
    let mut acc = [0.0f32; 8];
    for (x, y) in w.iter().zip(a) {
        let (qx, dx) = unpack(x);
        fma8(&mut acc, dx * y.d.to_f32(), &quads_ss(&qx, &y.qs));
    }
    hsum8(&acc)
}

/// The 32 values of a nibble block: element `j` is the low nibble of `qs[j]`, element
/// `j + 16` the high one.
fn nibbles(qs: &[u8; 16]) -> [u8; 32] {
    std::array::from_fn(|i| {
        if i < 16 {
            qs[i] & 0x0F
        } else {
            qs[i - 16] >> 4
        }
    })
}

/// Bit `j` of the little-endian `qh`, for element `j`.
fn high_bit(qh: &[u8; 4], j: usize) -> bool {
    (u32::from_le_bytes(*qh) >> j) & 1 != 0
}

pub(crate) fn dot_q4_0(w: &[u8], a: &[u8]) -> f32 {
    dot_signed_q8_0::<BlockQ4_0>(as_blocks(w), as_blocks(a), |x| {
        (nibbles(&x.qs).map(|v| v as i8 - 8), x.d.to_f32())
    })
}

pub(crate) fn dot_q5_0(w: &[u8], a: &[u8]) -> f32 {
    dot_signed_q8_0::<BlockQ5_0>(as_blocks(w), as_blocks(a), |x| {
        let lo = nibbles(&x.qs);
        let q =
            std::array::from_fn(|j| (lo[j] | if high_bit(&x.qh, j) { 16 } else { 0 }) as i8 - 16);
        (q, x.d.to_f32())
    })
}

pub(crate) fn dot_q8_0(w: &[u8], a: &[u8]) -> f32 {
    dot_signed_q8_0::<BlockQ8_0>(as_blocks(w), as_blocks(a), |x| (x.qs, x.d.to_f32()))
}

/// Q4_1 × Q8_1: `fma(dx * dy, q, acc)` on the unsigned nibbles, and the offsets in a scalar
/// chain `summs = fma(m, s, summs)`; the result is `hsum8(acc) + summs`.
pub(crate) fn dot_q4_1(w: &[u8], a: &[u8]) -> f32 {
    let (w, a): (&[BlockQ4_1], &[BlockQ8_1]) = (as_blocks(w), as_blocks(a));
    assert_eq!(w.len(), a.len());
    let mut acc = [0.0f32; 8];
    let mut summs = 0.0f32;
    for (x, y) in w.iter().zip(a) {
        summs = fma(x.m.to_f32(), y.s.to_f32(), summs);
        fma8(
            &mut acc,
            x.d.to_f32() * y.d.to_f32(),
            &quads_us(&nibbles(&x.qs), &y.qs),
        );
    }
    hsum8(&acc) + summs
}

/// Q5_1 × Q8_1: as [`dot_q4_1`] with five-bit values (bit 4 of element `j` is bit `j` of
/// `qh`).
pub(crate) fn dot_q5_1(w: &[u8], a: &[u8]) -> f32 {
    let (w, a): (&[BlockQ5_1], &[BlockQ8_1]) = (as_blocks(w), as_blocks(a));
    assert_eq!(w.len(), a.len());
    let mut acc = [0.0f32; 8];
    let mut summs = 0.0f32;
    for (x, y) in w.iter().zip(a) {
        summs = fma(x.m.to_f32(), y.s.to_f32(), summs);
        let lo = nibbles(&x.qs);
        let q: [u8; 32] = std::array::from_fn(|j| lo[j] | if high_bit(&x.qh, j) { 16 } else { 0 });
        fma8(&mut acc, x.d.to_f32() * y.d.to_f32(), &quads_us(&q, &y.qs));
    }
    hsum8(&acc) + summs
}

/// The 32 signed levels of an IQ4_NL block in element order.
fn iq4nl_values(qs: &[u8; 16]) -> [i8; 32] {
    nibbles(qs).map(|q| IQ4NL_VALUES[q as usize])
}

/// IQ4_NL × Q8_0 (ggml's order, which differs from the other 32-element types): blocks are
/// taken in pairs, the even block of each pair into accumulator `acc1`, the odd one into
/// `acc2` (`fma(f16(dy) * f16(dx), quads, acc)` on the signed levels); the two are added
/// lane-wise and reduced with [`hsum8`]. An odd last block is added afterwards as one exact
/// integer sum: `total + dy * dx * sum` (a multiply, then an add).
pub(crate) fn dot_iq4_nl(w: &[u8], a: &[u8]) -> f32 {
    let (w, a): (&[BlockIQ4NL], &[BlockQ8_0]) = (as_blocks(w), as_blocks(a));
    assert_eq!(w.len(), a.len());
    let pairs = w.len() / 2;
    let mut acc = [[0.0f32; 8]; 2];
    for i in 0..2 * pairs {
        let (x, y) = (&w[i], &a[i]);
        let d = y.d.to_f32() * x.d.to_f32();
        fma8(&mut acc[i % 2], d, &quads_ss(&iq4nl_values(&x.qs), &y.qs));
    }
    let both: [f32; 8] = std::array::from_fn(|l| acc[0][l] + acc[1][l]);
    let mut sum = hsum8(&both);
    if w.len() % 2 == 1 {
        let (x, y) = (&w[w.len() - 1], &a[w.len() - 1]);
        let d = y.d.to_f32() * x.d.to_f32();
        let q = iq4nl_values(&x.qs);
        let sumi: i32 = q
            .iter()
            .zip(&y.qs)
            .map(|(&v, &u)| v as i32 * u as i32)
            .sum();
        // Not fused: ggml's x86 build compiles this tail to a multiply and an add (checked
        // against its `ggml_vec_dot_iq4_nl_q8_0` on odd block counts).
        sum += d * sumi as f32;
    }
    sum
}

/// Q4_K × Q8_K, per super-block: the 8 lanes of `sum_j sc_j * q4 * q8` (sub-blocks `2i`,
/// `2i + 1` are the low and high nibbles of `qs[32 i ..]`), `fma(dy * d, lanes, acc)`; the
/// mins in 4 lanes, lane `k` = `m_2k * (bsum_4k + bsum_4k+1) + m_2k+1 * (bsum_4k+2 +
/// bsum_4k+3)`, `fma(-dy * dmin, lanes, acc_m)`. Result `hsum8(acc) + hsum4(acc_m)`.
pub(crate) fn dot_q4_k(w: &[u8], a: &[u8]) -> f32 {
    let (w, a): (&[BlockQ4K], &[BlockQ8K]) = (as_blocks(w), as_blocks(a));
    assert_eq!(w.len(), a.len());
    let mut acc = [0.0f32; 8];
    let mut acc_m = [0.0f32; 4];
    for (x, y) in w.iter().zip(a) {
        let (sc, m) = q4k_scales_mins(&x.scales);
        let yd = y.d.get();
        let d = yd * x.d.to_f32();
        let dmin = -yd * x.dmin.to_f32();
        let q8s: [i32; 8] = std::array::from_fn(|i| {
            (y.bsum(2 * i) as i32 + y.bsum(2 * i + 1) as i32) as i16 as i32
        });
        for (k, am) in acc_m.iter_mut().enumerate() {
            let prod = m[2 * k] as i32 * q8s[2 * k] + m[2 * k + 1] as i32 * q8s[2 * k + 1];
            *am = fma(dmin, prod as f32, *am);
        }
        let mut sumi = [0i32; 8];
        for j in 0..QK_K / 64 {
            let q = arr32(&x.qs, 32 * j);
            let lo: [u8; 32] = q.map(|b| b & 0x0F);
            let hi: [u8; 32] = q.map(|b| b >> 4);
            let (sl, sh) = (sc[2 * j] as i32, sc[2 * j + 1] as i32);
            add8(
                &mut sumi,
                &quads_us_scaled(&lo, arr32(&y.qs, 64 * j), sl, sl),
            );
            add8(
                &mut sumi,
                &quads_us_scaled(&hi, arr32(&y.qs, 64 * j + 32), sh, sh),
            );
        }
        fma8(&mut acc, d, &sumi);
    }
    hsum8(&acc) + hsum4(&acc_m)
}

/// The 6-bit values (0..64, unbiased) of a Q6_K block in element order.
fn q6k_values(x: &BlockQ6K) -> [u8; QK_K] {
    let mut q = [0u8; QK_K];
    for half in 0..2 {
        let ql = &x.ql[64 * half..64 * half + 64];
        let qh = &x.qh[32 * half..32 * half + 32];
        let q = &mut q[128 * half..128 * half + 128];
        for l in 0..32 {
            q[l] = (ql[l] & 0x0F) | ((qh[l] & 3) << 4);
            q[l + 32] = (ql[l + 32] & 0x0F) | (((qh[l] >> 2) & 3) << 4);
            q[l + 64] = (ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4);
            q[l + 96] = (ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4);
        }
    }
    q
}

/// Q6_K × Q8_K, per super-block: the 8 lanes of `sum sc * q * q8` over the unbiased values
/// (group `g` of 32 elements: lanes 0..4 take scale `2g`, lanes 4..8 scale `2g + 1`), minus
/// `32 * (bsum_2l * sc_2l + bsum_2l+1 * sc_2l+1)` per lane `l`, then `fma(dy * d, lanes,
/// acc)`; result `hsum8(acc)`.
pub(crate) fn dot_q6_k(w: &[u8], a: &[u8]) -> f32 {
    let (w, a): (&[BlockQ6K], &[BlockQ8K]) = (as_blocks(w), as_blocks(a));
    assert_eq!(w.len(), a.len());
    let mut acc = [0.0f32; 8];
    for (x, y) in w.iter().zip(a) {
        let q = q6k_values(x);
        let sc = &x.scales;
        let mut sumi = [0i32; 8];
        for g in 0..8 {
            let p = quads_us_scaled(
                arr32(&q, 32 * g),
                arr32(&y.qs, 32 * g),
                sc[2 * g] as i32,
                sc[2 * g + 1] as i32,
            );
            add8(&mut sumi, &p);
        }
        for (l, s) in sumi.iter_mut().enumerate() {
            let bias = y.bsum(2 * l) as i32 * sc[2 * l] as i32
                + y.bsum(2 * l + 1) as i32 * sc[2 * l + 1] as i32;
            *s = s.wrapping_sub(bias << 5);
        }
        fma8(&mut acc, y.d.get() * x.d.to_f32(), &sumi);
    }
    hsum8(&acc)
}
