//! Small AVX2 building blocks shared by the kernels. Each mirrors one of ggml's x86 helpers
//! (`hsum_float_8`, `bytes_from_nibbles_32`, `bytes_from_bits_32`, `mul_sum_us8_pairs_float`; the
//! sign trick of `mul_sum_i8_pairs_float` is spelled out in the tile kernels) so the kernels
//! perform the same operations in the same order; the views of activation and weight rows
//! the tile kernels take; the dequantizers' output stores; and the entry points made of
//! repeated single dots. Everything used by more than one type family lives here, so the
//! family files (`float`, `legacy`, `kquants`, `iquants`) never import each other.

use std::arch::x86_64::*;

use bytemuck::Pod;

use crate::blocks::{F16Le, as_blocks};
use crate::table::ActRows;

/// Horizontal sum of 8 floats: high half + low half, then pairs, then the last two.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) fn hsum_f32x8(x: __m256) -> f32 {
    let mut r = _mm_add_ps(_mm256_extractf128_ps::<1>(x), _mm256_castps256_ps128(x));
    r = _mm_add_ps(r, _mm_movehl_ps(r, r));
    r = _mm_add_ss(r, _mm_movehdup_ps(r));
    _mm_cvtss_f32(r)
}

/// Horizontal sum of 4 floats in the order ggml's Q4_K kernel reduces its mins accumulator:
/// `(v0 + v2) + (v1 + v3)`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) fn hsum_f32x4(x: __m128) -> f32 {
    let r = _mm_add_ps(x, _mm_movehl_ps(x, x));
    _mm_cvtss_f32(_mm_add_ss(r, _mm_movehdup_ps(r)))
}

/// F16C widening of the halves in the low 32 bits of `bits`: lanes 0 and 1, the others 0.
///
/// Written as inline assembly on purpose. Built from intrinsics, LLVM notices that only the
/// low lane is used and turns the move into `vpinsrw`, which merges into whatever register
/// the allocator picks, often the running accumulator: every block's scale conversion then
/// waits for the previous block's sum, which made the dot loops two to three times slower.
/// `vmovd` writes the whole register and carries no such dependency.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) fn f16x2_bits_to_f32(bits: u32) -> __m128 {
    let out: __m128;
    // SAFETY: register-only instructions (no memory, no stack); F16C is enabled for every
    // caller by this function's target features.
    unsafe {
        std::arch::asm!(
            "vmovd {x}, {b:e}",
            "vcvtph2ps {x}, {x}",
            b = in(reg) bits,
            x = out(xmm_reg) out,
            options(pure, nomem, nostack, preserves_flags),
        );
    }
    out
}

/// `x` broadcast to 8 lanes, opaque to the optimiser.
///
/// A block's scale is `dx * dy` in every lane. With both factors visible as broadcasts, LLVM
/// rewrites the vector product as a scalar `vmulss` plus a `vbroadcastss` per (row, token)
/// pair, two ALU operations where one `vmulps` with a broadcast load suffices; the GEMM
/// micro-kernels are bound by exactly these operations. Hiding that `dx` is a broadcast
/// keeps the product a vector one (same value: every lane is `dx * dy`).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) fn splat_opaque(x: f32) -> __m256 {
    let mut v = _mm256_set1_ps(x);
    // SAFETY: an empty template; the register is only declared read and written.
    unsafe {
        std::arch::asm!(
            "/* {v} */",
            v = inout(ymm_reg) v,
            options(pure, nomem, nostack, preserves_flags),
        );
    }
    v
}

/// One half to `f32` (see [`f16x2_bits_to_f32`]).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) fn f16_to_f32(h: F16Le) -> f32 {
    _mm_cvtss_f32(f16x2_bits_to_f32(h.bits() as u32))
}

/// Two halves at once (e.g. Q4_1's `d, m`, Q8_1's `d, s`): lanes 0 and 1, the others 0.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) fn f16x2_to_f32(a: F16Le, b: F16Le) -> __m128 {
    f16x2_bits_to_f32(a.bits() as u32 | (b.bits() as u32) << 16)
}

#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) fn load_u8x16(p: &[u8; 16]) -> __m128i {
    // SAFETY: `p` refers to 16 readable bytes; the load is unaligned.
    unsafe { _mm_loadu_si128(p.as_ptr().cast()) }
}

#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) fn load_i8x32(p: &[i8; 32]) -> __m256i {
    // SAFETY: `p` refers to 32 readable bytes; the load is unaligned.
    unsafe { _mm256_loadu_si256(p.as_ptr().cast()) }
}

/// 32 bytes from a slice that has at least 32 (checked).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) fn load_bytes32<T: bytemuck::Pod>(p: &[T]) -> __m256i {
    let bytes: &[u8] = bytemuck::cast_slice(p);
    assert!(bytes.len() >= 32);
    // SAFETY: at least 32 readable bytes (asserted); the load is unaligned.
    unsafe { _mm256_loadu_si256(bytes.as_ptr().cast()) }
}

/// 16 bytes from a slice that has at least 16 (checked).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) fn load_bytes16<T: bytemuck::Pod>(p: &[T]) -> __m128i {
    let bytes: &[u8] = bytemuck::cast_slice(p);
    assert!(bytes.len() >= 16);
    // SAFETY: at least 16 readable bytes (asserted); the load is unaligned.
    unsafe { _mm_loadu_si128(bytes.as_ptr().cast()) }
}

/// 8 floats to the first 8 elements of `dst` (checked).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) fn store_f32x8(dst: &mut [f32], v: __m256) {
    assert!(dst.len() >= 8);
    // SAFETY: at least 8 writable floats (asserted); the store is unaligned.
    unsafe { _mm256_storeu_ps(dst.as_mut_ptr(), v) }
}

/// 8 floats from the first 8 elements of `src` (checked).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) fn load_f32x8(src: &[f32]) -> __m256 {
    assert!(src.len() >= 8);
    // SAFETY: at least 8 readable floats (asserted); the load is unaligned.
    unsafe { _mm256_loadu_ps(src.as_ptr()) }
}

/// The 32 nibbles of 16 bytes as bytes 0..16: low nibbles in bytes 0..16, high nibbles in
/// bytes 16..32 (the element order of Q4_0/Q4_1/Q5_0 blocks).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) fn nibbles32(p: &[u8; 16]) -> __m256i {
    let t = load_u8x16(p);
    let both = _mm256_set_m128i(_mm_srli_epi16::<4>(t), t);
    _mm256_and_si256(both, _mm256_set1_epi8(0x0F))
}

/// Spreads 32 bits to 32 bytes: byte `j` is 0xFF when bit `j` is set, else 0.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) fn bits32(p: &[u8; 4]) -> __m256i {
    let x = u32::from_le_bytes(*p) as i32;
    let shuf = _mm256_set_epi64x(
        0x0303_0303_0303_0303,
        0x0202_0202_0202_0202,
        0x0101_0101_0101_0101,
        0,
    );
    let bytes = _mm256_shuffle_epi8(_mm256_set1_epi32(x), shuf);
    let mask = _mm256_set1_epi64x(0x7fbf_dfef_f7fb_fdfe);
    _mm256_cmpeq_epi8(_mm256_or_si256(bytes, mask), _mm256_set1_epi64x(-1))
}

/// Unsigned × signed bytes, summed in fours to 8 i32 lanes, as floats.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) fn mul_sum_us8_pairs_f32(ax: __m256i, sy: __m256i) -> __m256 {
    let dot = _mm256_maddubs_epi16(ax, sy);
    _mm256_cvtepi32_ps(_mm256_madd_epi16(_mm256_set1_epi16(1), dot))
}

/// How many row groups ahead a multi-row GEMV tile prefetches.
pub(crate) const PF_GROUPS_AHEAD: usize = 2;

/// Software prefetch for a GEMV tile of `rows` consecutive weight rows of `nb` blocks of
/// `block_bytes` each, called once per block step `i`: it touches the slice of the row group
/// `PF_GROUPS_AHEAD` groups further on that corresponds to step `i`, so the next groups
/// stream in at the rate this one is consumed, as one sequential stream.
///
/// Why: a tile reads its rows as `rows` interleaved streams advancing one block at a time,
/// which the hardware prefetchers do not follow (measured on Zen 3: a Q8_0 GEMV out of cache
/// ran at 5 GB/s, single-row dots at 15, this scheme at 20 against 22 for a plain read).
/// The address may lie past the end of the weights; a prefetch of any address is only a
/// hint (it never faults or reads memory architecturally), and it is formed with
/// `wrapping_add`, so no out-of-bounds pointer is ever dereferenced.
#[inline(always)]
pub(crate) fn prefetch_group_ahead(
    base: *const u8,
    rows: usize,
    nb: usize,
    block_bytes: usize,
    i: usize,
) {
    let group = rows * nb * block_bytes;
    let step = rows * block_bytes;
    let p = base.wrapping_add(PF_GROUPS_AHEAD * group + i * step);
    let mut off = 0;
    while off < step {
        // SAFETY: `_mm_prefetch` is a hint on any address (see above); SSE is baseline.
        unsafe { _mm_prefetch::<_MM_HINT_T0>(p.wrapping_add(off).cast()) };
        off += 64;
    }
}

/// [`prefetch_group_ahead`] for a single-row dot over `w` at block `i`: the same block
/// [`PF_GROUPS_AHEAD`] rows further on (a matrix's rows are contiguous). A GEMV made of
/// repeated single dots then streams its rows instead of waiting on each row's first
/// lines (Q6_K, 16384 × 4096, one thread: 6.4–8.3 ms → 4.7–6.1 over two rounds of runs;
/// docs/kernels.md).
#[inline(always)]
pub(crate) fn prefetch_row_ahead<B>(w: &[B], i: usize) {
    prefetch_group_ahead(w.as_ptr().cast(), 1, w.len(), size_of::<B>(), i);
}

// ---------------------------------------------------------------- activation and weight rows

/// The four activation rows of a `dot4` call, each `n` blocks long.
#[inline(always)]
pub(crate) fn rows4<'a, B: Pod>(a: &ActRows<'a>, n: usize) -> [&'a [B]; 4] {
    rows_n::<4, B>(a, n)
}

/// The four rows' widened scales (`per_block` values per block).
#[inline(always)]
pub(crate) fn scales4<'a>(a: &ActRows<'a>, n: usize, per_block: usize) -> [&'a [f32]; 4] {
    scales_n::<4>(a, n, per_block)
}

/// The first `T` activation rows, each `n` blocks long.
#[inline(always)]
pub(crate) fn rows_n<'a, const T: usize, B: Pod>(a: &ActRows<'a>, n: usize) -> [&'a [B]; T] {
    let len = n * size_of::<B>();
    // A plain loop: `std::array::from_fn` here stayed an out-of-line call per GEMM tile.
    let mut rows: [&'a [B]; T] = [&[]; T];
    for (t, r) in rows.iter_mut().enumerate() {
        *r = as_blocks(a.row(t, len));
    }
    rows
}

/// The first `T` rows' widened scales (`per_block` values per block).
#[inline(always)]
pub(crate) fn scales_n<'a, const T: usize>(
    a: &ActRows<'a>,
    n: usize,
    per_block: usize,
) -> [&'a [f32]; T] {
    std::array::from_fn(|t| a.scales(t, n * per_block))
}

/// `R` consecutive weight rows of `row_bytes` each, as blocks.
#[inline(always)]
pub(crate) fn weight_rows<const R: usize, B: Pod>(w: &[u8], row_bytes: usize) -> [&[B]; R] {
    std::array::from_fn(|r| as_blocks(&w[r * row_bytes..(r + 1) * row_bytes]))
}

// ---------------------------------------------------------------- dequantization output

/// The four groups of 8 bytes of a 256-bit vector, in order, each in the low half of an xmm.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) fn groups8(v: __m256i) -> [__m128i; 4] {
    let lo = _mm256_castsi256_si128(v);
    let hi = _mm256_extracti128_si256::<1>(v);
    [lo, _mm_srli_si128::<8>(lo), hi, _mm_srli_si128::<8>(hi)]
}

/// Writes 32 signed bytes times `d` to `y[..32]`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) fn emit_i8x32(y: &mut [f32], q: __m256i, d: __m256) {
    for (k, g) in groups8(q).into_iter().enumerate() {
        let f = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(g));
        store_f32x8(&mut y[8 * k..], _mm256_mul_ps(f, d));
    }
}

/// Writes 32 unsigned bytes as `q * d + m` (multiply, then add) to `y[..32]`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) fn emit_u8x32_affine(y: &mut [f32], q: __m256i, d: __m256, m: __m256) {
    for (k, g) in groups8(q).into_iter().enumerate() {
        let f = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(g));
        store_f32x8(&mut y[8 * k..], _mm256_add_ps(_mm256_mul_ps(f, d), m));
    }
}

// ---------------------------------------------------------------- entry points made of single dots

/// A GEMM entry point (one weight row × four tokens) made of four single dots: bit-identical
/// to them by construction. For types rare as matmul weights, where a micro-kernel does not pay.
macro_rules! dot4_by_dot {
    ($name:ident, $dot:ident) => {
        #[target_feature(enable = "avx2,fma,f16c")]
        pub(crate) fn $name(w: &[u8], a: ActRows<'_>, out: &mut [f32; 4]) {
            let len = a.a.len() - 3 * a.stride;
            for (t, o) in out.iter_mut().enumerate() {
                *o = $dot(w, a.row(t, len));
            }
        }
    };
}
pub(crate) use dot4_by_dot;

/// Four weight rows against one activation row: four single dots.
macro_rules! dotr4_by_dot {
    ($name:ident, $dot:ident) => {
        #[target_feature(enable = "avx2,fma,f16c")]
        pub(crate) fn $name(w: &[u8], row_bytes: usize, a: &[u8], out: &mut [f32; 4]) {
            for (r, o) in out.iter_mut().enumerate() {
                *o = $dot(&w[r * row_bytes..(r + 1) * row_bytes], a);
            }
        }
    };
}
pub(crate) use dotr4_by_dot;
