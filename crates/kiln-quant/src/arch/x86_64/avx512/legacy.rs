//! AVX-512 eight-token GEMM micro-kernels of the 32-value block types: signed weights (Q4_0,
//! Q5_0 over rows unpacked by the AVX2 table's unpackers, Q8_0) × Q8_0 activations, and Q4_1
//! × Q8_1. (GEMV and four-token versions of the same scheme measured slower than AVX2's and
//! are not in the table.) And their GEMVs by another scheme, at the end of this file: signed
//! weights read as unsigned bytes plus an offset ([`rows_u8`]), Q4_1 by `vpdpbusd`.
//!
//! The float operations per (row, token) pair are exactly those of the AVX2 kernels
//! (`super::super::avx2::legacy`): per block an exact 8-lane `i32` sum of quads, converted to
//! `f32` and `fma`-accumulated with `f16(dx) * f16(dy)`, `hsum_float_8` at the end (Q4_1: plus
//! its fused `m * s` sum). A `zmm` carries two tokens side by side, so each 512-bit
//! instruction does the work of two 256-bit ones without changing any lane's operations.
//!
//! The integer quads come from VNNI `vpdpbusd` (unsigned × signed bytes, four products summed
//! into an `i32` without saturation) instead of `maddubs` + `madd`; for these types the
//! `maddubs` pairs never saturate, so the lanes are the same. Signed weights go through the
//! same sign trick as AVX2 (`|x|` against `y` negated where `x < 0`, with 8-bit wrapping: an
//! activation of `-128` stays `-128`), done with a masked subtraction since AVX-512 has no
//! `vpsignb`.

use std::arch::x86_64::*;

use super::util::*;
use crate::arch::x86_64::avx2::util::{
    f16_to_f32, f16x2_to_f32, hsum_f32x8, load_f32x8, nibbles32, prefetch_group_ahead,
    splat_opaque, weight_rows,
};
use crate::blocks::{BlockI8, BlockQ4_0, BlockQ4_1, BlockQ5_0, BlockQ8_0, BlockQ8_1, as_blocks};
use crate::table::ActRows;

// ------------------------------------------------- signed weights × Q8_0 (Q4_0, Q5_0, Q8_0)

/// A block's 32 values as signed bytes and `f16(d)` widened (the AVX2 unpacking).
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
fn unpack_q8_0(x: &BlockQ8_0) -> (__m256i, f32) {
    (load256(&x.qs), f16_to_f32(x.d))
}

#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
fn unpack_i8(x: &BlockI8) -> (__m256i, f32) {
    (load256(&x.qs), x.d)
}

/// Signed weights `wx` (both halves) against activations `y` (each half its own): the quad
/// sums of AVX2's sign trick, as floats.
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
fn quads_ss(ax: __m512i, neg: __mmask64, y: __m512i) -> __m512 {
    let zero = _mm512_setzero_si512();
    let sy = _mm512_mask_sub_epi8(y, neg, zero, y);
    _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(zero, ax, sy))
}

/// The 1 × 8 GEMM tile for signed weights: tokens `2p`, `2p + 1` share a `zmm`. The
/// activation scales come interleaved (`sc8`, block `i`'s scale of token `t` at `8 i + t`).
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
fn tile8_q8_0<W>(
    w: &[W],
    ys: [&[BlockQ8_0]; 8],
    sc8: &[f32],
    unpack: impl Fn(&W) -> (__m256i, f32),
) -> [f32; 8] {
    let nb = w.len();
    for y in ys {
        assert_eq!(y.len(), nb);
    }
    assert_eq!(sc8.len(), 8 * nb);
    let mut acc = [_mm512_setzero_ps(); 4];
    for i in 0..nb {
        let (qx, dx) = unpack(&w[i]);
        let wx = _mm512_broadcast_i64x4(qx);
        let ax = _mm512_abs_epi8(wx);
        let neg = _mm512_movepi8_mask(wx);
        // `dx * dy` for the eight tokens (the AVX2 products); pair `p` takes lanes `2p`,
        // `2p + 1` to its halves.
        let d8 = _mm512_castps256_ps512(_mm256_mul_ps(
            _mm256_set1_ps(dx),
            load_f32x8(&sc8[8 * i..8 * i + 8]),
        ));
        for p in 0..4 {
            let (y0, y1) = (&ys[2 * p][i], &ys[2 * p + 1][i]);
            let d = _mm512_permutexvar_ps(pair_index32(2 * p as i32, 2 * p as i32 + 1), d8);
            let s = quads_ss(ax, neg, join32(&y0.qs, &y1.qs));
            acc[p] = _mm512_fmadd_ps(d, s, acc[p]);
        }
    }
    let mut out = [0.0; 8];
    for p in 0..4 {
        let (lo, hi) = halves_ps(acc[p]);
        out[2 * p] = hsum_f32x8(lo);
        out[2 * p + 1] = hsum_f32x8(hi);
    }
    out
}

#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
pub(crate) fn dot8_q8_0(w: &[u8], a: ActRows<'_>, out: &mut [f32; 8]) {
    let w: &[BlockQ8_0] = as_blocks(w);
    let ys = rows_n::<8, BlockQ8_0>(&a, w.len());
    *out = tile8_q8_0(w, ys, &a.sc8[..8 * w.len()], |x| unpack_q8_0(x));
}

/// The eight-token micro-kernel over unpacked rows ([`BlockI8`], from the AVX2 table's
/// `unpack_q4_0` / `unpack_q5_0`): the same values and operations as the packed types'.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
pub(crate) fn dot8_i8(w: &[u8], a: ActRows<'_>, out: &mut [f32; 8]) {
    let w: &[BlockI8] = as_blocks(w);
    let ys = rows_n::<8, BlockQ8_0>(&a, w.len());
    *out = tile8_q8_0(w, ys, &a.sc8[..8 * w.len()], |x| unpack_i8(x));
}

/// The 4 × 8 GEMM tile over rows unpacked to [`BlockI8`] (Q4_0, Q5_0: values in −16..16),
/// tokens `2p`, `2p + 1` sharing a `zmm` as in [`tile8_q8_0`]. The weights are read as the
/// unsigned bytes `u = x + 16`, so one `vpdpbusd` forms a lane's quads against the raw
/// activations with no sign trick, and the activation vector, like the offset term
/// `16 · quads(y)` that starting each lane at its negation removes, is formed once for the
/// four rows: per token pair and row, one `vpdpbusd`, a conversion, the scale placed, one
/// `fma`. The lanes are AVX2's exact quads and each (row, token) pair sees
/// [`tile8_q8_0`]'s float steps in its order (bit-identical to the single dot). A token
/// pair's block holding an activation of −128 (only a non-finite input quantizes to it)
/// takes the sign trick instead, which AVX2's −128 quirk needs.
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
fn tile8r4_i8(w: [&[BlockI8]; 4], ys: [&[BlockQ8_0]; 8], sc8: &[f32]) -> [[f32; 8]; 4] {
    let nb = w[0].len();
    for r in &w {
        assert_eq!(r.len(), nb);
    }
    for y in ys {
        assert_eq!(y.len(), nb);
    }
    assert_eq!(sc8.len(), 8 * nb);
    let zero = _mm512_setzero_si512();
    let off = _mm512_set1_epi8(16);
    let m128 = _mm512_set1_epi8(i8::MIN);
    let idx: [__m512i; 4] = std::array::from_fn(|p| pair_index32(2 * p as i32, 2 * p as i32 + 1));
    // acc[r][p]: row r, tokens 2p (lower half) and 2p + 1 (upper half).
    let mut acc = [[_mm512_setzero_ps(); 4]; 4];
    for i in 0..nb {
        let sc = load_f32x8(&sc8[8 * i..8 * i + 8]);
        let wx: [__m512i; 4] =
            std::array::from_fn(|r| _mm512_broadcast_i64x4(load256(&w[r][i].qs)));
        let u: [__m512i; 4] = std::array::from_fn(|r| _mm512_add_epi8(wx[r], off));
        // `dx * dy` for the eight tokens, per row (the AVX2 products).
        let d8: [__m512; 4] = std::array::from_fn(|r| {
            _mm512_castps256_ps512(_mm256_mul_ps(_mm256_set1_ps(w[r][i].d), sc))
        });
        let y: [__m512i; 4] =
            std::array::from_fn(|p| join32(&ys[2 * p][i].qs, &ys[2 * p + 1][i].qs));
        let quirk = y.iter().any(|&y| _mm512_cmpeq_epi8_mask(y, m128) != 0);
        if !quirk {
            for p in 0..4 {
                let start = _mm512_sub_epi32(zero, _mm512_dpbusd_epi32(zero, off, y[p]));
                for r in 0..4 {
                    let s = _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(start, u[r], y[p]));
                    let d = _mm512_permutexvar_ps(idx[p], d8[r]);
                    acc[r][p] = _mm512_fmadd_ps(d, s, acc[r][p]);
                }
            }
        } else {
            for p in 0..4 {
                for r in 0..4 {
                    let s = quads_ss(_mm512_abs_epi8(wx[r]), _mm512_movepi8_mask(wx[r]), y[p]);
                    let d = _mm512_permutexvar_ps(idx[p], d8[r]);
                    acc[r][p] = _mm512_fmadd_ps(d, s, acc[r][p]);
                }
            }
        }
    }
    std::array::from_fn(|r| {
        std::array::from_fn(|t| {
            let (lo, hi) = halves_ps(acc[r][t / 2]);
            hsum_f32x8(if t % 2 == 0 { lo } else { hi })
        })
    })
}

/// The four-row tile over unpacked rows (`w`: four rows of [`BlockI8`], `row_bytes` apart).
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
pub(crate) fn dot8r4_i8(w: &[u8], row_bytes: usize, a: ActRows<'_>, out: &mut [[f32; 8]; 4]) {
    let w: [&[BlockI8]; 4] =
        std::array::from_fn(|r| as_blocks(&w[r * row_bytes..(r + 1) * row_bytes]));
    *out = tile8r4_i8(
        w,
        rows_n::<8, BlockQ8_0>(&a, w[0].len()),
        &a.sc8[..8 * w[0].len()],
    );
}

// ---------------------------------------------------------------- Q4_1 × Q8_1

/// Unsigned nibbles `qx` (both halves) against activations `y`: the quad sums, as floats.
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
fn quads_us(qx: __m512i, y: __m512i) -> __m512 {
    _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(_mm512_setzero_si512(), qx, y))
}

/// The 1 × 8 GEMM tile of Q4_1 (tokens `2p`, `2p + 1` share a `zmm`), with the activation
/// scales interleaved (`sc8`: block `i`'s `d` of token `t` at `16 i + t`, its `s` at
/// `16 i + 8 + t`); the eight `m * s` sums run as one vector `fma` (lane `t` is token `t`'s
/// fused step), as in AVX2.
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
fn tile8_q4_1(w: &[BlockQ4_1], ys: [&[BlockQ8_1]; 8], sc8: &[f32]) -> [f32; 8] {
    let nb = w.len();
    for y in ys {
        assert_eq!(y.len(), nb);
    }
    assert_eq!(sc8.len(), 16 * nb);
    let mut acc = [_mm512_setzero_ps(); 4];
    let mut summs = _mm256_setzero_ps();
    for (i, x) in w.iter().enumerate() {
        let dm = f16x2_to_f32(x.d, x.m);
        let (dx, mx) = (_mm_cvtss_f32(dm), _mm_cvtss_f32(_mm_movehdup_ps(dm)));
        let qx = _mm512_broadcast_i64x4(nibbles32(&x.qs));
        let s8 = &sc8[16 * i..16 * i + 16];
        summs = _mm256_fmadd_ps(_mm256_set1_ps(mx), load_f32x8(&s8[8..]), summs);
        let d8 = _mm512_castps256_ps512(_mm256_mul_ps(_mm256_set1_ps(dx), load_f32x8(&s8[..8])));
        for p in 0..4 {
            let (y0, y1) = (&ys[2 * p][i], &ys[2 * p + 1][i]);
            let d = _mm512_permutexvar_ps(pair_index32(2 * p as i32, 2 * p as i32 + 1), d8);
            let s = quads_us(qx, join32(&y0.qs, &y1.qs));
            acc[p] = _mm512_fmadd_ps(d, s, acc[p]);
        }
    }
    let mut sm = [0.0f32; 8];
    // SAFETY: `sm` is 8 writable floats; unaligned store.
    unsafe { _mm256_storeu_ps(sm.as_mut_ptr(), summs) };
    let mut out = [0.0; 8];
    for p in 0..4 {
        let (lo, hi) = halves_ps(acc[p]);
        out[2 * p] = hsum_f32x8(lo) + sm[2 * p];
        out[2 * p + 1] = hsum_f32x8(hi) + sm[2 * p + 1];
    }
    out
}

#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
pub(crate) fn dot8_q4_1(w: &[u8], a: ActRows<'_>, out: &mut [f32; 8]) {
    let w: &[BlockQ4_1] = as_blocks(w);
    let ys = rows_n::<8, BlockQ8_1>(&a, w.len());
    *out = tile8_q4_1(w, ys, &a.sc8[..16 * w.len()]);
}

// ------------------------------- GEMV of signed weights × Q8_0, as unsigned bytes + an offset

/// The `R` × 1 GEMV tile of a signed-weight type (`R` consecutive rows, one token) that reads
/// each weight as an unsigned byte `u = x + OFF` (`unpack`: the block's 32 `u` and its
/// widened `d`), so one `vpdpbusd` forms a lane's four products with no sign trick: the
/// lane's `sum u·y = sum x·y + OFF · sum y`, and the offset term, the same for every row, is
/// formed once per activation block (`vpdpbusd` of `OFF` against `y`) and subtracted by
/// starting every row's lane at its negation. The `i32` lanes are exact and equal AVX2's
/// `maddubs` + `madd` quads (which never saturate for these types), and each row then takes
/// AVX2's float steps in AVX2's order (`dx * dy` as a vector product, conversion, `fma`,
/// `hsum_float_8`), so it returns AVX2's bits; per block and row that is a third fewer vector
/// operations than AVX2's tile (no `vpsignb` pair, no `vpmaddwd` by ones). The row group
/// after next is prefetched a slice per block step, as AVX2's tiles do.
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
fn rows_u8<const R: usize, const OFF: u8, W>(
    w: [&[W]; R],
    y: &[BlockQ8_0],
    unpack: impl Fn(&W) -> (__m256i, f32),
) -> [f32; R] {
    let nb = y.len();
    for r in &w {
        assert_eq!(r.len(), nb);
    }
    let zero = _mm256_setzero_si256();
    let off = _mm256_set1_epi8(OFF as i8);
    let mut acc = [_mm256_setzero_ps(); R];
    let base = w[0].as_ptr().cast::<u8>();
    for (i, yb) in y.iter().enumerate() {
        if R > 1 {
            prefetch_group_ahead(base, R, nb, size_of::<W>(), i);
        }
        let yq = load256(&yb.qs);
        let start = _mm256_sub_epi32(zero, _mm256_dpbusd_epi32(zero, off, yq));
        let dy = _mm256_set1_ps(f16_to_f32(yb.d));
        // An activation of -128 (only a non-finite input quantizes to it) meets AVX2's sign
        // trick, which negates it to itself where the weight is negative: such a block takes
        // AVX2's integer steps, so the quirk and its bits are kept.
        let quirk = _mm256_cmpeq_epi8_mask(yq, _mm256_set1_epi8(i8::MIN)) != 0;
        for r in 0..R {
            let (u, dx) = unpack(&w[r][i]);
            let d = _mm256_mul_ps(splat_opaque(dx), dy);
            let s = if quirk {
                let x = _mm256_sub_epi8(u, off);
                let p = _mm256_maddubs_epi16(_mm256_sign_epi8(x, x), _mm256_sign_epi8(yq, x));
                _mm256_madd_epi16(p, _mm256_set1_epi16(1))
            } else {
                _mm256_dpbusd_epi32(start, u, yq)
            };
            acc[r] = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(s), acc[r]);
        }
    }
    std::array::from_fn(|r| hsum_f32x8(acc[r]))
}

/// The 32 nibbles of a Q4_0/Q5_0 block's 16 bytes (low nibbles first), one vector shift
/// for both halves.
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
fn nibbles32_bw(qs: &[u8; 16]) -> __m256i {
    let both = _mm256_broadcastsi128_si256(load128(qs));
    let shift = _mm256_set_m128i(_mm_set1_epi16(4), _mm_setzero_si128());
    _mm256_and_si256(_mm256_srlv_epi16(both, shift), _mm256_set1_epi8(0x0F))
}

/// Q4_0 as `u = x + 8`: its nibbles.
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
fn unsigned_q4_0(x: &BlockQ4_0) -> (__m256i, f32) {
    (nibbles32_bw(&x.qs), f16_to_f32(x.d))
}

/// Q5_0 as `u = x + 16`: its nibbles with 16 added where the block's fifth bit is set.
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
fn unsigned_q5_0(x: &BlockQ5_0) -> (__m256i, f32) {
    let nib = nibbles32_bw(&x.qs);
    let fifth: __mmask32 = u32::from_le_bytes(x.qh);
    (
        _mm256_mask_add_epi8(nib, fifth, nib, _mm256_set1_epi8(16)),
        f16_to_f32(x.d),
    )
}

/// Q8_0 as `u = x + 128`: its bytes with the top bit flipped.
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
fn unsigned_q8_0(x: &BlockQ8_0) -> (__m256i, f32) {
    (
        _mm256_xor_si256(load256(&x.qs), _mm256_set1_epi8(i8::MIN)),
        f16_to_f32(x.d),
    )
}

/// The GEMV of one signed-weight type: four rows × one token by [`rows_u8`].
macro_rules! gemv_u8 {
    ($name:ident, $block:ty, $off:literal, $unpack:ident) => {
        #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
        pub(crate) fn $name(w: &[u8], row_bytes: usize, a: &[u8], out: &mut [f32; 4]) {
            let w = weight_rows::<4, $block>(w, row_bytes);
            *out = rows_u8::<4, $off, _>(w, as_blocks(a), |x| $unpack(x));
        }
    };
}

gemv_u8!(dotr4_q4_0, BlockQ4_0, 8, unsigned_q4_0);
gemv_u8!(dotr4_q5_0, BlockQ5_0, 16, unsigned_q5_0);
gemv_u8!(dotr4_q8_0, BlockQ8_0, 128, unsigned_q8_0);

/// The `R` × 1 GEMV tile of Q4_1 × Q8_1: AVX2's tile (`avx2::legacy::tile_q4_1`) with the
/// nibbles' quads formed by one `vpdpbusd` (AVX2: `maddubs` + `madd` by ones; the same
/// lanes, no saturation being reachable) and the nibbles split by one variable shift; the
/// float steps are AVX2's in AVX2's order, so are the bits.
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
fn rows_q4_1<const R: usize>(w: [&[BlockQ4_1]; R], y: &[BlockQ8_1]) -> [f32; R] {
    let nb = y.len();
    for r in &w {
        assert_eq!(r.len(), nb);
    }
    let zero = _mm256_setzero_si256();
    let mut acc = [_mm256_setzero_ps(); R];
    let mut summs = [0.0f32; R];
    let base = w[0].as_ptr().cast::<u8>();
    for (i, yb) in y.iter().enumerate() {
        if R > 1 {
            prefetch_group_ahead(base, R, nb, size_of::<BlockQ4_1>(), i);
        }
        let yq = load256(&yb.qs);
        let ds = f16x2_to_f32(yb.d, yb.s);
        let dy = _mm256_broadcastss_ps(ds);
        let sy = _mm_cvtss_f32(_mm_movehdup_ps(ds));
        for r in 0..R {
            let x = &w[r][i];
            let dm = f16x2_to_f32(x.d, x.m);
            let dx = splat_opaque(_mm_cvtss_f32(dm));
            let mx = _mm_cvtss_f32(_mm_movehdup_ps(dm));
            summs[r] = mx.mul_add(sy, summs[r]);
            let d = _mm256_mul_ps(dx, dy);
            let s = _mm256_dpbusd_epi32(zero, nibbles32_bw(&x.qs), yq);
            acc[r] = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(s), acc[r]);
        }
    }
    std::array::from_fn(|r| hsum_f32x8(acc[r]) + summs[r])
}

#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
pub(crate) fn dotr4_q4_1(w: &[u8], row_bytes: usize, a: &[u8], out: &mut [f32; 4]) {
    *out = rows_q4_1::<4>(weight_rows::<4, BlockQ4_1>(w, row_bytes), as_blocks(a));
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::blocks::{F16Le, QK};

    /// Deterministic bytes.
    fn bytes(n: usize, mut s: u64) -> Vec<u8> {
        (0..n)
            .map(|_| {
                s = s
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                (s >> 33) as u8
            })
            .collect()
    }

    #[test]
    fn the_four_row_tile_over_unpacked_rows_equals_the_one_row_kernel_bit_for_bit() {
        if !crate::isa::Isa::Avx512.cpu_has() {
            return;
        }
        let nb = 5;
        // Four rows of Q5_0-range values (−16..16) with small scales.
        let w: Vec<BlockI8> = (0..4 * nb)
            .map(|i| {
                let b = bytes(QK, i as u64 + 1);
                BlockI8 {
                    qs: std::array::from_fn(|k| (b[k] % 32) as i8 - 16),
                    d: 0.01 + i as f32 * 0.001,
                }
            })
            .collect();
        // Eight activation rows of arbitrary bytes: −128 (which AVX2's sign trick treats
        // specially) in about one byte of eight, so some token pairs' blocks hold one and
        // some do not.
        let mut a = Vec::new();
        for t in 0..8 {
            let raw = bytes(nb * QK, 100 + t);
            for i in 0..nb {
                let mut blk = BlockQ8_0 {
                    d: F16Le(half::f16::from_f32(0.02 + t as f32 * 0.003).to_le_bytes()),
                    qs: [0; QK],
                };
                for k in 0..QK {
                    let v = raw[i * QK + k];
                    blk.qs[k] = if v.is_multiple_of(8) && (i + t as usize).is_multiple_of(3) {
                        i8::MIN
                    } else {
                        v as i8
                    };
                }
                a.extend_from_slice(bytemuck::bytes_of(&blk));
            }
        }
        let stride = nb * size_of::<BlockQ8_0>();
        let sc: Vec<f32> = (0..8 * nb)
            .map(|k| {
                let blk: &BlockQ8_0 = bytemuck::from_bytes(&a[k * 34..k * 34 + 34]);
                blk.d.to_f32()
            })
            .collect();
        let mut sc8 = vec![0.0f32; 8 * nb];
        crate::table::interleave8(&sc, nb, &mut sc8);
        let rows = ActRows {
            a: &a,
            stride,
            sc: &sc,
            sc_stride: nb,
            sc8: &sc8,
            q8k8: &[],
        };
        let wb: &[u8] = bytemuck::cast_slice(&w);
        let row_bytes = nb * size_of::<BlockI8>();
        let mut got = [[0.0f32; 8]; 4];
        // SAFETY: this CPU has AVX-512 (checked above).
        unsafe { dot8r4_i8(wb, row_bytes, rows, &mut got) };
        for (r, got) in got.iter().enumerate() {
            let mut want = [0.0f32; 8];
            // SAFETY: as above.
            unsafe { dot8_i8(&wb[r * row_bytes..(r + 1) * row_bytes], rows, &mut want) };
            for t in 0..8 {
                assert_eq!(got[t].to_bits(), want[t].to_bits(), "row {r} token {t}");
            }
        }
    }
}
