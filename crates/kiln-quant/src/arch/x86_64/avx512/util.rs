//! Small AVX-512 building blocks shared by the kernels.

use std::arch::x86_64::*;

use bytemuck::Pod;

use crate::blocks::as_blocks;
use crate::table::ActRows;

/// The upper sixteen `i16` lanes of a `zmm` (its upper 256 bits).
pub(crate) const HI_HALF16: __mmask32 = 0xFFFF_0000;

/// 64 bytes from a slice that has at least 64 (checked).
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
pub(crate) fn load512<T: Pod>(p: &[T]) -> __m512i {
    let bytes: &[u8] = bytemuck::cast_slice(p);
    assert!(bytes.len() >= 64);
    // SAFETY: at least 64 readable bytes (asserted); the load is unaligned.
    unsafe { _mm512_loadu_si512(bytes.as_ptr().cast()) }
}

/// Stores 64 bytes into a slice that has at least 64 (checked).
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
pub(crate) fn store512(p: &mut [u8], v: __m512i) {
    assert!(p.len() >= 64);
    // SAFETY: at least 64 writable bytes (asserted); the store is unaligned.
    unsafe { _mm512_storeu_si512(p.as_mut_ptr().cast(), v) }
}

/// Stores 32 bytes into a slice that has at least 32 (checked).
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
pub(crate) fn store256(p: &mut [u8], v: __m256i) {
    assert!(p.len() >= 32);
    // SAFETY: at least 32 writable bytes (asserted); the store is unaligned.
    unsafe { _mm256_storeu_si256(p.as_mut_ptr().cast(), v) }
}

/// 32 bytes from a slice that has at least 32 (checked).
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
pub(crate) fn load256<T: Pod>(p: &[T]) -> __m256i {
    let bytes: &[u8] = bytemuck::cast_slice(p);
    assert!(bytes.len() >= 32);
    // SAFETY: at least 32 readable bytes (asserted); the load is unaligned.
    unsafe { _mm256_loadu_si256(bytes.as_ptr().cast()) }
}

/// 16 bytes from a slice that has at least 16 (checked).
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
pub(crate) fn load128<T: Pod>(p: &[T]) -> __m128i {
    let bytes: &[u8] = bytemuck::cast_slice(p);
    assert!(bytes.len() >= 16);
    // SAFETY: at least 16 readable bytes (asserted); the load is unaligned.
    unsafe { _mm_loadu_si128(bytes.as_ptr().cast()) }
}

/// 32 bytes (checked as in [`load256`]) in both halves of a `zmm`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
pub(crate) fn broadcast32<T: Pod>(p: &[T]) -> __m512i {
    _mm512_broadcast_i64x4(load256(p))
}

/// Two 32-byte groups (checked as in [`load256`]) as the lower and upper half of a `zmm`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
pub(crate) fn join32<T: Pod, U: Pod>(lo: &[T], hi: &[U]) -> __m512i {
    _mm512_inserti64x4::<1>(_mm512_castsi256_si512(load256(lo)), load256(hi))
}

/// The two 256-bit halves of a `zmm` of `i32` lanes added: lane `l` is `x[l] + x[l + 8]`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
pub(crate) fn fold_halves(x: __m512i) -> __m256i {
    _mm256_add_epi32(_mm512_castsi512_si256(x), _mm512_extracti64x4_epi64::<1>(x))
}

/// The halves of two `zmm` of `i32` lanes folded into one: the lower eight lanes are
/// [`fold_halves`]`(a)`, the upper eight `fold_halves(b)`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
pub(crate) fn fold_pair(a: __m512i, b: __m512i) -> __m512i {
    _mm512_add_epi32(
        _mm512_shuffle_i64x2::<0x44>(a, b),
        _mm512_shuffle_i64x2::<0xEE>(a, b),
    )
}

/// The low `i16` of each `i32` lane of `a` and of `b` side by side: lane `k` holds `a[k]`'s
/// in its lower half and `b[k]`'s in its upper (exact for values that fit an `i16`).
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
pub(crate) fn lo16_pairs(a: __m512i, b: __m512i) -> __m512i {
    _mm512_mask_blend_epi16(0xAAAA_AAAA, a, _mm512_slli_epi32::<16>(b))
}

/// `i16` lanes: the even ones from `a`, the odd ones from `b`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
pub(crate) fn scale_pairs(a: __m512i, b: __m512i) -> __m512i {
    _mm512_mask_blend_epi16(0xAAAA_AAAA, a, b)
}

/// 128-bit lane `q` (0..4) of a `zmm` of floats.
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
pub(crate) fn quarter_ps(x: __m512, q: usize) -> __m128 {
    match q {
        0 => _mm512_castps512_ps128(x),
        1 => _mm512_extractf32x4_ps::<1>(x),
        2 => _mm512_extractf32x4_ps::<2>(x),
        _ => _mm512_extractf32x4_ps::<3>(x),
    }
}

/// Eight floats from a slice that has at least eight (checked).
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
pub(crate) fn load_f32x8(p: &[f32]) -> __m256 {
    assert!(p.len() >= 8);
    // SAFETY: at least eight readable floats (asserted); the load is unaligned.
    unsafe { _mm256_loadu_ps(p.as_ptr()) }
}

/// The lower and upper 256 bits of a `zmm` of floats.
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
pub(crate) fn halves_ps(x: __m512) -> (__m256, __m256) {
    (
        _mm512_castps512_ps256(x),
        _mm256_castpd_ps(_mm512_extractf64x4_pd::<1>(_mm512_castps_pd(x))),
    )
}

/// A `vpermd` / `vpermps` index: `a` in the lower eight lanes, `b` in the upper eight.
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
pub(crate) fn pair_index32(a: i32, b: i32) -> __m512i {
    _mm512_mask_blend_epi32(0xFF00, _mm512_set1_epi32(a), _mm512_set1_epi32(b))
}

/// A `vpermd` / `vpermps` index: `k + q` in every lane of 128-bit lane `q`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
pub(crate) fn quad_index32(k: i32) -> __m512i {
    _mm512_add_epi32(
        _mm512_set1_epi32(k),
        _mm512_set_epi32(3, 3, 3, 3, 2, 2, 2, 2, 1, 1, 1, 1, 0, 0, 0, 0),
    )
}

/// A `vpermw` index: `a` in the lower sixteen `i16` lanes, `b` in the upper sixteen.
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
pub(crate) fn pair_index16(a: i16, b: i16) -> __m512i {
    _mm512_inserti64x4::<1>(_mm512_set1_epi16(a), _mm256_set1_epi16(b))
}

/// A `vpermw` index: `k + L` in every lane of 128-bit lane `L`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
pub(crate) fn quad_index16(k: i16) -> __m512i {
    _mm512_add_epi16(
        _mm512_set1_epi16(k),
        _mm512_set_epi64(
            0x0003_0003_0003_0003,
            0x0003_0003_0003_0003,
            0x0002_0002_0002_0002,
            0x0002_0002_0002_0002,
            0x0001_0001_0001_0001,
            0x0001_0001_0001_0001,
            0,
            0,
        ),
    )
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

/// A GEMV entry point made of four single-row dots.
macro_rules! dotr4_by_dot {
    ($name:ident, $dot:ident) => {
        #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
        pub(crate) fn $name(w: &[u8], row_bytes: usize, a: &[u8], out: &mut [f32; 4]) {
            for (r, o) in out.iter_mut().enumerate() {
                *o = $dot(&w[r * row_bytes..(r + 1) * row_bytes], a);
            }
        }
    };
}
pub(crate) use dotr4_by_dot;

/// `vpdpwssd`: `acc + a.lo16 * b.lo16 + a.hi16 * b.hi16` per `i32` lane, as
/// `_mm512_dpwssd_epi32`, written as the instruction itself: the compiler otherwise splits
/// it into `vpmaddwd` + `vpaddd` (one more operation per use in the tiles).
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
pub(crate) fn dpwssd(acc: __m512i, a: __m512i, b: __m512i) -> __m512i {
    let mut acc = acc;
    // SAFETY: a register-only instruction of AVX-512 VNNI, which this function requires.
    unsafe {
        std::arch::asm!(
            "vpdpwssd {acc}, {a}, {b}",
            acc = inout(zmm_reg) acc,
            a = in(zmm_reg) a,
            b = in(zmm_reg) b,
            options(pure, nomem, nostack, preserves_flags),
        );
    }
    acc
}

/// `vpdpwssd` on 256-bit vectors: `acc + a.lo16 * b.lo16 + a.hi16 * b.hi16` per `i32` lane,
/// written as the instruction itself (the compiler otherwise splits it into `vpmaddwd` +
/// `vpaddd`).
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
pub(crate) fn dpwssd256(acc: __m256i, a: __m256i, b: __m256i) -> __m256i {
    let mut acc = acc;
    // SAFETY: a register-only instruction of AVX-512 VNNI + VL, which this function requires.
    unsafe {
        std::arch::asm!(
            "vpdpwssd {acc}, {a}, {b}",
            acc = inout(ymm_reg) acc,
            a = in(ymm_reg) a,
            b = in(ymm_reg) b,
            options(pure, nomem, nostack, preserves_flags),
        );
    }
    acc
}
