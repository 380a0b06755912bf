//! AVX-512 GEMV tiles (four weight rows × one token) of the K-quants a decode step streams:
//! Q4_K (the attention and FFN matrices of a Q4_K_M model, the experts' gate and up rows of
//! a Q4_K_M mixture of experts).
//!
//! At decode each weight byte is read once per token, so a GEMV must consume its rows at
//! memory speed on one core. The AVX2 tile it replaces does 32 weights per step (a
//! `maddubs` and a `madd` per sub-block, with a scale broadcast each) and is bound by that
//! arithmetic. Here one `zmm` holds 64 nibbles of two sub-blocks: the 64 bytes of `qs` of
//! two 32-byte groups give, masked, sub-blocks `4p` and `4p + 2` (low nibbles) and, shifted,
//! `4p + 1` and `4p + 3` (high nibbles). The activation block is rearranged to match once
//! per super-block for the four rows (two 128-bit lane shuffles per `zmm` pair), and the
//! sub-block scales reach the 16-bit lanes with one in-lane byte shuffle each (each 128-bit
//! lane picks its own scale). A `maddubs` then forms the pair sums and one `vpdpwssd`
//! multiplies them by their scale and adds them: lane `m` (and `m + 8`) accumulates
//! `sc_s · (q·y over bytes 4m..4m+4 of sub-block s)` for the four sub-blocks of its half.
//!
//! Integer sums are exact, so after the two halves are added lane `m` holds exactly the
//! `i32` of lane `m` of the AVX2 dot (`super::super::avx2::kquants::dot_q4_k`), and the float
//! steps that follow are those of that dot in the same order (per super-block `cvt` and one
//! `fma` with `yd · d` into eight lanes, the mins' `madd` with the folded `bsums` into their
//! own four-lane accumulator, `hsum_f32x8 + hsum_f32x4` at the end): each row returns the
//! dot's bits. The table's Q4_K `dot` is AVX2's, so the GEMV stays bit-identical to it and to
//! every GEMM tile of the table (docs/kernels.md, "Invariance").

use std::arch::x86_64::*;

use super::util::{fold_pair, halves_ps, lo16_pairs, load128, load512, quarter_ps};
use crate::arch::x86_64::avx2::util::{
    hsum_f32x4, hsum_f32x8, load_bytes32, prefetch_group_ahead, weight_rows,
};
use crate::blocks::{BlockQ4K, BlockQ8K, as_blocks};

/// For row `r` of a four-row tile and pair `p` of nibble vectors (sub-blocks (0, 2) with
/// (1, 3), or (4, 6) with (5, 7)), the `vpermw` indices that give each `i32` lane its two
/// `i16` scales: in the lower eight lanes those of sub-blocks `4p` and `4p + 1`, in the
/// upper eight those of `4p + 2` and `4p + 3` (row `r`'s eight scales are in `i16` lanes
/// `8r..8r + 8` of the tile's scale vector).
const SCALE_PAIRS: [[[u16; 32]; 2]; 4] = {
    let mut t = [[[0u16; 32]; 2]; 4];
    let mut r = 0;
    while r < 4 {
        let mut p = 0;
        while p < 2 {
            let mut k = 0;
            while k < 32 {
                // i16 lane k: i32 lane k / 2, its lower (even k) or upper half.
                let s = 4 * p + if k >= 16 { 2 } else { 0 } + k % 2;
                t[r][p][k] = (8 * r + s) as u16;
                k += 1;
            }
            p += 1;
        }
        r += 1;
    }
    t
};

/// 64 bytes of constant `u16` lanes as a `zmm`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
fn const512(ix: &[u16; 32]) -> __m512i {
    load512(ix)
}

/// The scales and mins of four Q4_K blocks, decoded together: `h` holds block `r`'s first
/// 16 bytes (`d`, `dmin`, the 12 packed bytes) in its 128-bit lane `r`; the result has
/// block `r`'s eight 6-bit scales (first) and mins (second) as `i16` in lanes `8r..8r + 8`.
/// The same bit operations as `blocks::q4k_scales_mins`, done per 16-bit lane: scale/min `j`
/// below 4 is the low six bits of packed byte `j` / `j + 4`; above, a nibble of byte `j + 4`
/// and the top two bits of byte `j - 4` / `j`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
fn q4k_scales_mins4(h: __m512i) -> (__m512i, __m512i) {
    // Byte-shuffle indices (per 128-bit lane; packed byte `b` is at lane byte `4 + b`, and an
    // index with its top bit set gives zero): the low source byte of each `i16` slot, then
    // the byte whose top two bits go above it.
    const Z: u8 = 0x80;
    let idx = |b: [u8; 8]| {
        let mut v = [Z; 16];
        for (j, &x) in b.iter().enumerate() {
            v[2 * j] = x;
        }
        _mm512_broadcast_i32x4(load128(&v))
    };
    let sc_lo = _mm512_shuffle_epi8(h, idx([4, 5, 6, 7, 12, 13, 14, 15]));
    let sc_top = _mm512_shuffle_epi8(h, idx([Z, Z, Z, Z, 4, 5, 6, 7]));
    let m_lo = _mm512_shuffle_epi8(h, idx([8, 9, 10, 11, 12, 13, 14, 15]));
    let m_top = _mm512_shuffle_epi8(h, idx([Z, Z, Z, Z, 8, 9, 10, 11]));
    let mask =
        |lo: i16, hi: i16| _mm512_broadcast_i32x4(_mm_set_epi16(hi, hi, hi, hi, lo, lo, lo, lo));
    let top = |v: __m512i| _mm512_and_si512(_mm512_srli_epi16::<2>(v), _mm512_set1_epi16(0x30));
    let sc = _mm512_or_si512(_mm512_and_si512(sc_lo, mask(0x3F, 0x0F)), top(sc_top));
    let m_shift = _mm512_srlv_epi16(m_lo, mask(0, 4));
    let m = _mm512_or_si512(_mm512_and_si512(m_shift, mask(0x3F, 0x0F)), top(m_top));
    (sc, m)
}

/// The 4 × 1 GEMV tile of Q4_K: four consecutive weight rows times one activation row, each
/// row bit-identical to the AVX2 `dot_q4_k` (module docs). The four blocks' scales, mins and
/// `d`/`dmin` are decoded together, one row per 128-bit lane; the row group after next is
/// prefetched a slice per block step, as the AVX2 tile does.
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
fn rows4_q4_k(w: [&[BlockQ4K]; 4], y: &[BlockQ8K]) -> [f32; 4] {
    let nb = y.len();
    for r in &w {
        assert_eq!(r.len(), nb);
    }
    let m4 = _mm512_set1_epi8(0x0F);
    // Row `r`'s eight lanes in the lower (r even) or upper half of a pair vector; `d` and
    // `dmin` of row `r` at float lanes `2r`, `2r + 1` of `dd` below.
    let d_pair = [
        _mm512_set_epi32(2, 2, 2, 2, 2, 2, 2, 2, 0, 0, 0, 0, 0, 0, 0, 0),
        _mm512_set_epi32(6, 6, 6, 6, 6, 6, 6, 6, 4, 4, 4, 4, 4, 4, 4, 4),
    ];
    let dmin4 = _mm512_set_epi32(7, 7, 7, 7, 5, 5, 5, 5, 3, 3, 3, 3, 1, 1, 1, 1);
    let first_dword = _mm512_set_epi32(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 12, 8, 4, 0);
    let mut acc = [_mm512_setzero_ps(); 2];
    let mut acc_m = _mm512_setzero_ps();
    let base = w[0].as_ptr().cast::<u8>();
    for i in 0..nb {
        prefetch_group_ahead(base, 4, nb, size_of::<BlockQ4K>(), i);
        let yb = &y[i];
        let yd = yb.d.get();
        // The activations in the nibbles' sub-block order: [0 | 2], [1 | 3], [4 | 6], [5 | 7]
        // (32 bytes each).
        let a01 = load512(&yb.qs[0..64]);
        let a23 = load512(&yb.qs[64..128]);
        let a45 = load512(&yb.qs[128..192]);
        let a67 = load512(&yb.qs[192..256]);
        let ya = [
            _mm512_shuffle_i64x2::<0x44>(a01, a23),
            _mm512_shuffle_i64x2::<0xEE>(a01, a23),
            _mm512_shuffle_i64x2::<0x44>(a45, a67),
            _mm512_shuffle_i64x2::<0xEE>(a45, a67),
        ];
        let q8sums = load_bytes32(&yb.bsums);
        let q8s = _mm_hadd_epi16(
            _mm256_castsi256_si128(q8sums),
            _mm256_extracti128_si256::<1>(q8sums),
        );
        // The four blocks' headers, block `r` in 128-bit lane `r`.
        let x: [&BlockQ4K; 4] = std::array::from_fn(|r| &w[r][i]);
        let head = |r: usize| load128(bytemuck::bytes_of(x[r]));
        let h = _mm512_inserti32x4::<3>(
            _mm512_inserti32x4::<2>(
                _mm512_inserti32x4::<1>(_mm512_castsi128_si512(head(0)), head(1)),
                head(2),
            ),
            head(3),
        );
        let (sc, m) = q4k_scales_mins4(h);
        // d, dmin of the four rows as f32 (exact), times yd and -yd as the dot does.
        let dm16 = _mm512_castsi512_si128(_mm512_permutexvar_epi32(first_dword, h));
        let yy = _mm256_set_ps(-yd, yd, -yd, yd, -yd, yd, -yd, yd);
        let dd = _mm512_castps256_ps512(_mm256_mul_ps(yy, _mm256_cvtph_ps(dm16)));
        let prod = _mm512_madd_epi16(m, _mm512_broadcast_i32x4(q8s));
        acc_m = _mm512_fmadd_ps(
            _mm512_permutexvar_ps(dmin4, dd),
            _mm512_cvtepi32_ps(prod),
            acc_m,
        );
        let sums: [__m512i; 4] = std::array::from_fn(|r| {
            let v0 = load512(&x[r].qs[0..64]);
            let v1 = load512(&x[r].qs[64..128]);
            let q = [
                _mm512_and_si512(v0, m4),
                _mm512_and_si512(_mm512_srli_epi16::<4>(v0), m4),
                _mm512_and_si512(v1, m4),
                _mm512_and_si512(_mm512_srli_epi16::<4>(v1), m4),
            ];
            // Quad sums (exact; |q| <= 4 * 15 * 128 fits an i16), two vectors' side by
            // side as i16 pairs, each pair times its two scales.
            let z = _mm512_setzero_si512();
            let quad: [__m512i; 4] = std::array::from_fn(|k| _mm512_dpbusd_epi32(z, q[k], ya[k]));
            let sp = |p: usize| _mm512_permutexvar_epi16(const512(&SCALE_PAIRS[r][p]), sc);
            let lo = _mm512_dpwssd_epi32(z, lo16_pairs(quad[0], quad[1]), sp(0));
            let hi = _mm512_dpwssd_epi32(z, lo16_pairs(quad[2], quad[3]), sp(1));
            _mm512_add_epi32(lo, hi)
        });
        for h in 0..2 {
            let folded = fold_pair(sums[2 * h], sums[2 * h + 1]);
            acc[h] = _mm512_fmadd_ps(
                _mm512_permutexvar_ps(d_pair[h], dd),
                _mm512_cvtepi32_ps(folded),
                acc[h],
            );
        }
    }
    let (a0, a1) = halves_ps(acc[0]);
    let (a2, a3) = halves_ps(acc[1]);
    [
        hsum_f32x8(a0) + hsum_f32x4(quarter_ps(acc_m, 0)),
        hsum_f32x8(a1) + hsum_f32x4(quarter_ps(acc_m, 1)),
        hsum_f32x8(a2) + hsum_f32x4(quarter_ps(acc_m, 2)),
        hsum_f32x8(a3) + hsum_f32x4(quarter_ps(acc_m, 3)),
    ]
}

#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
pub(crate) fn dotr4_q4_k(w: &[u8], row_bytes: usize, a: &[u8], out: &mut [f32; 4]) {
    *out = rows4_q4_k(weight_rows::<4, BlockQ4K>(w, row_bytes), as_blocks(a));
}
