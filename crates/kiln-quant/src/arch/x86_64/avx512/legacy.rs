//! AVX-512 GEMM and GEMV kernels of the 32-value block types: signed weights (Q4_0, Q5_0,
//! Q8_0) × Q8_0 activations, and Q4_1 × Q8_1.
//!
//! The float operations per (row, token) pair are exactly those of the AVX2 kernels
//! (`super::super::avx2::legacy`): per block an exact 8-lane `i32` sum of quads, converted to
//! `f32` and `fma`-accumulated with `f16(dx) * f16(dy)`, `hsum_float_8` at the end (Q4_1: plus
//! its fused `m * s` sum). Only where the lanes live changes:
//!
//! * the signed-weight GEMM tile ([`tile8r4_quad`], four rows × eight tokens) puts the tokens
//!   across the lanes, so one `vpdpbusd`, one conversion and one `fma` serve a quad position
//!   of eight tokens, with no per-token shuffles;
//! * Q4_1's tile ([`tile8r4_q4_1`]) takes the same lanes;
//! * the GEMVs ([`rows_u8`]) keep AVX2's lanes and read signed weights as unsigned bytes plus
//!   an offset.
//!
//! The integer quads come from VNNI `vpdpbusd` (unsigned × signed bytes, four products summed
//! into an `i32` without saturation) instead of `maddubs` + `madd`; for these types the
//! `maddubs` pairs never saturate, so the lanes are the same. AVX2's sign trick for signed
//! weights (`|x|` against `y` negated where `x < 0`, with 8-bit wrapping: an activation of
//! `-128` stays `-128` and the product changes sign) is reproduced exactly where an
//! activation is `-128`, which only a non-finite input quantizes to.

use std::arch::x86_64::*;

use super::util::*;
use crate::arch::x86_64::avx2::util::{
    f16_to_f32, f16x2_to_f32, hsum_f32x8, load_f32x8, nibbles32, prefetch_group_ahead,
    splat_opaque, weight_rows,
};
use crate::blocks::{BlockQ4_0, BlockQ4_1, BlockQ5_0, BlockQ8_0, BlockQ8_1, as_blocks};
use crate::table::{ActRows, Q80_LAY_BLOCK_BYTES, Q808_BLOCK_BYTES};

// ------------------------------------------------- signed weights × Q8_0 (Q4_0, Q5_0, Q8_0)

// ------------------------------------- four rows × eight tokens, the tokens across the lanes

/// Bytes per block column of four rows in the layout of [`unpack_quad`]: per row its 32
/// values as stored codes (unsigned bytes), and its `d`.
pub(crate) const QUAD_BLOCK_BYTES: usize = 4 * (32 + 4);

/// For a four-row layout: how many rows `w` holds (one to four, `row_bytes` apart; checked),
/// their blocks per row (`block` bytes each), and the group's layout in `out` (`per_block`
/// bytes per block column, rounded up to whole 64-byte lines), zeroed when rows are missing.
fn quad_layout<'a>(
    w: &[u8],
    row_bytes: usize,
    block: usize,
    per_block: usize,
    out: &'a mut [u8],
) -> (usize, usize, &'a mut [u8]) {
    let n = w.len() / row_bytes.max(1);
    assert!((1..=4).contains(&n) && w.len() == n * row_bytes);
    let nb = row_bytes / block;
    let out = &mut out[..(nb * per_block).next_multiple_of(64)];
    if n < 4 {
        out.fill(0);
    }
    (n, nb, out)
}

/// Lays out one to four rows of a signed-weight type (`w`, `row_bytes` apart) for
/// [`tile8r4_quad`], [`QUAD_BLOCK_BYTES`] per block column (the group rounded up to whole
/// 64-byte lines): block `i` at `128 i`, row `r` of it at `32 r` as the block's 32 codes in
/// order (`code`'s unsigned bytes, the value plus the type's offset `2^SH`); the rows' `d`
/// from `128 nb`, block `i`'s four at `128 nb + 16 i`. Missing rows are zeros.
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
fn unpack_quad<W: bytemuck::Pod>(
    w: &[u8],
    row_bytes: usize,
    out: &mut [u8],
    code: impl Fn(&W) -> (__m256i, f32),
) {
    let (n, nb, out) = quad_layout(w, row_bytes, size_of::<W>(), QUAD_BLOCK_BYTES, out);
    let (vals, tail) = out.split_at_mut(128 * nb);
    for r in 0..n {
        let row: &[W] = as_blocks(&w[r * row_bytes..(r + 1) * row_bytes]);
        for (i, b) in row.iter().enumerate() {
            // The group two groups on, a block's worth per block: a layout is a pass over
            // rows coming from memory with no arithmetic to hide the wait behind.
            prefetch_group_ahead(w.as_ptr(), 1, 4 * nb, size_of::<W>(), r * nb + i);
            let (x, d) = code(b);
            let at = 128 * i + 32 * r;
            store256(&mut vals[at..at + 32], x);
            tail[16 * i + 4 * r..16 * i + 4 * r + 4].copy_from_slice(&d.to_le_bytes());
        }
    }
}

/// The `N` bytes of `s` from `at`, as an array (in bounds, checked).
#[inline(always)]
fn bytes_at<const N: usize>(s: &[u8], at: usize) -> &[u8; N] {
    s[at..at + N].try_into().unwrap_or_else(|_| unreachable!())
}

/// The little-endian `f32` at `at` of `s`.
#[inline(always)]
fn f32_at(s: &[u8], at: usize) -> f32 {
    f32::from_le_bytes(*bytes_at(s, at))
}

/// The 64 bits at `at` of `s`, in all eight 64-bit lanes.
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
fn splat64_at(s: &[u8], at: usize) -> __m512i {
    _mm512_set1_epi64(i64::from_le_bytes(*bytes_at(s, at)))
}

/// The exact correction of a quirk block's lanes: AVX2's sign trick gives `|x| · -128` for
/// an activation of `-128` against a negative weight, `256 x` more than the product, so the
/// lane's sum of such `x` times 256. `wc` holds the weights' codes, `x + 2^SH`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
fn quirk_quads<const SH: u32>(y: __m512i, wc: __m512i) -> __m512i {
    let zero = _mm512_setzero_si512();
    // `x = code − 2^SH` as a byte (for `SH = 7`, `code − 128 ≡ code + 128`).
    let wx = _mm512_sub_epi8(wc, _mm512_set1_epi8((1i32 << SH) as u8 as i8));
    let m = _mm512_cmpeq_epi8_mask(y, _mm512_set1_epi8(i8::MIN)) & _mm512_movepi8_mask(wx);
    let sel = _mm512_maskz_mov_epi8(m, wx);
    _mm512_slli_epi32::<8>(_mm512_dpbusd_epi32(zero, _mm512_set1_epi8(1), sel))
}

/// One block column of the four-row tile of the signed-weight types: for row `r`, its
/// codes' quads `2k`, `2k + 1` (`wc(r, k)`, eight bytes in every 64-bit lane) against the
/// eight tokens' laid-out block `yb` ([`crate::table::interleave8_q80`]), added to
/// `acc[r][k]` scaled by the row's `dx(r)` times the tokens' scales `dy`.
///
/// Lane `2t + h` of accumulator `(r, k)` is AVX2's lane `2k + h` of row `r`, token `t` (the
/// float sum of its quad `2k + h`). Per row and `k`, one `vpdpbusd` forms that quad sum for
/// all eight tokens from the row's codes (the unsigned operand) and the signed activations,
/// starting from the activations' quad offsets `−2^SH · sum y` (loaded and shifted once per
/// block, shared by the rows), so the `i32` lanes are AVX2's exactly; then one conversion
/// and one `fma` with the row's `dx · dy` for the eight tokens. A block where some
/// activation is `-128` (`quirk`) adds the exact correction of AVX2's sign trick there
/// ([`quirk_quads`]).
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
fn tile_block<const SH: u32>(
    acc: &mut [[__m512; 4]; 4],
    yb: &[u8; Q80_LAY_BLOCK_BYTES],
    dy: __m512,
    quirk: bool,
    dx: impl Fn(usize) -> f32,
    wc: impl Fn(usize, usize) -> __m512i,
) {
    let y: [__m512i; 4] = std::array::from_fn(|k| load512(&yb[64 * k..64 * k + 64]));
    let off: [__m512i; 4] = std::array::from_fn(|k| {
        _mm512_slli_epi32::<SH>(load512(&yb[256 + 64 * k..256 + 64 * k + 64]))
    });
    for (r, acc) in acc.iter_mut().enumerate() {
        let d = _mm512_mul_ps(_mm512_set1_ps(dx(r)), dy);
        for (k, acc) in acc.iter_mut().enumerate() {
            let c = wc(r, k);
            let mut s = _mm512_dpbusd_epi32(off[k], c, y[k]);
            if quirk {
                s = _mm512_add_epi32(s, quirk_quads::<SH>(y[k], c));
            }
            *acc = _mm512_fmadd_ps(d, _mm512_cvtepi32_ps(s), *acc);
        }
    }
}

/// The tokens' scales of block `i` (`sc8`, block `i`'s scale of token `t` at `8 i + t`) in
/// lanes `2t` and `2t + 1`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
fn token_scales(sc8: &[f32], i: usize) -> __m512 {
    let dup = _mm512_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7);
    _mm512_permutexvar_ps(dup, _mm512_castps256_ps512(load_f32x8(&sc8[8 * i..])))
}

/// The 4 × 8 GEMM tile of the signed-weight types over four rows laid out by
/// [`unpack_quad`] (codes `x + 2^SH`: Q4_0 `SH = 3`, Q5_0 4, Q8_0 7) and eight Q8_0
/// activation rows laid out by [`crate::table::interleave8_q80`] (`yu`), the scales
/// interleaved (`sc8`): [`tile_block`] per block column, then [`hsum_pairs8`]. AVX2's bits.
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
fn tile8r4_quad<const SH: u32>(wu: &[u8], yu: &[u8], sc8: &[f32]) -> [[f32; 8]; 4] {
    let nb = sc8.len() / 8;
    assert!(wu.len() >= nb * QUAD_BLOCK_BYTES);
    assert!(yu.len() >= nb * Q80_LAY_BLOCK_BYTES + nb);
    let (vals, tail) = wu.split_at(128 * nb);
    let (ys, flags) = yu.split_at(Q80_LAY_BLOCK_BYTES * nb);
    let mut acc = [[_mm512_setzero_ps(); 4]; 4];
    for (i, &flag) in flags[..nb].iter().enumerate() {
        let blk: &[u8; 128] = bytes_at(vals, 128 * i);
        let ds: &[u8; 16] = bytes_at(tail, 16 * i);
        tile_block::<SH>(
            &mut acc,
            bytes_at(ys, Q80_LAY_BLOCK_BYTES * i),
            token_scales(sc8, i),
            flag != 0,
            |r| f32_at(ds, 4 * r),
            |r, k| splat64_at(blk, 32 * r + 8 * k),
        );
    }
    std::array::from_fn(|r| hsum_pairs8(&acc[r]))
}

/// The 4 × 8 GEMM tile of Q8_0 over four rows as stored (`w`, `row_bytes` apart; no layout
/// pass): [`tile_block`] per block column with each row's codes `x + 128` formed as they
/// are broadcast (the values with the sign bit flipped) and its `d` widened in place, the
/// next row group prefetched as the GEMVs do; then [`hsum_pairs8`]. AVX2's bits.
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
fn tile8r4_q8_0(w: &[u8], row_bytes: usize, yu: &[u8], sc8: &[f32]) -> [[f32; 8]; 4] {
    let nb = sc8.len() / 8;
    assert!(yu.len() >= nb * Q80_LAY_BLOCK_BYTES + nb);
    let (ys, flags) = yu.split_at(Q80_LAY_BLOCK_BYTES * nb);
    let rows: [&[BlockQ8_0]; 4] = std::array::from_fn(|r| {
        as_blocks(&w[r * row_bytes..r * row_bytes + nb * size_of::<BlockQ8_0>()])
    });
    let flip = _mm512_set1_epi8(i8::MIN);
    let mut acc = [[_mm512_setzero_ps(); 4]; 4];
    for i in 0..nb {
        prefetch_group_ahead(w.as_ptr(), 4, nb, size_of::<BlockQ8_0>(), i);
        tile_block::<7>(
            &mut acc,
            bytes_at(ys, Q80_LAY_BLOCK_BYTES * i),
            token_scales(sc8, i),
            flags[i] != 0,
            |r| f16_to_f32(rows[r][i].d),
            |r, k| {
                let q: &[u8; 8] = bytes_at(bytemuck::cast_slice(&rows[r][i].qs), 8 * k);
                _mm512_xor_si512(_mm512_set1_epi64(i64::from_le_bytes(*q)), flip)
            },
        );
    }
    std::array::from_fn(|r| hsum_pairs8(&acc[r]))
}

/// The eight tokens' `hsum_float_8` of a row's accumulators in the pairs layout (lane
/// `2t + h` of `acc[k]`: token `t`'s AVX2 lane `2k + h`): `(x0 + x4) + (x2 + x6)` and
/// `(x1 + x5) + (x3 + x7)` lane by lane as `(acc0 + acc2) + (acc1 + acc3)`, then the two:
/// AVX2's tree.
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
fn hsum_pairs8(acc: &[__m512; 4]) -> [f32; 8] {
    let even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 0, 2, 4, 6, 8, 10, 12, 14);
    let s = _mm512_add_ps(_mm512_add_ps(acc[0], acc[2]), _mm512_add_ps(acc[1], acc[3]));
    let h = _mm512_add_ps(s, _mm512_permute_ps::<0xB1>(s));
    let mut o = [0.0f32; 8];
    // SAFETY: `o` is 8 writable floats; unaligned store.
    unsafe {
        _mm256_storeu_ps(
            o.as_mut_ptr(),
            _mm512_castps512_ps256(_mm512_permutexvar_ps(even, h)),
        )
    };
    o
}

/// The eight tokens' `hsum_float_8` of a row's accumulators in the tokens-across-lanes
/// layout (lane `2t + h` of `acc[k]`: token `t`'s AVX2 lane `k + 4h`): the neighbouring
/// lanes' sums `x_k + x_(k+4)`, then `(s0 + s2) + (s1 + s3)`, AVX2's tree.
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
fn hsum_lanes8(acc: &[__m512; 4]) -> [f32; 8] {
    let even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 0, 2, 4, 6, 8, 10, 12, 14);
    let h: [__m512; 4] =
        std::array::from_fn(|k| _mm512_add_ps(acc[k], _mm512_permute_ps::<0xB1>(acc[k])));
    let s = _mm512_add_ps(_mm512_add_ps(h[0], h[2]), _mm512_add_ps(h[1], h[3]));
    let mut o = [0.0f32; 8];
    // SAFETY: `o` is 8 writable floats; unaligned store.
    unsafe {
        _mm256_storeu_ps(
            o.as_mut_ptr(),
            _mm512_castps512_ps256(_mm512_permutexvar_ps(even, s)),
        )
    };
    o
}

/// The four-row tile over [`unpack_quad_q4_0`]'s layout (`wu`) with eight Q8_0 activation
/// rows.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
pub(crate) fn dot8r4_quad_q4_0(wu: &[u8], a: ActRows<'_>, out: &mut [[f32; 8]; 4]) {
    *out = tile8r4_quad::<3>(wu, a.lay8, a.sc8);
}

/// The four-row tile over [`unpack_quad_q5_0`]'s layout.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
pub(crate) fn dot8r4_quad_q5_0(wu: &[u8], a: ActRows<'_>, out: &mut [[f32; 8]; 4]) {
    *out = tile8r4_quad::<4>(wu, a.lay8, a.sc8);
}

/// The four-row tile over [`unpack_quad_q8_0`]'s layout.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
pub(crate) fn dot8r4_quad_q8_0(wu: &[u8], a: ActRows<'_>, out: &mut [[f32; 8]; 4]) {
    *out = tile8r4_quad::<7>(wu, a.lay8, a.sc8);
}

/// The four-row tile of Q8_0 over rows as stored, with eight Q8_0 activation rows.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
pub(crate) fn dot8r4_q8_0(w: &[u8], row_bytes: usize, a: ActRows<'_>, out: &mut [[f32; 8]; 4]) {
    *out = tile8r4_q8_0(w, row_bytes, a.lay8, a.sc8);
}

/// Q4_0 rows laid out for [`dot8r4_quad_q4_0`]: the nibbles, `x + 8`.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
pub(crate) fn unpack_quad_q4_0(w: &[u8], row_bytes: usize, out: &mut [u8]) {
    unpack_quad::<BlockQ4_0>(w, row_bytes, out, |b| (nibbles32(&b.qs), f16_to_f32(b.d)));
}

/// Q5_0 rows laid out for [`dot8r4_quad_q5_0`]: the nibbles and their fifth bits, `x + 16`.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
pub(crate) fn unpack_quad_q5_0(w: &[u8], row_bytes: usize, out: &mut [u8]) {
    unpack_quad::<BlockQ5_0>(w, row_bytes, out, |b| {
        let hi = _mm256_maskz_set1_epi8(u32::from_le_bytes(b.qh), 0x10);
        (_mm256_or_si256(nibbles32(&b.qs), hi), f16_to_f32(b.d))
    });
}

/// Q8_0 rows laid out for [`dot8r4_quad_q8_0`]: the values with the sign bit flipped,
/// `x + 128`.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
pub(crate) fn unpack_quad_q8_0(w: &[u8], row_bytes: usize, out: &mut [u8]) {
    unpack_quad::<BlockQ8_0>(w, row_bytes, out, |b| {
        (
            _mm256_xor_si256(load256(&b.qs), _mm256_set1_epi8(i8::MIN)),
            f16_to_f32(b.d),
        )
    });
}

// ---------------------------------------------------------------- Q4_1 × Q8_1

/// Bytes per block column of four rows in the layout of [`unpack_quad_q4_1`]: per row its 32
/// nibbles as bytes, and its `d` and `m`.
pub(crate) const QUAD_Q4_1_BLOCK_BYTES: usize = 4 * (32 + 8);

/// Lays out one to four Q4_1 rows (`w`, `row_bytes` apart) for [`dot8r4_quad_q4_1`],
/// [`QUAD_Q4_1_BLOCK_BYTES`] per block column (the group rounded up to whole 64-byte
/// lines): block `i` at `128 i`, row `r` of it at `32 r` as its 32 values (unsigned bytes,
/// 0..16) with quads `k` and `k + 4` side by side as the `k`th eight bytes; the rows' `d`
/// and `m` from `128 nb`, block `i`'s four pairs at `128 nb + 32 i`. Missing rows are zeros.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
pub(crate) fn unpack_quad_q4_1(w: &[u8], row_bytes: usize, out: &mut [u8]) {
    let (n, nb, out) = quad_layout(
        w,
        row_bytes,
        size_of::<BlockQ4_1>(),
        QUAD_Q4_1_BLOCK_BYTES,
        out,
    );
    let (vals, tail) = out.split_at_mut(128 * nb);
    let order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    for r in 0..n {
        let row: &[BlockQ4_1] = as_blocks(&w[r * row_bytes..(r + 1) * row_bytes]);
        for (i, b) in row.iter().enumerate() {
            // As in `unpack_quad`.
            prefetch_group_ahead(w.as_ptr(), 1, 4 * nb, size_of::<BlockQ4_1>(), r * nb + i);
            let dm = f16x2_to_f32(b.d, b.m);
            let (dx, mx) = (_mm_cvtss_f32(dm), _mm_cvtss_f32(_mm_movehdup_ps(dm)));
            let at = 128 * i + 32 * r;
            store256(
                &mut vals[at..at + 32],
                _mm256_permutevar8x32_epi32(nibbles32(&b.qs), order),
            );
            let t = 32 * i + 8 * r;
            tail[t..t + 4].copy_from_slice(&dx.to_le_bytes());
            tail[t + 4..t + 8].copy_from_slice(&mx.to_le_bytes());
        }
    }
}

/// The 4 × 8 GEMM tile of Q4_1 over four rows laid out by [`unpack_quad_q4_1`] and eight
/// Q8_1 activation rows laid out by [`crate::table::interleave8_q81`] (`yu`), the scales
/// interleaved (`sc8`, block `i`'s `d` of token `t` at `16 i + t`, its `s` at
/// `16 i + 8 + t`): [`tile8r4_quad`]'s lanes, with the row's unsigned nibbles as
/// `vpdpbusd`'s unsigned operand against the signed activations (no offset), and per row the
/// eight tokens' `m · s` sums as one vector `fma` per block (lane `t` token `t`'s fused
/// step, as in AVX2). AVX2's bits.
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
fn tile8r4_q4_1(wu: &[u8], yu: &[u8], sc8: &[f32]) -> [[f32; 8]; 4] {
    let nb = sc8.len() / 16;
    assert!(wu.len() >= nb * QUAD_Q4_1_BLOCK_BYTES);
    assert!(yu.len() >= nb * Q808_BLOCK_BYTES);
    let (vals, tail) = wu.split_at(128 * nb);
    let dup = _mm512_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7);
    let zero = _mm512_setzero_si512();
    let mut acc = [[_mm512_setzero_ps(); 4]; 4];
    let mut summs = [_mm256_setzero_ps(); 4];
    for i in 0..nb {
        let yb: &[u8; Q808_BLOCK_BYTES] = bytes_at(yu, Q808_BLOCK_BYTES * i);
        let blk: &[u8; 128] = bytes_at(vals, 128 * i);
        let dm: &[u8; 32] = bytes_at(tail, 32 * i);
        let y: [__m512i; 4] = std::array::from_fn(|k| load512(&yb[64 * k..64 * k + 64]));
        let s8 = &sc8[16 * i..16 * i + 16];
        let dy = _mm512_permutexvar_ps(dup, _mm512_castps256_ps512(load_f32x8(s8)));
        let sy = load_f32x8(&s8[8..]);
        for r in 0..4 {
            let (dx, mx) = (f32_at(dm, 8 * r), f32_at(dm, 8 * r + 4));
            summs[r] = _mm256_fmadd_ps(_mm256_set1_ps(mx), sy, summs[r]);
            let d = _mm512_mul_ps(_mm512_set1_ps(dx), dy);
            for k in 0..4 {
                let at = 32 * r + 8 * k;
                let wx = splat64_at(blk, at);
                let s = _mm512_dpbusd_epi32(zero, wx, y[k]);
                acc[r][k] = _mm512_fmadd_ps(d, _mm512_cvtepi32_ps(s), acc[r][k]);
            }
        }
    }
    std::array::from_fn(|r| {
        let mut o = hsum_lanes8(&acc[r]);
        let mut sm = [0.0f32; 8];
        // SAFETY: `sm` is 8 writable floats; unaligned store.
        unsafe { _mm256_storeu_ps(sm.as_mut_ptr(), summs[r]) };
        for (o, s) in o.iter_mut().zip(sm) {
            *o += s;
        }
        o
    })
}

/// The four-row Q4_1 tile over [`unpack_quad_q4_1`]'s layout (`wu`) with eight Q8_1
/// activation rows.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
pub(crate) fn dot8r4_quad_q4_1(wu: &[u8], a: ActRows<'_>, out: &mut [[f32; 8]; 4]) {
    *out = tile8r4_q4_1(wu, a.lay8, a.sc8);
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
