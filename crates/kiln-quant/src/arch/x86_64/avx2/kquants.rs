//! AVX2 kernels of the K-quants (Q2_K, Q3_K, Q4_K, Q5_K, Q6_K) with `Q8_K` activations. Each
//! dot performs the operations of ggml's AVX2 `ggml_vec_dot_<type>_q8_K` in the same order
//! (per super-block an exact 8-lane integer sum, converted to float and `fma`-accumulated
//! with the super-block scale; Q2_K's mins in the same accumulator first, Q4_K's in their
//! own, Q5_K's in a scalar chain), so they equal the scalar oracle in `scalar::kquants` bit
//! for bit. Where ggml broadcasts a sub-block scale with a byte shuffle we use `set1`: the
//! integer lanes are identical.
//!
//! Q4_K and Q6_K (the hot types) have GEMV tiles, four- and eight-token GEMM micro-kernels and
//! vectorized dequantization. Q2_K, Q3_K and Q5_K have single dots, repeated for the GEMV
//! (and the GEMM, except Q5_K's micro-kernel that unpacks each block once for four tokens);
//! they dequantize with the scalar kernel.

use std::arch::x86_64::*;

use super::util::*;
use crate::blocks::{
    BlockQ2K, BlockQ3K, BlockQ4K, BlockQ5K, BlockQ6K, BlockQ8K, QK_K, as_blocks, q3k_scales,
    q4k_scales_mins,
};
use crate::table::{ActRows, Q8K8_BLOCK_BYTES};

/// 16 `i16` lanes: 8 of `lo`, then 8 of `hi` (the scales of the two 16-element halves of a
/// 32-element group).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn scale_pair(lo: i16, hi: i16) -> __m256i {
    _mm256_set_m128i(_mm_set1_epi16(hi), _mm_set1_epi16(lo))
}

/// `v >> n` in each 16-bit lane, `n` at run time.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn srl16(v: __m256i, n: usize) -> __m256i {
    _mm256_srl_epi16(v, _mm_cvtsi32_si128(n as i32))
}

/// The 32 two-bit values of group `k` (0..4) in 32 bytes of Q2_K/Q3_K `qs`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn two_bits(bits: __m256i, k: usize) -> __m256i {
    _mm256_and_si256(srl16(bits, 2 * k), _mm256_set1_epi8(3))
}

// ---------------------------------------------------------------- Q2_K × Q8_K

#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) fn dot_q2_k(w: &[u8], a: &[u8]) -> f32 {
    let (w, a): (&[BlockQ2K], &[BlockQ8K]) = (as_blocks(w), as_blocks(a));
    assert_eq!(w.len(), a.len());
    let m4 = _mm_set1_epi8(0x0F);
    let mut acc = _mm256_setzero_ps();
    for (x, y) in w.iter().zip(a) {
        let dm = f16x2_to_f32(x.d, x.dmin);
        let yd = y.d.get();
        let d = yd * _mm_cvtss_f32(dm);
        let dmin = -yd * _mm_cvtss_f32(_mm_movehdup_ps(dm));
        let packed = load_bytes16(&x.scales);
        let mins = _mm256_cvtepi8_epi16(_mm_and_si128(_mm_srli_epi16::<4>(packed), m4));
        let prod = _mm256_madd_epi16(mins, load_bytes32(&y.bsums));
        acc = _mm256_fmadd_ps(_mm256_set1_ps(dmin), _mm256_cvtepi32_ps(prod), acc);
        let sc = x.scales.map(|s| (s & 0x0F) as i16);
        let mut sumi = _mm256_setzero_si256();
        for h in 0..2 {
            let bits = load_bytes32(&x.qs[32 * h..32 * h + 32]);
            for k in 0..4 {
                let g = 4 * h + k;
                let q8 = load_bytes32(&y.qs[32 * g..32 * g + 32]);
                let p16 = _mm256_maddubs_epi16(two_bits(bits, k), q8);
                let p = _mm256_madd_epi16(scale_pair(sc[2 * g], sc[2 * g + 1]), p16);
                sumi = _mm256_add_epi32(sumi, p);
            }
        }
        acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc);
    }
    hsum_f32x8(acc)
}

// ---------------------------------------------------------------- Q3_K × Q8_K

#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) fn dot_q3_k(w: &[u8], a: &[u8]) -> f32 {
    let (w, a): (&[BlockQ3K], &[BlockQ8K]) = (as_blocks(w), as_blocks(a));
    assert_eq!(w.len(), a.len());
    let zero = _mm256_setzero_si256();
    let four = _mm256_set1_epi8(4);
    let mut acc = _mm256_setzero_ps();
    for (x, y) in w.iter().zip(a) {
        let d = y.d.get() * f16_to_f32(x.d);
        let sc = q3k_scales(&x.scales).map(|s| s as i16);
        let hbits = load_bytes32(&x.hmask);
        let mut sumi = _mm256_setzero_si256();
        for h in 0..2 {
            let bits = load_bytes32(&x.qs[32 * h..32 * h + 32]);
            for k in 0..4 {
                let g = 4 * h + k;
                let q8 = load_bytes32(&y.qs[32 * g..32 * g + 32]);
                // 4 where the high bit is clear: the value is `low - 4` there.
                let bit = _mm256_set1_epi8((1u8 << g) as i8);
                let clear = _mm256_cmpeq_epi8(_mm256_and_si256(hbits, bit), zero);
                let sub = _mm256_and_si256(clear, four);
                let p16 = _mm256_sub_epi16(
                    _mm256_maddubs_epi16(two_bits(bits, k), q8),
                    _mm256_maddubs_epi16(sub, q8),
                );
                let p = _mm256_madd_epi16(scale_pair(sc[2 * g], sc[2 * g + 1]), p16);
                sumi = _mm256_add_epi32(sumi, p);
            }
        }
        acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc);
    }
    hsum_f32x8(acc)
}

// ---------------------------------------------------------------- Q4_K × Q8_K

/// Per-block pieces of a Q4_K block that do not depend on the activations.
pub(crate) struct Q4KBlock {
    pub(crate) d: f32,
    pub(crate) dmin: f32,
    pub(crate) sc: [u8; 8],
    /// The 8 mins as i16 lanes.
    pub(crate) mins: __m128i,
}

#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) fn q4k_block(x: &BlockQ4K) -> Q4KBlock {
    let (sc, m) = q4k_scales_mins(&x.scales);
    let dm = f16x2_to_f32(x.d, x.dmin);
    let mins = _mm_cvtepu8_epi16(_mm_set_epi64x(0, i64::from_le_bytes(m)));
    Q4KBlock {
        d: _mm_cvtss_f32(dm),
        dmin: _mm_cvtss_f32(_mm_movehdup_ps(dm)),
        sc,
        mins,
    }
}

/// `sum(m_j * sum(q8 in sub-block j))` as 4 i32 lanes (ggml's `prod`), from `bsums`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) fn q4k_mins_prod(mins: __m128i, y: &BlockQ8K) -> __m128i {
    let q8sums = load_bytes32(&y.bsums);
    let q8s = _mm_hadd_epi16(
        _mm256_castsi256_si128(q8sums),
        _mm256_extracti128_si256::<1>(q8sums),
    );
    _mm_madd_epi16(mins, q8s)
}

/// `sum(sc_j * q4 * q8)` for sub-blocks `2j`, `2j + 1` (32 bytes of `qs`) as 8 i32 lanes.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn q4k_pair(
    q4l: __m256i,
    q4h: __m256i,
    sl: __m256i,
    sh: __m256i,
    y: &BlockQ8K,
    j: usize,
) -> __m256i {
    let q8l = load_bytes32(&y.qs[64 * j..64 * j + 32]);
    let q8h = load_bytes32(&y.qs[64 * j + 32..64 * j + 64]);
    let pl = _mm256_madd_epi16(sl, _mm256_maddubs_epi16(q4l, q8l));
    let ph = _mm256_madd_epi16(sh, _mm256_maddubs_epi16(q4h, q8h));
    _mm256_add_epi32(pl, ph)
}

#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) fn dot_q4_k(w: &[u8], a: &[u8]) -> f32 {
    let (w, a): (&[BlockQ4K], &[BlockQ8K]) = (as_blocks(w), as_blocks(a));
    assert_eq!(w.len(), a.len());
    let mut acc = _mm256_setzero_ps();
    let mut acc_m = _mm_setzero_ps();
    for (x, y) in w.iter().zip(a) {
        let b = q4k_block(x);
        let yd = y.d.get();
        let d = yd * b.d;
        let dmin = -yd * b.dmin;
        let prod = q4k_mins_prod(b.mins, y);
        acc_m = _mm_fmadd_ps(_mm_set1_ps(dmin), _mm_cvtepi32_ps(prod), acc_m);
        let [sumi] = q4k_sums(x, &b, [y]);
        acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc);
    }
    hsum_f32x8(acc) + hsum_f32x4(acc_m)
}

/// The integer sums of one Q4_K block with `T` tokens' blocks: per token the `sumi` of
/// [`dot_q4_k`] (the same lanes), the block's values unpacked once for all `T`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn q4k_sums<const T: usize>(x: &BlockQ4K, b: &Q4KBlock, yt: [&BlockQ8K; T]) -> [__m256i; T] {
    let m4 = _mm256_set1_epi8(0x0F);
    let mut sumi = [_mm256_setzero_si256(); T];
    for j in 0..4 {
        let bits = load_bytes32(&x.qs[32 * j..32 * j + 32]);
        let q4l = _mm256_and_si256(bits, m4);
        let q4h = _mm256_and_si256(_mm256_srli_epi16::<4>(bits), m4);
        let sl = _mm256_set1_epi16(b.sc[2 * j] as i16);
        let sh = _mm256_set1_epi16(b.sc[2 * j + 1] as i16);
        for t in 0..T {
            sumi[t] = _mm256_add_epi32(sumi[t], q4k_pair(q4l, q4h, sl, sh, yt[t], j));
        }
    }
    sumi
}

/// The 1 × `T` GEMM tile of Q4_K: each weight block unpacked once for `T` tokens, each
/// (row, token) pair computed exactly as [`dot_q4_k`].
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn tile_q4_k<const T: usize>(w: &[BlockQ4K], ys: [&[BlockQ8K]; T]) -> [f32; T] {
    let mut acc = [_mm256_setzero_ps(); T];
    let mut acc_m = [_mm_setzero_ps(); T];
    for (i, x) in w.iter().enumerate() {
        let b = q4k_block(x);
        let yt: [&BlockQ8K; T] = std::array::from_fn(|t| &ys[t][i]);
        let sumi = q4k_sums(x, &b, yt);
        for t in 0..T {
            let yd = yt[t].d.get();
            let d = yd * b.d;
            let dmin = -yd * b.dmin;
            let prod = q4k_mins_prod(b.mins, yt[t]);
            acc_m[t] = _mm_fmadd_ps(_mm_set1_ps(dmin), _mm_cvtepi32_ps(prod), acc_m[t]);
            acc[t] = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi[t]), acc[t]);
        }
    }
    std::array::from_fn(|t| hsum_f32x8(acc[t]) + hsum_f32x4(acc_m[t]))
}

/// The `R` × 1 GEMV tile of Q4_K (`R` consecutive weight rows, one token): each activation
/// block is loaded and its `bsums` folded once for the `R` rows, the sub-block scales come
/// from one byte shuffle each instead of a scalar broadcast, and the row group after next is
/// prefetched a slice per block step (`prefetch_group_ahead`: `R` interleaved row streams
/// are not followed by the hardware prefetchers). Each row performs exactly the operations
/// of [`dot_q4_k`] (the same integer lanes, the same float steps in the same order), so it
/// returns the same bits.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn rows_q4_k<const R: usize>(w: [&[BlockQ4K]; R], y: &[BlockQ8K]) -> [f32; R] {
    let nb = y.len();
    for r in &w {
        assert_eq!(r.len(), nb);
    }
    let m4 = _mm256_set1_epi8(0x0F);
    // Byte-shuffle masks that broadcast `i16` lane `s` of a 128-bit lane to all eight.
    let lane = |s: i8| _mm256_set1_epi16(i16::from_le_bytes([(2 * s) as u8, (2 * s + 1) as u8]));
    let pick: [__m256i; 8] = std::array::from_fn(|s| lane(s as i8));
    let mut acc = [_mm256_setzero_ps(); R];
    let mut acc_m = [_mm_setzero_ps(); R];
    let base = w[0].as_ptr().cast::<u8>();
    for i in 0..nb {
        if R > 1 {
            prefetch_group_ahead(base, R, nb, size_of::<BlockQ4K>(), i);
        }
        let yb = &y[i];
        let yd = yb.d.get();
        let q8sums = load_bytes32(&yb.bsums);
        let q8s = _mm_hadd_epi16(
            _mm256_castsi256_si128(q8sums),
            _mm256_extracti128_si256::<1>(q8sums),
        );
        for r in 0..R {
            let x = &w[r][i];
            let b = q4k_block(x);
            let d = yd * b.d;
            let dmin = -yd * b.dmin;
            let prod = _mm_madd_epi16(b.mins, q8s);
            acc_m[r] = _mm_fmadd_ps(_mm_set1_ps(dmin), _mm_cvtepi32_ps(prod), acc_m[r]);
            // The eight scales as `i16` lanes in both 128-bit lanes.
            let sc16 = _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(_mm_set_epi64x(
                0,
                i64::from_le_bytes(b.sc),
            )));
            let mut sumi = _mm256_setzero_si256();
            for j in 0..4 {
                let bits = load_bytes32(&x.qs[32 * j..32 * j + 32]);
                let q4l = _mm256_and_si256(bits, m4);
                let q4h = _mm256_and_si256(_mm256_srli_epi16::<4>(bits), m4);
                let sl = _mm256_shuffle_epi8(sc16, pick[2 * j]);
                let sh = _mm256_shuffle_epi8(sc16, pick[2 * j + 1]);
                sumi = _mm256_add_epi32(sumi, q4k_pair(q4l, q4h, sl, sh, yb, j));
            }
            acc[r] = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc[r]);
        }
    }
    std::array::from_fn(|r| hsum_f32x8(acc[r]) + hsum_f32x4(acc_m[r]))
}

#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) fn dotr4_q4_k(w: &[u8], row_bytes: usize, a: &[u8], out: &mut [f32; 4]) {
    *out = rows_q4_k(weight_rows::<4, BlockQ4K>(w, row_bytes), as_blocks(a));
}

#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) fn dot4_q4_k(w: &[u8], a: ActRows<'_>, out: &mut [f32; 4]) {
    let w: &[BlockQ4K] = as_blocks(w);
    *out = tile_q4_k(w, rows_n::<4, BlockQ8K>(&a, w.len()));
}

#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) fn dot2_q4_k(w: &[u8], a: ActRows<'_>, out: &mut [f32; 4]) {
    let w: &[BlockQ4K] = as_blocks(w);
    out[..2].copy_from_slice(&tile_q4_k(w, rows_n::<2, BlockQ8K>(&a, w.len())));
}

#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) fn dot3_q4_k(w: &[u8], a: ActRows<'_>, out: &mut [f32; 4]) {
    let w: &[BlockQ4K] = as_blocks(w);
    out[..3].copy_from_slice(&tile_q4_k(w, rows_n::<3, BlockQ8K>(&a, w.len())));
}

/// The eight-token Q4_K tile when the driver gives the tokens' scales interleaved (`sc8`)
/// and the `lay8` layout (its `bsums` pair sums, [`crate::table::interleave8_q8k`]): the
/// per-token parts of each block's float step, which [`tile_q4_k`] forms again for every
/// weight row (a scale product, a negation, the `bsums` pair sums), come from them — eight
/// tokens' `d` products in one vector multiply, the pair sums as one load. Two tokens' mins
/// share a vector: their four-lane accumulators of [`dot_q4_k`] are the two halves of one
/// `__m256` (a 256-bit `madd` of the block's mins with two tokens' pair sums, one
/// conversion, one `fma` with the two `dmin` products spread over their halves), so each
/// lane sees the same operations as in [`dot_q4_k`]. The same values, so the same bits.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn tile8_q4_k_laid(w: &[BlockQ4K], ys: [&[BlockQ8K]; 8], sc8: &[f32], lay8: &[u8]) -> [f32; 8] {
    let nb = w.len();
    assert!(sc8.len() >= 8 * nb && lay8.len() >= nb * Q8K8_BLOCK_BYTES);
    let sign = _mm256_set1_ps(-0.0);
    // Lane indices that spread `dmin` products `2p` and `2p + 1` over a vector's halves.
    let spread: [__m256i; 4] = std::array::from_fn(|p| {
        let (a, b) = (2 * p as i32, 2 * p as i32 + 1);
        _mm256_setr_epi32(a, a, a, a, b, b, b, b)
    });
    let mut acc = [_mm256_setzero_ps(); 8];
    let mut acc_m = [_mm256_setzero_ps(); 4];
    // Eight tokens' `d` products of the current block, read back one lane at a time as
    // broadcast loads.
    let mut d = [0.0f32; 8];
    for (i, x) in w.iter().enumerate() {
        let b = q4k_block(x);
        let yd = load_f32x8(&sc8[8 * i..8 * i + 8]);
        // `yd * d` and `-yd * dmin`, lane by lane the scalar products of `dot_q4_k`.
        store_f32x8(&mut d, _mm256_mul_ps(yd, _mm256_set1_ps(b.d)));
        let dmin = _mm256_mul_ps(_mm256_xor_ps(yd, sign), _mm256_set1_ps(b.dmin));
        // Tokens `2p` and `2p + 1`'s pair sums (wrapped to `i16` as `hadd_epi16` forms them)
        // against the mins in both halves.
        let sums = &lay8[i * Q8K8_BLOCK_BYTES + 2048..(i + 1) * Q8K8_BLOCK_BYTES];
        let mins = _mm256_broadcastsi128_si256(b.mins);
        for p in 0..4 {
            let prod = _mm256_madd_epi16(mins, load_bytes32(&sums[32 * p..32 * p + 32]));
            let dm = _mm256_permutevar8x32_ps(dmin, spread[p]);
            acc_m[p] = _mm256_fmadd_ps(dm, _mm256_cvtepi32_ps(prod), acc_m[p]);
        }
        let sumi = q4k_sums::<8>(x, &b, std::array::from_fn(|t| &ys[t][i]));
        for t in 0..8 {
            acc[t] = _mm256_fmadd_ps(
                _mm256_broadcast_ss(&d[t]),
                _mm256_cvtepi32_ps(sumi[t]),
                acc[t],
            );
        }
    }
    std::array::from_fn(|t| {
        let m = acc_m[t / 2];
        let half = if t % 2 == 0 {
            _mm256_castps256_ps128(m)
        } else {
            _mm256_extractf128_ps::<1>(m)
        };
        hsum_f32x8(acc[t]) + hsum_f32x4(half)
    })
}

#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) fn dot8_q4_k(w: &[u8], a: ActRows<'_>, out: &mut [f32; 8]) {
    let w: &[BlockQ4K] = as_blocks(w);
    let ys = rows_n::<8, BlockQ8K>(&a, w.len());
    *out = if a.sc8.is_empty() || a.lay8.is_empty() {
        tile_q4_k(w, ys)
    } else {
        tile8_q4_k_laid(w, ys, a.sc8, a.lay8)
    };
}

// ---------------------------------------------------------------- Q5_K × Q8_K

/// `sum_j m_j * (bsum_2j + bsum_2j+1)` (pair sums wrapped to `i16` by `hadd_epi16`), exact.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn q5k_mins(m: [u8; 8], y: &BlockQ8K) -> i32 {
    let mins = _mm_cvtepu8_epi16(_mm_set_epi64x(0, i64::from_le_bytes(m)));
    let q8sums = load_bytes32(&y.bsums);
    let q8s = _mm_hadd_epi16(
        _mm256_castsi256_si128(q8sums),
        _mm256_extracti128_si256::<1>(q8sums),
    );
    let prod = _mm_madd_epi16(mins, q8s);
    let s = _mm_add_epi32(prod, _mm_unpackhi_epi64(prod, prod));
    _mm_cvtsi128_si32(_mm_add_epi32(s, _mm_shuffle_epi32::<1>(s)))
}

/// The eight 32-byte groups of 5-bit values (0..32) of a Q5_K block, sub-block order.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn q5k_values(x: &BlockQ5K) -> [__m256i; 8] {
    let m4 = _mm256_set1_epi8(0x0F);
    let one = _mm256_set1_epi8(1);
    let hbits = load_bytes32(&x.qh);
    std::array::from_fn(|g| {
        let bits = load_bytes32(&x.qs[32 * (g / 2)..32 * (g / 2) + 32]);
        let lo = if g % 2 == 0 {
            _mm256_and_si256(bits, m4)
        } else {
            _mm256_and_si256(_mm256_srli_epi16::<4>(bits), m4)
        };
        let hi = _mm256_slli_epi16::<4>(_mm256_and_si256(srl16(hbits, g), one));
        _mm256_or_si256(lo, hi)
    })
}

#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) fn dot_q5_k(w: &[u8], a: &[u8]) -> f32 {
    let (w, a): (&[BlockQ5K], &[BlockQ8K]) = (as_blocks(w), as_blocks(a));
    assert_eq!(w.len(), a.len());
    let m4 = _mm256_set1_epi8(0x0F);
    let one = _mm256_set1_epi8(1);
    let mut acc = _mm256_setzero_ps();
    let mut summs = 0.0f32;
    for (i, (x, y)) in w.iter().zip(a).enumerate() {
        prefetch_row_ahead(w, i);
        let (sc, m) = q4k_scales_mins(&x.scales);
        let dm = f16x2_to_f32(x.d, x.dmin);
        let yd = y.d.get();
        let d = yd * _mm_cvtss_f32(dm);
        let dmin = -yd * _mm_cvtss_f32(_mm_movehdup_ps(dm));
        summs = dmin.mul_add(q5k_mins(m, y) as f32, summs);
        let hbits = load_bytes32(&x.qh);
        let mut sumi = _mm256_setzero_si256();
        for j in 0..4 {
            let bits = load_bytes32(&x.qs[32 * j..32 * j + 32]);
            let h0 = _mm256_slli_epi16::<4>(_mm256_and_si256(srl16(hbits, 2 * j), one));
            let h1 = _mm256_slli_epi16::<4>(_mm256_and_si256(srl16(hbits, 2 * j + 1), one));
            let q0 = _mm256_or_si256(_mm256_and_si256(bits, m4), h0);
            let q1 = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16::<4>(bits), m4), h1);
            let q8l = load_bytes32(&y.qs[64 * j..64 * j + 32]);
            let q8h = load_bytes32(&y.qs[64 * j + 32..64 * j + 64]);
            let s0 = _mm256_set1_epi16(sc[2 * j] as i16);
            let s1 = _mm256_set1_epi16(sc[2 * j + 1] as i16);
            let p0 = _mm256_madd_epi16(s0, _mm256_maddubs_epi16(q0, q8l));
            let p1 = _mm256_madd_epi16(s1, _mm256_maddubs_epi16(q1, q8h));
            sumi = _mm256_add_epi32(sumi, _mm256_add_epi32(p0, p1));
        }
        acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc);
    }
    hsum_f32x8(acc) + summs
}

/// One Q5_K row × four Q8_K rows: each block's values unpacked once, then per token the
/// operations of [`dot_q5_k`] in its order (bit-identical to four single dots).
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) fn dot4_q5_k(w: &[u8], a: ActRows<'_>, out: &mut [f32; 4]) {
    let w: &[BlockQ5K] = as_blocks(w);
    let ys = rows4::<BlockQ8K>(&a, w.len());
    let mut acc = [_mm256_setzero_ps(); 4];
    let mut summs = [0.0f32; 4];
    for (i, x) in w.iter().enumerate() {
        let (sc, m) = q4k_scales_mins(&x.scales);
        let dm = f16x2_to_f32(x.d, x.dmin);
        let (dx, dminx) = (_mm_cvtss_f32(dm), _mm_cvtss_f32(_mm_movehdup_ps(dm)));
        let q = q5k_values(x);
        let scales: [__m256i; 8] = std::array::from_fn(|g| _mm256_set1_epi16(sc[g] as i16));
        for t in 0..4 {
            let y = &ys[t][i];
            let yd = y.d.get();
            let d = yd * dx;
            let dmin = -yd * dminx;
            summs[t] = dmin.mul_add(q5k_mins(m, y) as f32, summs[t]);
            let mut sumi = _mm256_setzero_si256();
            for j in 0..4 {
                let (g0, g1) = (2 * j, 2 * j + 1);
                let q8l = load_bytes32(&y.qs[32 * g0..32 * g0 + 32]);
                let q8h = load_bytes32(&y.qs[32 * g1..32 * g1 + 32]);
                let p0 = _mm256_madd_epi16(scales[g0], _mm256_maddubs_epi16(q[g0], q8l));
                let p1 = _mm256_madd_epi16(scales[g1], _mm256_maddubs_epi16(q[g1], q8h));
                sumi = _mm256_add_epi32(sumi, _mm256_add_epi32(p0, p1));
            }
            acc[t] = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc[t]);
        }
    }
    for t in 0..4 {
        out[t] = hsum_f32x8(acc[t]) + summs[t];
    }
}

// ---------------------------------------------------------------- Q6_K × Q8_K

/// The four 32-byte groups of 6-bit values (0..64, unbiased) of half `h` of a Q6_K block.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn q6k_groups(x: &BlockQ6K, h: usize) -> [__m256i; 4] {
    let m15 = _mm256_set1_epi8(15);
    let b1 = load_bytes32(&x.ql[64 * h..64 * h + 32]);
    let b2 = load_bytes32(&x.ql[64 * h + 32..64 * h + 64]);
    let bh = load_bytes32(&x.qh[32 * h..32 * h + 32]);
    let h0 = _mm256_slli_epi16::<4>(_mm256_and_si256(bh, _mm256_set1_epi8(3)));
    let h1 = _mm256_slli_epi16::<2>(_mm256_and_si256(bh, _mm256_set1_epi8(12)));
    let h2 = _mm256_and_si256(bh, _mm256_set1_epi8(48));
    let h3 = _mm256_srli_epi16::<2>(_mm256_and_si256(bh, _mm256_set1_epi8(-64)));
    [
        _mm256_or_si256(_mm256_and_si256(b1, m15), h0),
        _mm256_or_si256(_mm256_and_si256(b2, m15), h1),
        _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16::<4>(b1), m15), h2),
        _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16::<4>(b2), m15), h3),
    ]
}

/// Scales for group `g` (0..8) of 32 values: 8 i16 lanes of `sc[2g]`, then 8 of `sc[2g+1]`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn q6k_scale(sc: &[i8; 16], g: usize) -> __m256i {
    _mm256_set_m128i(
        _mm_set1_epi16(sc[2 * g + 1] as i16),
        _mm_set1_epi16(sc[2 * g] as i16),
    )
}

/// The per-lane bias correction `32 * sum(sc * bsum)` (ggml's `q8sclsub`).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn q6k_bias(scales16: __m256i, y: &BlockQ8K) -> __m256i {
    _mm256_slli_epi32::<5>(_mm256_madd_epi16(load_bytes32(&y.bsums), scales16))
}

#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) fn dot_q6_k(w: &[u8], a: &[u8]) -> f32 {
    let (w, a): (&[BlockQ6K], &[BlockQ8K]) = (as_blocks(w), as_blocks(a));
    assert_eq!(w.len(), a.len());
    let mut acc = _mm256_setzero_ps();
    for (i, (x, y)) in w.iter().zip(a).enumerate() {
        prefetch_row_ahead(w, i);
        let d = y.d.get() * f16_to_f32(x.d);
        let scales16 = _mm256_cvtepi8_epi16(load_bytes16(&x.scales));
        let mut sumi = _mm256_setzero_si256();
        for h in 0..2 {
            let q = q6k_groups(x, h);
            let mut p = [_mm256_setzero_si256(); 4];
            for k in 0..4 {
                let o = 128 * h + 32 * k;
                let q8 = load_bytes32(&y.qs[o..o + 32]);
                let p16 = _mm256_maddubs_epi16(q[k], q8);
                p[k] = _mm256_madd_epi16(q6k_scale(&x.scales, 4 * h + k), p16);
            }
            sumi = _mm256_add_epi32(sumi, _mm256_add_epi32(p[0], p[1]));
            sumi = _mm256_add_epi32(sumi, _mm256_add_epi32(p[2], p[3]));
        }
        sumi = _mm256_sub_epi32(sumi, q6k_bias(scales16, y));
        acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc);
    }
    hsum_f32x8(acc)
}

/// The 1 × `T` GEMM tile of Q6_K: each weight block unpacked once for `T` tokens, each
/// (row, token) pair computed exactly as [`dot_q6_k`].
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn tile_q6_k<const T: usize>(w: &[BlockQ6K], ys: [&[BlockQ8K]; T]) -> [f32; T] {
    let mut acc = [_mm256_setzero_ps(); T];
    for (i, x) in w.iter().enumerate() {
        let dx = f16_to_f32(x.d);
        let yt: [&BlockQ8K; T] = std::array::from_fn(|t| &ys[t][i]);
        let scales16 = _mm256_cvtepi8_epi16(load_bytes16(&x.scales));
        let mut sumi = [_mm256_setzero_si256(); T];
        for h in 0..2 {
            for (k, qk) in q6k_groups(x, h).into_iter().enumerate() {
                let o = 128 * h + 32 * k;
                let sc = q6k_scale(&x.scales, 4 * h + k);
                for t in 0..T {
                    let q8 = load_bytes32(&yt[t].qs[o..o + 32]);
                    let p = _mm256_madd_epi16(sc, _mm256_maddubs_epi16(qk, q8));
                    sumi[t] = _mm256_add_epi32(sumi[t], p);
                }
            }
        }
        for t in 0..T {
            let s = _mm256_sub_epi32(sumi[t], q6k_bias(scales16, yt[t]));
            let d = yt[t].d.get() * dx;
            acc[t] = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(s), acc[t]);
        }
    }
    std::array::from_fn(|t| hsum_f32x8(acc[t]))
}

#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) fn dot4_q6_k(w: &[u8], a: ActRows<'_>, out: &mut [f32; 4]) {
    let w: &[BlockQ6K] = as_blocks(w);
    *out = tile_q6_k(w, rows_n::<4, BlockQ8K>(&a, w.len()));
}

#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) fn dot2_q6_k(w: &[u8], a: ActRows<'_>, out: &mut [f32; 4]) {
    let w: &[BlockQ6K] = as_blocks(w);
    out[..2].copy_from_slice(&tile_q6_k(w, rows_n::<2, BlockQ8K>(&a, w.len())));
}

#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) fn dot3_q6_k(w: &[u8], a: ActRows<'_>, out: &mut [f32; 4]) {
    let w: &[BlockQ6K] = as_blocks(w);
    out[..3].copy_from_slice(&tile_q6_k(w, rows_n::<3, BlockQ8K>(&a, w.len())));
}

#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) fn dot8_q6_k(w: &[u8], a: ActRows<'_>, out: &mut [f32; 8]) {
    let w: &[BlockQ6K] = as_blocks(w);
    *out = tile_q6_k(w, rows_n::<8, BlockQ8K>(&a, w.len()));
}

// ---------------------------------------------------------------- dequantization

#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) fn dequant_q4_k(src: &[u8], dst: &mut [f32]) {
    let blocks: &[BlockQ4K] = as_blocks(src);
    assert_eq!(blocks.len() * QK_K, dst.len());
    let m4 = _mm256_set1_epi8(0x0F);
    for (b, y) in blocks.iter().zip(dst.chunks_exact_mut(QK_K)) {
        let dm = f16x2_to_f32(b.d, b.dmin);
        let (d, min) = (_mm_cvtss_f32(dm), _mm_cvtss_f32(_mm_movehdup_ps(dm)));
        let (sc, m) = q4k_scales_mins(&b.scales);
        for (j, y) in y.chunks_exact_mut(64).enumerate() {
            let bits = load_bytes32(&b.qs[32 * j..32 * j + 32]);
            let lo = _mm256_and_si256(bits, m4);
            let hi = _mm256_and_si256(_mm256_srli_epi16::<4>(bits), m4);
            // d1 * q - m1: the min is subtracted, i.e. added negated (exact).
            let (d1, m1) = (d * sc[2 * j] as f32, min * m[2 * j] as f32);
            let (d2, m2) = (d * sc[2 * j + 1] as f32, min * m[2 * j + 1] as f32);
            let (lo_y, hi_y) = y.split_at_mut(32);
            emit_u8x32_affine(lo_y, lo, _mm256_set1_ps(d1), _mm256_set1_ps(-m1));
            emit_u8x32_affine(hi_y, hi, _mm256_set1_ps(d2), _mm256_set1_ps(-m2));
        }
    }
}

#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) fn dequant_q6_k(src: &[u8], dst: &mut [f32]) {
    let blocks: &[BlockQ6K] = as_blocks(src);
    assert_eq!(blocks.len() * QK_K, dst.len());
    for (b, y) in blocks.iter().zip(dst.chunks_exact_mut(QK_K)) {
        let d = f16_to_f32(b.d);
        for h in 0..2 {
            let q = q6k_groups(b, h);
            for (k, qk) in q.into_iter().enumerate() {
                let v = _mm256_sub_epi8(qk, _mm256_set1_epi8(32));
                let g = 4 * h + k;
                // Group g of 32 values spans scales 2g (first 16) and 2g + 1.
                let y = &mut y[32 * g..32 * g + 32];
                let d_lo = _mm256_set1_ps(d * b.scales[2 * g] as f32);
                let d_hi = _mm256_set1_ps(d * b.scales[2 * g + 1] as f32);
                let gs = groups8(v);
                for (i, gi) in gs.into_iter().enumerate() {
                    let f = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(gi));
                    let dd = if i < 2 { d_lo } else { d_hi };
                    store_f32x8(&mut y[8 * i..], _mm256_mul_ps(dd, f));
                }
            }
        }
    }
}

dotr4_by_dot!(dotr4_q2_k, dot_q2_k);
dotr4_by_dot!(dotr4_q3_k, dot_q3_k);
dotr4_by_dot!(dotr4_q5_k, dot_q5_k);
dotr4_by_dot!(dotr4_q6_k, dot_q6_k);
dot4_by_dot!(dot4_q2_k, dot_q2_k);
dot4_by_dot!(dot4_q3_k, dot_q3_k);
