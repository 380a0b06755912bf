//! AVX-512 dot products of Q4_K, Q5_K and Q6_K with `Q8_K` activations: the four- and
//! eight-token GEMM micro-kernels, and for Q6_K also the single dot and the GEMV (four single
//! dots). (Q4_K's single dot and GEMV are in `gemv.rs`; Q5_K's single dot, which cannot
//! share a block's unpacking, measured slower than AVX2's and is not in the table.)
//!
//! Each keeps the float operations of the AVX2 kernels (`super::super::avx2::dot_k`, `dot_k2`) exactly:
//! per super-block one exact 8-lane `i32` sum, converted to `f32` and `fma`-accumulated with
//! the super-block scale, the mins in their own accumulator (Q4_K: 4 lanes, Q5_K: a scalar
//! fused chain), `hsum_float_8` at the end. Only the integer sums are formed differently, and integer sums are exact:
//!
//! * one `zmm` covers 64 contiguous activation bytes (Q4_K, Q5_K: two 32-value sub-blocks,
//!   the lower 256 bits the first; Q6_K: four 16-value groups, one per 128-bit lane);
//! * VNNI `vpdpbusd` forms each quad sum (four unsigned 4-, 5- or 6-bit weights × signed
//!   bytes, one `i32` lane) in one instruction; a quad sum is at most `4 · 63 · 128 < 2^15`
//!   in magnitude, so it fits an `i16`;
//! * [`sums4`] then puts the quad sums of two `zmm` side by side as `i16` pairs (lane `k`:
//!   the first's quad `k` in its lower half, the second's in its upper) and one `vpdpwssd`
//!   multiplies each by its own sub-block scale and adds them: two scaled quads per lane for
//!   one multiply, where AVX2 needs `maddubs` + `madd` per 32 bytes;
//! * at the end of the super-block the two 256-bit halves are added: lane `l` then holds
//!   the same sum of scaled quads as AVX2's lane `l` (a reordering of exact integer
//!   additions).
//!
//! The GEMM tiles of Q4_K and Q6_K come in 1 and 2 weight rows × 8 tokens (`dot8`,
//! `dot8r2`): in the two-row tile each activation vector is loaded once for both rows, and
//! the tokens' scales and `bsums` terms are formed once for both. Q4_K's two-row tile
//! ([`tile8_q4_k_pair`]) lays its data out differently: the two rows side by side in each
//! `zmm`, one 32-value sub-block at a time, so the lanes need no folding; and it reads the
//! activations offset to unsigned bytes from a per-batch layout (`ActRows::lay8`), so its
//! quad sums are non-negative and pair up by one shift.

use std::arch::x86_64::*;

use super::util::*;
use crate::arch::x86_64::avx2::util::{
    f16_to_f32, f16x2_to_f32, hsum_f32x4, hsum_f32x8, prefetch_group_ahead,
};
use crate::blocks::{BlockQ4K, BlockQ5K, BlockQ6K, BlockQ8K, as_blocks, q4k_scales_mins};
use crate::table::{ActRows, Q8K8_BLOCK_BYTES};

/// The 256 activation bytes of a Q8_K block as four `zmm`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
fn load_q8k(y: &BlockQ8K) -> [__m512i; 4] {
    std::array::from_fn(|j| load512(&y.qs[64 * j..64 * j + 64]))
}

/// The exact scaled sums of a super-block as 16 `i32` lanes (the halves not yet added):
/// lane `k` is `sum_j sc(j, k) * quad_k(q[j] · y[j])`, where `sc(j, k)` is the scale of the
/// values of `q[j]` in lane `k`, given as `i16` pairs: `scp[p]` holds those of `q[2p]` in its
/// even `i16` lanes and those of `q[2p + 1]` in its odd ones.
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
fn sums4(q: &[__m512i; 4], scp: &[__m512i; 2], y: &[__m512i; 4]) -> __m512i {
    let z = _mm512_setzero_si512();
    let s: [__m512i; 4] = std::array::from_fn(|j| _mm512_dpbusd_epi32(z, q[j], y[j]));
    let lo = _mm512_dpwssd_epi32(z, lo16_pairs(s[0], s[1]), scp[0]);
    _mm512_dpwssd_epi32(lo, lo16_pairs(s[2], s[3]), scp[1])
}

// ---------------------------------------------------------------- Q4_K × Q8_K

/// A Q4_K block unpacked for the integer sums: for each pair `j` of sub-blocks its 64
/// nibbles (sub-block `2j` low, `2j + 1` high), and the `i16` scale pairs [`sums4`] applies
/// (`scp[p]`: the scales of `q[2p]` in the even `i16` lanes, of `q[2p + 1]` in the odd ones),
/// plus what the float steps need.
struct Q4K {
    q: [__m512i; 4],
    scp: [__m512i; 2],
    d: f32,
    dmin: f32,
    /// The 8 mins as `i16` lanes.
    mins: __m128i,
}

#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
fn q4k_unpack(x: &BlockQ4K) -> Q4K {
    let (sc, m) = q4k_scales_mins(&x.scales);
    let dm = f16x2_to_f32(x.d, x.dmin);
    let sc16 = _mm512_broadcast_i32x4(_mm_cvtepu8_epi16(_mm_set_epi64x(0, i64::from_le_bytes(sc))));
    let m4 = _mm512_set1_epi8(0x0F);
    Q4K {
        q: std::array::from_fn(|j| {
            let bits = broadcast32(&x.qs[32 * j..32 * j + 32]);
            // Low nibbles in the lower half, high nibbles in the upper half.
            _mm512_and_si512(_mm512_mask_srli_epi16::<4>(bits, HI_HALF16, bits), m4)
        }),
        scp: std::array::from_fn(|p| {
            let sc = |j: i16| _mm512_permutexvar_epi16(pair_index16(2 * j, 2 * j + 1), sc16);
            scale_pairs(sc(2 * p as i16), sc(2 * p as i16 + 1))
        }),
        d: _mm_cvtss_f32(dm),
        dmin: _mm_cvtss_f32(_mm_movehdup_ps(dm)),
        mins: _mm_cvtepu8_epi16(_mm_set_epi64x(0, i64::from_le_bytes(m))),
    }
}

/// `sum(m_j * sum(q8 in sub-block j))` as 4 `i32` lanes, from `bsums` (as AVX2).
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
fn q4k_mins_prod(mins: __m128i, y: &BlockQ8K) -> __m128i {
    let q8sums = load256(&y.bsums);
    let q8s = _mm_hadd_epi16(
        _mm256_castsi256_si128(q8sums),
        _mm256_extracti128_si256::<1>(q8sums),
    );
    _mm_madd_epi16(mins, q8s)
}

/// The 1 × `T` tile of Q4_K: each weight block unpacked once for the `T` tokens.
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
fn tile_q4_k<const T: usize>(w: &[BlockQ4K], ys: [&[BlockQ8K]; T]) -> [f32; T] {
    for y in ys {
        assert_eq!(y.len(), w.len());
    }
    let mut acc = [_mm256_setzero_ps(); T];
    let mut acc_m = [_mm_setzero_ps(); T];
    for (i, x) in w.iter().enumerate() {
        let b = q4k_unpack(x);
        let yt: [&BlockQ8K; T] = std::array::from_fn(|t| &ys[t][i]);
        let sumi: [__m512i; T] = std::array::from_fn(|t| sums4(&b.q, &b.scp, &load_q8k(yt[t])));
        for t in 0..T {
            let yd = yt[t].d.get();
            let d = yd * b.d;
            let dmin = -yd * b.dmin;
            let prod = q4k_mins_prod(b.mins, yt[t]);
            acc_m[t] = _mm_fmadd_ps(_mm_set1_ps(dmin), _mm_cvtepi32_ps(prod), acc_m[t]);
            let s = fold_halves(sumi[t]);
            acc[t] = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(s), acc[t]);
        }
    }
    std::array::from_fn(|t| hsum_f32x8(acc[t]) + hsum_f32x4(acc_m[t]))
}

#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
pub(crate) fn dot4_q4_k(w: &[u8], a: ActRows<'_>, out: &mut [f32; 4]) {
    let w: &[BlockQ4K] = as_blocks(w);
    *out = tile_q4_k(w, rows_n::<4, BlockQ8K>(&a, w.len()));
}

/// The `R` × 8 tile of Q4_K (`R` weight rows, eight tokens) with its per-token float steps
/// done for several tokens at once: the block scales of the eight tokens come from one load
/// of `yd` (scale of block `i` of token `t` at `8 * i + t`, see `interleave8`) and are
/// multiplied by a row's weight scales in one 8-lane product; the super-block sums of tokens
/// `2p`, `2p + 1` share one `zmm` (`fold_pair`), so one conversion and one `fma` serve two
/// tokens; the mins of tokens `4h .. 4h + 4` share one `zmm` (`mins_quad`). Each activation
/// vector is loaded once for the `R` rows, and the tokens' `bsums` pair sums are formed once
/// for them. Each lane still sees exactly the operations of [`tile_q4_k`] (and of the single
/// dot) in the same order, so results are bit-identical.
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
fn tile8_q4_k<const R: usize>(
    w: [&[BlockQ4K]; R],
    ys: [&[BlockQ8K]; 8],
    yd: &[f32],
) -> [[f32; 8]; R] {
    let nb = ys[0].len();
    for y in ys {
        assert_eq!(y.len(), nb);
    }
    for x in w {
        assert_eq!(x.len(), nb);
    }
    assert!(yd.len() >= 8 * nb);
    let mut acc = [[_mm512_setzero_ps(); R]; 4];
    let mut acc_m = [[_mm512_setzero_ps(); 2]; R];
    for i in 0..nb {
        let b: [Q4K; R] = std::array::from_fn(|r| q4k_unpack(&w[r][i]));
        let yt: [&BlockQ8K; 8] = std::array::from_fn(|t| &ys[t][i]);
        let ydv = load_f32x8(&yd[8 * i..8 * i + 8]);
        // `yd * d` and `-yd * dmin` for the eight tokens (the same products as the scalar
        // steps: a float product does not depend on operand order or on which one is negated).
        let dv: [__m512; R] = std::array::from_fn(|r| {
            _mm512_castps256_ps512(_mm256_mul_ps(ydv, _mm256_set1_ps(b[r].d)))
        });
        let dmv: [__m512; R] = std::array::from_fn(|r| {
            _mm512_castps256_ps512(_mm256_mul_ps(ydv, _mm256_set1_ps(-b[r].dmin)))
        });
        for (p, acc) in acc.iter_mut().enumerate() {
            let (t0, t1) = (2 * p, 2 * p + 1);
            let (ya, yb) = (load_q8k(yt[t0]), load_q8k(yt[t1]));
            let idx = pair_index32(t0 as i32, t1 as i32);
            for r in 0..R {
                let s = fold_pair(
                    sums4(&b[r].q, &b[r].scp, &ya),
                    sums4(&b[r].q, &b[r].scp, &yb),
                );
                let d = _mm512_permutexvar_ps(idx, dv[r]);
                acc[r] = _mm512_fmadd_ps(d, _mm512_cvtepi32_ps(s), acc[r]);
            }
        }
        let q8s: [__m512i; 4] = std::array::from_fn(|p| bsum_pairs(yt[2 * p], yt[2 * p + 1]));
        for r in 0..R {
            let mm = mins_dup(b[r].mins);
            for h in 0..2 {
                let prod = mins_quad(mm, q8s[2 * h], q8s[2 * h + 1]);
                let dm = _mm512_permutexvar_ps(quad_index32(4 * h as i32), dmv[r]);
                acc_m[r][h] = _mm512_fmadd_ps(dm, _mm512_cvtepi32_ps(prod), acc_m[r][h]);
            }
        }
    }
    std::array::from_fn(|r| {
        std::array::from_fn(|t| {
            let (lo, hi) = halves_ps(acc[t / 2][r]);
            let a = if t % 2 == 0 { lo } else { hi };
            hsum_f32x8(a) + hsum_f32x4(quarter_ps(acc_m[r][t / 4], t % 4))
        })
    })
}

/// The eight `i16` mins of a block widened to `i32` lanes (so `m_k` in the lower `i16` of
/// lane `k`, zero in the upper), in both halves of a `zmm`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
fn mins_dup(mins: __m128i) -> __m512i {
    _mm512_broadcast_i64x4(_mm256_cvtepu16_epi32(mins))
}

/// The `bsums` pair sums of two tokens, `q8s_k = bsum_2k + bsum_2k+1` wrapped to `i16` (an
/// `i16` add here, `hadd_epi16` in [`q4k_mins_prod`]), in the lower `i16` of lane `k`; the
/// first token in the lower 256 bits, the second in the upper.
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
fn bsum_pairs(lo: &BlockQ8K, hi: &BlockQ8K) -> __m512i {
    let bs = join32(&lo.bsums, &hi.bsums);
    _mm512_add_epi16(bs, _mm512_srli_epi32::<16>(bs))
}

/// [`q4k_mins_prod`] of four tokens (their [`bsum_pairs`] in `a`, `b`): 4 `i32` lanes per
/// token, token `q` in 128-bit lane `q`. Lane `l` is `m_2l * q8s_2l + m_2l+1 * q8s_2l+1`
/// (exact in `i32`), as there.
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
fn mins_quad(mm: __m512i, a: __m512i, b: __m512i) -> __m512i {
    // Lane k: q8s_k (wrapped) in its lower i16, times m_k (the upper i16 times zero).
    let a = _mm512_madd_epi16(a, mm);
    let b = _mm512_madd_epi16(b, mm);
    let even = _mm512_set_epi32(30, 28, 26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6, 4, 2, 0);
    let odd = _mm512_add_epi32(even, _mm512_set1_epi32(1));
    _mm512_add_epi32(
        _mm512_permutex2var_epi32(a, even, b),
        _mm512_permutex2var_epi32(a, odd, b),
    )
}

#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
pub(crate) fn dot8_q4_k(w: &[u8], a: ActRows<'_>, out: &mut [f32; 8]) {
    let w: &[BlockQ4K] = as_blocks(w);
    [*out] = tile8_q4_k([w], rows_n::<8, BlockQ8K>(&a, w.len()), a.sc8);
}

/// Bytes of one super-block of a Q4_K row pair unpacked by [`unpack_pair_q4_k`], as 15
/// 64-byte lines: the eight sub-block vectors `q[g]` (lines 0–7: row 0's 32 values of
/// sub-block `g` as bytes in the lower half, row 1's in the upper), the four scale pairs
/// `scv[p]` (lines 8–11: `sc_2p | sc_2p+1 << 16` of row 0 in the lower eight `i32` lanes, of
/// row 1 in the upper), the offset correction `base` (line 12, `i32` lanes), `d` of each row
/// (line 13: row 0's in the lower eight `f32` lanes, row 1's in the upper), and line 14: the
/// eight mins of row 0 as `i16` (bytes 0–15), of row 1 (16–31), then `-dmin` of row 0 and of
/// row 1 as `f32` (32–39), zeros after.
pub(crate) const Q4K_PAIR_BLOCK_BYTES: usize = 15 * 64;

/// Unpacks two Q4_K rows (`w`, `row_bytes` apart) into [`Q4K_PAIR_BLOCK_BYTES`] per
/// super-block: everything [`tile8_q4_k_pair`] derives from the weights, derived once per
/// row block for all of a task's groups of eight tokens.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
pub(crate) fn unpack_pair_q4_k(w: &[u8], row_bytes: usize, out: &mut [u8]) {
    let w: [&[BlockQ4K]; 2] = [
        as_blocks(&w[..row_bytes]),
        as_blocks(&w[row_bytes..2 * row_bytes]),
    ];
    let nb = w[0].len();
    assert_eq!(w[1].len(), nb);
    let out = &mut out[..nb * Q4K_PAIR_BLOCK_BYTES];
    let z = _mm512_setzero_si512();
    let m4 = _mm512_set1_epi8(0x0F);
    // The activation offset, as unsigned bytes.
    let c128 = _mm512_set1_epi8(i8::MIN);
    for (i, o) in out.chunks_exact_mut(Q4K_PAIR_BLOCK_BYTES).enumerate() {
        // The pair two pairs on (the rows are contiguous): the layout is a pass over rows
        // coming from memory with no arithmetic to hide the wait behind.
        prefetch_group_ahead(w[0].as_ptr().cast(), 2, nb, size_of::<BlockQ4K>(), i);
        let x = [&w[0][i], &w[1][i]];
        let mut q = [z; 8];
        for j in 0..4 {
            let b = join32(&x[0].qs[32 * j..32 * j + 32], &x[1].qs[32 * j..32 * j + 32]);
            q[2 * j] = _mm512_and_si512(b, m4);
            q[2 * j + 1] = _mm512_and_si512(_mm512_srli_epi16::<4>(b), m4);
        }
        let (sc0, m0) = q4k_scales_mins(&x[0].scales);
        let (sc1, m1) = q4k_scales_mins(&x[1].scales);
        // As `i16`, the eight scales of a row are four `i32` scale pairs `sc_2p | sc_2p+1 << 16`.
        let widen = |b: [u8; 8]| _mm_cvtepu8_epi16(_mm_set_epi64x(0, i64::from_le_bytes(b)));
        let pairs = _mm512_inserti32x4::<1>(_mm512_castsi128_si512(widen(sc0)), widen(sc1));
        let scv: [__m512i; 4] = std::array::from_fn(|p| {
            _mm512_permutexvar_epi32(pair_index32(p as i32, 4 + p as i32), pairs)
        });
        // What the offset adds to each lane (all activations 128), subtracted by starting
        // every token there.
        let mut off = z;
        for (p, scv) in scv.iter().enumerate() {
            let hi = _mm512_dpbusd_epi32(z, c128, q[2 * p + 1]);
            let lo = _mm512_dpbusd_epi32(_mm512_slli_epi32::<16>(hi), c128, q[2 * p]);
            off = dpwssd(off, lo, *scv);
        }
        let base = _mm512_sub_epi32(z, off);
        let dm = [
            f16x2_to_f32(x[0].d, x[0].dmin),
            f16x2_to_f32(x[1].d, x[1].dmin),
        ];
        let dv = _mm512_mask_blend_ps(
            0xFF00,
            _mm512_set1_ps(_mm_cvtss_f32(dm[0])),
            _mm512_set1_ps(_mm_cvtss_f32(dm[1])),
        );
        let neg_dmin = |dm: __m128| -_mm_cvtss_f32(_mm_movehdup_ps(dm));
        let mut tail = [0u8; 64];
        for (r, m) in [m0, m1].into_iter().enumerate() {
            for (k, &v) in m.iter().enumerate() {
                let at = 16 * r + 2 * k;
                tail[at..at + 2].copy_from_slice(&i16::from(v).to_le_bytes());
            }
        }
        tail[32..36].copy_from_slice(&neg_dmin(dm[0]).to_le_bytes());
        tail[36..40].copy_from_slice(&neg_dmin(dm[1]).to_le_bytes());
        let (vecs, rest) = o.split_at_mut(14 * 64);
        let v: [__m512i; 14] = std::array::from_fn(|k| match k {
            0..8 => q[k],
            8..12 => scv[k - 8],
            12 => base,
            _ => _mm512_castps_si512(dv),
        });
        for (k, line) in vecs.chunks_exact_mut(64).enumerate() {
            store512(line, v[k]);
        }
        rest.copy_from_slice(&tail);
    }
}

/// The 2 × 8 tile of Q4_K with the two rows side by side in every `zmm` (row 0 in the lower
/// 256 bits, row 1 in the upper), so that one `vpdpbusd` serves two (row, token) pairs with
/// no folding of halves afterwards:
///
/// * per 32-value sub-block `g`, the weight `zmm` holds row 0's 32 values and row 1's, and
///   the activation `zmm` the token's 32 values in both halves (one broadcast load); lane `l`
///   of each half is then the quad sum of bytes `4l .. 4l + 4` of that row's sub-block, the
///   same lane as AVX2's;
/// * the activations are read offset to unsigned bytes, `y + 128` (`ActRows::lay8`, made
///   once per batch), and the weights are the signed operand of `vpdpbusd`: every quad sum
///   is then non-negative and below `4 · 15 · 255 < 2^15`, so the sum of sub-block `2p + 1`
///   shifted up 16 bits is the accumulator the sum of sub-block `2p` is formed on, which
///   leaves the two as the `i16` halves of one `i32` lane with no borrow; one `vpdpwssd` by
///   the scale pair `sc_2p | sc_{2p+1} << 16` (the same for all eight lanes of a row) adds
///   both scaled sums to the lane;
/// * the offset adds `128 · sc_g · (sum of the lane's four weights of g)` per sub-block, a
///   per-lane constant of the two rows' super-block, formed once for the eight tokens the
///   same way (activations all 128) and subtracted by starting each token's lane there;
/// * the four scaled pairs of a super-block are summed per lane (exact integer additions in
///   another order), converted and `fma`-accumulated with `yd · d` of each row; the mins
///   of four tokens share a `zmm`: their `bsums` pair sums come from the same per-batch
///   layout (one load), one `vpmaddwd` by the row's mins gives the four tokens' 4-lane
///   products, as in [`tile8_q4_k`].
///
/// Each (row, token) lane thus holds AVX2's exact 8-lane super-block sum and sees the same
/// float operations in the same order as [`tile_q4_k`]: bit-identical to the single dot.
/// This is that tile over a row pair unpacked by [`unpack_pair_q4_k`] (`wu`, whole
/// super-blocks): per super-block it only loads the pair's vectors and multiplies.
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
fn tile8_q4_k_pair(wu: &[u8], yd: &[f32], yu: &[u8]) -> [[f32; 8]; 2] {
    assert!(wu.len().is_multiple_of(Q4K_PAIR_BLOCK_BYTES));
    let nb = wu.len() / Q4K_PAIR_BLOCK_BYTES;
    assert!(yd.len() >= 8 * nb);
    assert!(yu.len() >= nb * Q8K8_BLOCK_BYTES);
    let z = _mm512_setzero_si512();
    // Token t: row 0's eight float lanes in the lower half, row 1's in the upper.
    let mut acc = [_mm512_setzero_ps(); 8];
    let mut acc_m = [[_mm512_setzero_ps(); 2]; 2];
    for (i, b) in wu.chunks_exact(Q4K_PAIR_BLOCK_BYTES).enumerate() {
        let yb = &yu[i * Q8K8_BLOCK_BYTES..(i + 1) * Q8K8_BLOCK_BYTES];
        let q: [__m512i; 8] = std::array::from_fn(|g| load512(&b[64 * g..64 * g + 64]));
        let scv: [__m512i; 4] = std::array::from_fn(|p| load512(&b[512 + 64 * p..576 + 64 * p]));
        let base = load512(&b[768..832]);
        let dv = _mm512_castsi512_ps(load512(&b[832..896]));
        // The scaled sums of unsigned activations, starting from `base`: per sub-block
        // pair, the odd sub-block's quad sums shifted into the upper `i16` halves, the even
        // one's added below them, both scaled by one `vpdpwssd`.
        let ydi = &yd[8 * i..8 * i + 8];
        let step = |t: usize, acc: &mut __m512| {
            let y = &yb[256 * t..256 * t + 256];
            let mut s = base;
            for (p, scv) in scv.iter().enumerate() {
                let (g0, g1) = (2 * p, 2 * p + 1);
                let hi = _mm512_dpbusd_epi32(z, broadcast32(&y[32 * g1..32 * g1 + 32]), q[g1]);
                let lo = _mm512_dpbusd_epi32(
                    _mm512_slli_epi32::<16>(hi),
                    broadcast32(&y[32 * g0..32 * g0 + 32]),
                    q[g0],
                );
                s = dpwssd(s, lo, *scv);
            }
            // `yd * d` of each row (a float product does not depend on operand order).
            let d = _mm512_mul_ps(dv, _mm512_set1_ps(ydi[t]));
            *acc = _mm512_fmadd_ps(d, _mm512_cvtepi32_ps(s), *acc);
        };
        // Spelled out so that the eight accumulators stay in registers.
        let [a0, a1, a2, a3, a4, a5, a6, a7] = &mut acc;
        step(0, a0);
        step(1, a1);
        step(2, a2);
        step(3, a3);
        step(4, a4);
        step(5, a5);
        step(6, a6);
        step(7, a7);
        let ydv = load_f32x8(ydi);
        let tail = &b[896..960];
        for (r, acc_m) in acc_m.iter_mut().enumerate() {
            // The row's eight mins as `i16`, in every 128-bit lane.
            let mm = _mm512_broadcast_i32x4(load128(&tail[16 * r..16 * r + 16]));
            let neg_dmin = f32::from_le_bytes([
                tail[32 + 4 * r],
                tail[33 + 4 * r],
                tail[34 + 4 * r],
                tail[35 + 4 * r],
            ]);
            let dmv = _mm512_castps256_ps512(_mm256_mul_ps(ydv, _mm256_set1_ps(neg_dmin)));
            for (h, acc_m) in acc_m.iter_mut().enumerate() {
                // Tokens 4h .. 4h + 4, one per 128-bit lane: lane k of a token is
                // `m_2k * q8s_2k + m_2k+1 * q8s_2k+1` (exact in `i32`), as `q4k_mins_prod`.
                let q8s = load512(&yb[2048 + 64 * h..2048 + 64 * h + 64]);
                let prod = _mm512_madd_epi16(q8s, mm);
                let dmq = _mm512_permutexvar_ps(quad_index32(4 * h as i32), dmv);
                *acc_m = _mm512_fmadd_ps(dmq, _mm512_cvtepi32_ps(prod), *acc_m);
            }
        }
    }
    std::array::from_fn(|r| {
        std::array::from_fn(|t| {
            let (lo, hi) = halves_ps(acc[t]);
            hsum_f32x8(if r == 0 { lo } else { hi })
                + hsum_f32x4(quarter_ps(acc_m[r][t / 4], t % 4))
        })
    })
}

/// The 2 × 8 Q4_K tile over a row pair unpacked by [`unpack_pair_q4_k`].
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
pub(crate) fn dot8r2u_q4_k(wu: &[u8], a: ActRows<'_>, out: &mut [[f32; 8]; 2]) {
    let nb = wu.len() / Q4K_PAIR_BLOCK_BYTES;
    *out = tile8_q4_k_pair(wu, &a.sc8[..8 * nb], a.lay8);
}

// ---------------------------------------------------------------- Q6_K × Q8_K

/// A Q6_K block unpacked for the integer sums: its 6-bit values (0..64, unbiased) as four
/// `zmm` of 64, in activation order, and their `i16` scale pairs for [`sums4`] (one scale per
/// 16 values, each filling a 128-bit lane of its `zmm`), plus the scales as 16 `i16` lanes
/// for the bias correction.
struct Q6K {
    q: [__m512i; 4],
    scp: [__m512i; 2],
    scales16: __m256i,
    d: f32,
}

#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
fn q6k_unpack(x: &BlockQ6K) -> Q6K {
    let m15 = _mm512_set1_epi8(15);
    // Bits 4, 5 of the values of groups (0, 1) and (2, 3) of a half come from bit pairs
    // (0-1, 2-3) and (4-5, 6-7) of the same `qh` bytes; each half of the `zmm` masks and
    // shifts its own pair. (16-bit shifts: the masked bits never cross a byte.)
    let mask_a = _mm512_inserti64x4::<1>(_mm512_set1_epi8(3), _mm256_set1_epi8(12));
    let mask_b = _mm512_inserti64x4::<1>(_mm512_set1_epi8(48), _mm256_set1_epi8(-64));
    let shl_a = _mm512_inserti64x4::<1>(_mm512_set1_epi16(4), _mm256_set1_epi16(2));
    let shr_b = _mm512_inserti64x4::<1>(_mm512_setzero_si512(), _mm256_set1_epi16(2));
    let mut q = [_mm512_setzero_si512(); 4];
    for h in 0..2 {
        let b12 = load512(&x.ql[64 * h..64 * h + 64]);
        let bh = broadcast32(&x.qh[32 * h..32 * h + 32]);
        let ha = _mm512_sllv_epi16(_mm512_and_si512(bh, mask_a), shl_a);
        let hb = _mm512_srlv_epi16(_mm512_and_si512(bh, mask_b), shr_b);
        q[2 * h] = _mm512_or_si512(_mm512_and_si512(b12, m15), ha);
        q[2 * h + 1] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16::<4>(b12), m15), hb);
    }
    let scales16 = _mm256_cvtepi8_epi16(load128(&x.scales));
    let s = _mm512_castsi256_si512(scales16);
    Q6K {
        q,
        scp: std::array::from_fn(|p| {
            let sc = |g: i16| _mm512_permutexvar_epi16(quad_index16(4 * g), s);
            scale_pairs(sc(2 * p as i16), sc(2 * p as i16 + 1))
        }),
        scales16,
        d: f16_to_f32(x.d),
    }
}

/// The per-lane bias correction `32 * sum(sc * bsum)` (as AVX2).
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
fn q6k_bias(scales16: __m256i, y: &BlockQ8K) -> __m256i {
    _mm256_slli_epi32::<5>(_mm256_madd_epi16(load256(&y.bsums), scales16))
}

/// The 1 × `T` tile of Q6_K: each weight block unpacked once for the `T` tokens.
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
fn tile_q6_k<const T: usize>(w: &[BlockQ6K], ys: [&[BlockQ8K]; T]) -> [f32; T] {
    for y in ys {
        assert_eq!(y.len(), w.len());
    }
    let mut acc = [_mm256_setzero_ps(); T];
    for (i, x) in w.iter().enumerate() {
        let b = q6k_unpack(x);
        let yt: [&BlockQ8K; T] = std::array::from_fn(|t| &ys[t][i]);
        let sumi: [__m512i; T] = std::array::from_fn(|t| sums4(&b.q, &b.scp, &load_q8k(yt[t])));
        for t in 0..T {
            let s = _mm256_sub_epi32(fold_halves(sumi[t]), q6k_bias(b.scales16, yt[t]));
            let d = yt[t].d.get() * b.d;
            acc[t] = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(s), acc[t]);
        }
    }
    std::array::from_fn(|t| hsum_f32x8(acc[t]))
}

#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
pub(crate) fn dot_q6_k(w: &[u8], a: &[u8]) -> f32 {
    tile_q6_k::<1>(as_blocks(w), [as_blocks(a)])[0]
}

#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
pub(crate) fn dot4_q6_k(w: &[u8], a: ActRows<'_>, out: &mut [f32; 4]) {
    let w: &[BlockQ6K] = as_blocks(w);
    *out = tile_q6_k(w, rows_n::<4, BlockQ8K>(&a, w.len()));
}

/// The `R` × 8 tile of Q6_K with the float steps of tokens `2p`, `2p + 1` in one `zmm`, the
/// eight tokens' scale products of a row in one 8-lane product, and each activation vector
/// loaded once for the `R` rows, as [`tile8_q4_k`]; each lane sees the operations of
/// [`tile_q6_k`] in the same order (bit-identical).
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
fn tile8_q6_k<const R: usize>(
    w: [&[BlockQ6K]; R],
    ys: [&[BlockQ8K]; 8],
    yd: &[f32],
) -> [[f32; 8]; R] {
    let nb = ys[0].len();
    for y in ys {
        assert_eq!(y.len(), nb);
    }
    for x in w {
        assert_eq!(x.len(), nb);
    }
    assert!(yd.len() >= 8 * nb);
    let mut acc = [[_mm512_setzero_ps(); R]; 4];
    for i in 0..nb {
        let b: [Q6K; R] = std::array::from_fn(|r| q6k_unpack(&w[r][i]));
        let yt: [&BlockQ8K; 8] = std::array::from_fn(|t| &ys[t][i]);
        let ydv = load_f32x8(&yd[8 * i..8 * i + 8]);
        let dv: [__m512; R] = std::array::from_fn(|r| {
            _mm512_castps256_ps512(_mm256_mul_ps(ydv, _mm256_set1_ps(b[r].d)))
        });
        let sc: [__m512i; R] = std::array::from_fn(|r| _mm512_broadcast_i64x4(b[r].scales16));
        for (p, acc) in acc.iter_mut().enumerate() {
            let (t0, t1) = (2 * p, 2 * p + 1);
            let (ya, yb) = (load_q8k(yt[t0]), load_q8k(yt[t1]));
            let bs = join32(&yt[t0].bsums, &yt[t1].bsums);
            let idx = pair_index32(t0 as i32, t1 as i32);
            for r in 0..R {
                let bias = _mm512_slli_epi32::<5>(_mm512_madd_epi16(bs, sc[r]));
                let s = fold_pair(
                    sums4(&b[r].q, &b[r].scp, &ya),
                    sums4(&b[r].q, &b[r].scp, &yb),
                );
                let s = _mm512_sub_epi32(s, bias);
                let d = _mm512_permutexvar_ps(idx, dv[r]);
                acc[r] = _mm512_fmadd_ps(d, _mm512_cvtepi32_ps(s), acc[r]);
            }
        }
    }
    std::array::from_fn(|r| {
        std::array::from_fn(|t| {
            let (lo, hi) = halves_ps(acc[t / 2][r]);
            hsum_f32x8(if t % 2 == 0 { lo } else { hi })
        })
    })
}

#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
pub(crate) fn dot8_q6_k(w: &[u8], a: ActRows<'_>, out: &mut [f32; 8]) {
    let w: &[BlockQ6K] = as_blocks(w);
    [*out] = tile8_q6_k([w], rows_n::<8, BlockQ8K>(&a, w.len()), a.sc8);
}

#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
pub(crate) fn dot8r2_q6_k(w: &[u8], row_bytes: usize, a: ActRows<'_>, out: &mut [[f32; 8]; 2]) {
    let w: [&[BlockQ6K]; 2] = [
        as_blocks(&w[..row_bytes]),
        as_blocks(&w[row_bytes..2 * row_bytes]),
    ];
    *out = tile8_q6_k(w, rows_n::<8, BlockQ8K>(&a, w[0].len()), a.sc8);
}

// ---------------------------------------------------------------- Q5_K × Q8_K

/// A Q5_K block unpacked as [`Q4K`]'s (values 0..32: the fifth bit of sub-block `g` is bit
/// `g` of `qh`).
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
fn q5k_unpack(x: &BlockQ5K) -> Q4K {
    let (sc, m) = q4k_scales_mins(&x.scales);
    let dm = f16x2_to_f32(x.d, x.dmin);
    let sc16 = _mm512_broadcast_i32x4(_mm_cvtepu8_epi16(_mm_set_epi64x(0, i64::from_le_bytes(sc))));
    let m4 = _mm512_set1_epi8(0x0F);
    let one = _mm512_set1_epi8(1);
    let hbits = broadcast32(&x.qh);
    Q4K {
        q: std::array::from_fn(|j| {
            let bits = broadcast32(&x.qs[32 * j..32 * j + 32]);
            let lo = _mm512_and_si512(_mm512_mask_srli_epi16::<4>(bits, HI_HALF16, bits), m4);
            // Bit `2j` of `qh` for the lower half, bit `2j + 1` for the upper (16-bit shifts:
            // bit 0 of each byte is then that byte's own bit).
            let n = pair_index16(2 * j as i16, 2 * j as i16 + 1);
            let hi = _mm512_slli_epi16::<4>(_mm512_and_si512(_mm512_srlv_epi16(hbits, n), one));
            _mm512_or_si512(lo, hi)
        }),
        scp: std::array::from_fn(|p| {
            let sc = |j: i16| _mm512_permutexvar_epi16(pair_index16(2 * j, 2 * j + 1), sc16);
            scale_pairs(sc(2 * p as i16), sc(2 * p as i16 + 1))
        }),
        d: _mm_cvtss_f32(dm),
        dmin: _mm_cvtss_f32(_mm_movehdup_ps(dm)),
        mins: _mm_cvtepu8_epi16(_mm_set_epi64x(0, i64::from_le_bytes(m))),
    }
}

/// `sum_j m_j * (bsum_2j + bsum_2j+1)` (pair sums wrapped to `i16` by `hadd_epi16`), exact.
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
fn q5k_mins(mins: __m128i, y: &BlockQ8K) -> i32 {
    let prod = q4k_mins_prod(mins, y);
    let s = _mm_add_epi32(prod, _mm_unpackhi_epi64(prod, prod));
    _mm_cvtsi128_si32(_mm_add_epi32(s, _mm_shuffle_epi32::<1>(s)))
}

/// The 1 × `T` tile of Q5_K: each weight block unpacked once for the `T` tokens; the mins in
/// a scalar fused chain per token, as AVX2.
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
fn tile_q5_k<const T: usize>(w: &[BlockQ5K], ys: [&[BlockQ8K]; T]) -> [f32; T] {
    for y in ys {
        assert_eq!(y.len(), w.len());
    }
    let mut acc = [_mm256_setzero_ps(); T];
    let mut summs = [0.0f32; T];
    for (i, x) in w.iter().enumerate() {
        let b = q5k_unpack(x);
        let yt: [&BlockQ8K; T] = std::array::from_fn(|t| &ys[t][i]);
        let sumi: [__m512i; T] = std::array::from_fn(|t| sums4(&b.q, &b.scp, &load_q8k(yt[t])));
        for t in 0..T {
            let yd = yt[t].d.get();
            let d = yd * b.d;
            let dmin = -yd * b.dmin;
            summs[t] = dmin.mul_add(q5k_mins(b.mins, yt[t]) as f32, summs[t]);
            let s = fold_halves(sumi[t]);
            acc[t] = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(s), acc[t]);
        }
    }
    std::array::from_fn(|t| hsum_f32x8(acc[t]) + summs[t])
}

#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
pub(crate) fn dot4_q5_k(w: &[u8], a: ActRows<'_>, out: &mut [f32; 4]) {
    let w: &[BlockQ5K] = as_blocks(w);
    *out = tile_q5_k(w, rows_n::<4, BlockQ8K>(&a, w.len()));
}

#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
pub(crate) fn dot8_q5_k(w: &[u8], a: ActRows<'_>, out: &mut [f32; 8]) {
    let w: &[BlockQ5K] = as_blocks(w);
    *out = tile_q5_k(w, rows_n::<8, BlockQ8K>(&a, w.len()));
}

dotr4_by_dot!(dotr4_q6_k, dot_q6_k);
