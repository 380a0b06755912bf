//! Small AVX2 building blocks shared by the kernels. Each mirrors one of ggml's x86 helpers
//! (`hsum_float_8`, `bytes_from_nibbles_32`, `bytes_from_bits_32`, `mul_sum_us8_pairs_float`; the
//! sign trick of `mul_sum_i8_pairs_float` is spelled out in the tile kernels) so the kernels perform the same operations in the same order.

use std::arch::x86_64::*;

use crate::blocks::F16Le;

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
