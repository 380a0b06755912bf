//! The AVX-512 table's Q4_K dot and GEMV (four weight rows × one token, as four single-row
//! dots one row after another).
//!
//! At decode every weight byte comes from DRAM once per token, and on this class of core
//! (Zen 4, two threads sharing the memory bandwidth) a GEMV that reads one row as one
//! sequential stream finishes sooner than a four-row tile that walks four rows block by
//! block, even though the tile does less arithmetic per byte: the Llama-3.2-3B Q4_K_M shape,
//! tg64 at two threads, gave 16.0–17.4 t/s with this GEMV against 13.9–14.0 with the AVX2
//! four-row tile and 15.1–15.9 with an AVX-512 four-row tile that was 1.28× faster than the
//! AVX2 one in cache (docs/kernels.md, "Streaming the weights at decode").
//!
//! The single-row dot is bound by the instructions it issues (one thread of a decode step
//! spends two thirds of its time in it), so this one issues fewer than AVX2's for the same
//! result: the eight sub-block scales are widened once per super-block and picked with a
//! byte shuffle each (AVX2's `dot` broadcasts each from a general register: three
//! instructions), and `vpdpwssd` (AVX-512 VNNI on 256-bit vectors) applies a scale and adds
//! in one instruction where AVX2 needs `vpmaddwd` and `vpaddd`. The integer lanes are the
//! same sums (wrapping `i32` adds in another order: no lane can overflow) and the float
//! steps are AVX2's, in AVX2's order, so it returns AVX2's bits and the table's GEMM tiles
//! still equal it.

use std::arch::x86_64::*;

use super::util::{dotr4_by_dot, dpwssd256};
use crate::arch::x86_64::avx2::kquants::{q4k_block, q4k_mins_prod};
use crate::arch::x86_64::avx2::util::{hsum_f32x4, hsum_f32x8, load_bytes32};
use crate::blocks::{BlockQ4K, BlockQ8K, as_blocks};

#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
pub(crate) fn dot_q4_k(w: &[u8], a: &[u8]) -> f32 {
    let (w, a): (&[BlockQ4K], &[BlockQ8K]) = (as_blocks(w), as_blocks(a));
    assert_eq!(w.len(), a.len());
    let m4 = _mm256_set1_epi8(0x0F);
    // Byte-shuffle masks that broadcast `i16` lane `s` of a 128-bit lane to all eight.
    let lane = |s: i8| _mm256_set1_epi16(i16::from_le_bytes([(2 * s) as u8, (2 * s + 1) as u8]));
    let pick: [__m256i; 8] = std::array::from_fn(|s| lane(s as i8));
    // Kept in memory, so each pick stays one `vpshufb` with a memory operand (the compiler
    // otherwise rewrites the constant shuffles as two instructions each).
    let pick = std::hint::black_box(pick);
    let mut acc = _mm256_setzero_ps();
    let mut acc_m = _mm_setzero_ps();
    for (x, y) in w.iter().zip(a) {
        // The scales and mins unpacked with general-register instructions: the vector
        // pipes are the busy ones here (a vector unpack measured 9 % slower).
        let b = q4k_block(x);
        let yd = y.d.get();
        let d = yd * b.d;
        let dmin = -yd * b.dmin;
        let prod = q4k_mins_prod(b.mins, y);
        acc_m = _mm_fmadd_ps(_mm_set1_ps(dmin), _mm_cvtepi32_ps(prod), acc_m);
        // The eight scales as `i16` lanes in both 128-bit lanes.
        let sc16 = _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(_mm_set_epi64x(
            0,
            i64::from_le_bytes(b.sc),
        )));
        // Sub-blocks `2j` and `2j + 1` (32 bytes of `qs`): their products with the
        // activations as `i16` pairs, and the two scales picked for them.
        let pair = |j: usize| {
            let bits = load_bytes32(&x.qs[32 * j..32 * j + 32]);
            let q4l = _mm256_and_si256(bits, m4);
            let q4h = _mm256_and_si256(_mm256_srli_epi16::<4>(bits), m4);
            let q8l = load_bytes32(&y.qs[64 * j..64 * j + 32]);
            let q8h = load_bytes32(&y.qs[64 * j + 32..64 * j + 64]);
            (
                _mm256_maddubs_epi16(q4l, q8l),
                _mm256_maddubs_epi16(q4h, q8h),
                _mm256_shuffle_epi8(sc16, pick[2 * j]),
                _mm256_shuffle_epi8(sc16, pick[2 * j + 1]),
            )
        };
        // Two chains, so each `vpdpwssd` waits on one of every two; the first pair starts
        // them with plain `vpmaddwd`s.
        let (pl, ph, sl, sh) = pair(0);
        let mut lo = _mm256_madd_epi16(sl, pl);
        let mut hi = _mm256_madd_epi16(sh, ph);
        for j in 1..4 {
            let (pl, ph, sl, sh) = pair(j);
            lo = dpwssd256(lo, sl, pl);
            hi = dpwssd256(hi, sh, ph);
        }
        let sumi = _mm256_add_epi32(lo, hi);
        acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc);
    }
    hsum_f32x8(acc) + hsum_f32x4(acc_m)
}

dotr4_by_dot!(dotr4_q4_k, dot_q4_k);
