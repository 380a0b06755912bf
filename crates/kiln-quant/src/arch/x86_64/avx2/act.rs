//! AVX2 activation quantizers: ggml's x86 `quantize_row_q8_0` / `quantize_row_q8_1` and
//! `ggml_cpu_fp32_to_fp16`, operation for operation, and a vectorized `quantize_row_q8_K_ref`. The scalar versions in
//! `scalar::act` emulate these and must produce the same bytes (tested).

use std::arch::x86_64::*;

use super::util::*;
use crate::blocks::{BlockQ8_0, BlockQ8_1, BlockQ8K, F16Le, F32Le, QK, QK_K, as_blocks_mut};

/// `f32` → `f16` bits with F16C, round to nearest even.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn f32_to_f16le(x: f32) -> F16Le {
    let h = _mm_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(_mm_set_ss(x));
    F16Le((_mm_extract_epi16::<0>(h) as u16).to_le_bytes())
}

/// Quantizes one block: returns `d = amax / 127` and the four vectors of `i32` values.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn q8_block(x: &[f32]) -> (f32, [__m256i; 4]) {
    let v = [
        load_f32x8(&x[0..8]),
        load_f32x8(&x[8..16]),
        load_f32x8(&x[16..24]),
        load_f32x8(&x[24..32]),
    ];
    let sign = _mm256_set1_ps(-0.0);
    let mut max_abs = _mm256_andnot_ps(sign, v[0]);
    for vi in &v[1..] {
        max_abs = _mm256_max_ps(max_abs, _mm256_andnot_ps(sign, *vi));
    }
    let mut m4 = _mm_max_ps(
        _mm256_extractf128_ps::<1>(max_abs),
        _mm256_castps256_ps128(max_abs),
    );
    m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
    m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
    let amax = _mm_cvtss_f32(m4);
    let d = amax / 127.0;
    let id = if amax != 0.0 { 127.0 / amax } else { 0.0 };
    let mul = _mm256_set1_ps(id);
    let q = v.map(|vi| {
        let r = _mm256_round_ps::<_MM_FROUND_TO_NEAREST_INT>(_mm256_mul_ps(vi, mul));
        _mm256_cvtps_epi32(r)
    });
    (d, q)
}

/// Saturating pack of 32 `i32` to bytes in element order, stored to `out`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn pack_store(q: [__m256i; 4], out: &mut [i8; QK]) {
    let a = _mm256_packs_epi32(q[0], q[1]);
    let b = _mm256_packs_epi32(q[2], q[3]);
    let p = _mm256_packs_epi16(a, b);
    // The packs work per 128-bit lane; this restores element order.
    let p = _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
    // SAFETY: `out` is 32 writable bytes; the store is unaligned.
    unsafe { _mm256_storeu_si256(out.as_mut_ptr().cast(), p) }
}

#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) fn quantize_q8_0(src: &[f32], dst: &mut [u8]) {
    let dst: &mut [BlockQ8_0] = as_blocks_mut(dst);
    assert_eq!(src.len(), dst.len() * QK);
    for (x, y) in src.chunks_exact(QK).zip(dst) {
        let (d, q) = q8_block(x);
        y.d = f32_to_f16le(d);
        pack_store(q, &mut y.qs);
    }
}

#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) fn quantize_q8_1(src: &[f32], dst: &mut [u8]) {
    let dst: &mut [BlockQ8_1] = as_blocks_mut(dst);
    assert_eq!(src.len(), dst.len() * QK);
    for (x, y) in src.chunks_exact(QK).zip(dst) {
        let (d, q) = q8_block(x);
        y.d = f32_to_f16le(d);
        let s = _mm256_add_epi32(_mm256_add_epi32(q[0], q[1]), _mm256_add_epi32(q[2], q[3]));
        y.s = f32_to_f16le(d * hsum_i32x8(s) as f32);
        pack_store(q, &mut y.qs);
    }
}

#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn hsum_i32x8(a: __m256i) -> i32 {
    let s = _mm_add_epi32(_mm256_castsi256_si128(a), _mm256_extracti128_si256::<1>(a));
    let s = _mm_add_epi32(s, _mm_unpackhi_epi64(s, s));
    let s = _mm_add_epi32(s, _mm_shuffle_epi32::<0b10_11_00_01>(s));
    _mm_cvtsi128_si32(s)
}

/// `ggml_cpu_fp32_to_fp16` with F16C: 8 at a time, round to nearest even.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) fn convert_f16(src: &[f32], dst: &mut [u8]) {
    assert_eq!(src.len() * 2, dst.len());
    let mut xs = src.chunks_exact(8);
    let mut ys = dst.chunks_exact_mut(16);
    for (x, y) in (&mut xs).zip(&mut ys) {
        let h = _mm256_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(load_f32x8(x));
        assert!(y.len() == 16);
        // SAFETY: `y` is 16 writable bytes (asserted); the store is unaligned.
        unsafe { _mm_storeu_si128(y.as_mut_ptr().cast(), h) }
    }
    for (x, y) in xs
        .remainder()
        .iter()
        .zip(ys.into_remainder().chunks_exact_mut(2))
    {
        y.copy_from_slice(&f32_to_f16le(*x).0);
    }
}

/// ggml's `quantize_row_q8_K_ref` (which its x86 build uses for Q8_K), vectorized with the
/// same results: the signed value of largest magnitude (the first on ties; NaN never wins,
/// as in the scalar `>` scan), `iscale = -127 / max`, `q = min(127, round_even(iscale * x))`
/// (ggml's `nearest_int` trick, done the same way), `d = 1 / iscale`, and the
/// sums of each 16 `q`.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) fn quantize_q8_k(src: &[f32], dst: &mut [u8]) {
    let dst: &mut [BlockQ8K] = as_blocks_mut(dst);
    assert_eq!(src.len(), dst.len() * QK_K);
    let abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fff_ffff));
    for (x, y) in src.chunks_exact(QK_K).zip(dst) {
        // amax: `maxps(|x|, acc)` returns `acc` when |x| is NaN, like the scalar scan.
        let mut m = _mm256_setzero_ps();
        for c in x.chunks_exact(8) {
            m = _mm256_max_ps(_mm256_and_ps(load_f32x8(c), abs_mask), m);
        }
        let mut m4 = _mm_max_ps(_mm256_extractf128_ps::<1>(m), _mm256_castps256_ps128(m));
        m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
        m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
        let amax = _mm_cvtss_f32(m4);
        if amax == 0.0 {
            y.d = F32Le::new(0.0);
            y.qs = [0; QK_K];
            y.bsums = [[0; 2]; QK_K / 16];
            continue;
        }
        // The first element whose magnitude is amax, as the scalar scan finds it.
        let target = _mm256_set1_ps(amax);
        let mut max = amax;
        for c in x.chunks_exact(8) {
            let hit = _mm256_cmp_ps::<_CMP_EQ_OQ>(_mm256_and_ps(load_f32x8(c), abs_mask), target);
            let bits = _mm256_movemask_ps(hit);
            if bits != 0 {
                max = c[bits.trailing_zeros() as usize];
                break;
            }
        }
        let iscale = -127.0 / max;
        let mul = _mm256_set1_ps(iscale);
        let magic = _mm256_set1_ps(12_582_912.0);
        let (mant, bias) = (
            _mm256_set1_epi32(0x007f_ffff),
            _mm256_set1_epi32(0x0040_0000),
        );
        let cap = _mm256_set1_epi32(127);
        for (g, (xs, qs)) in x
            .chunks_exact(32)
            .zip(y.qs.chunks_exact_mut(32))
            .enumerate()
        {
            let mut q = [_mm256_setzero_si256(); 4];
            for (k, qk) in q.iter_mut().enumerate() {
                // nearest_int: the same float multiply and add, then the mantissa bits.
                let v = _mm256_add_ps(_mm256_mul_ps(load_f32x8(&xs[8 * k..]), mul), magic);
                let i = _mm256_sub_epi32(_mm256_and_si256(_mm256_castps_si256(v), mant), bias);
                // MIN(127, v), then the int → int8 store keeps the low byte.
                let i = _mm256_min_epi32(i, cap);
                *qk = _mm256_srai_epi32::<24>(_mm256_slli_epi32::<24>(i));
            }
            let s0 = hsum_i32x8(_mm256_add_epi32(q[0], q[1]));
            let s1 = hsum_i32x8(_mm256_add_epi32(q[2], q[3]));
            y.bsums[2 * g] = (s0 as i16).to_le_bytes();
            y.bsums[2 * g + 1] = (s1 as i16).to_le_bytes();
            let out: &mut [i8; 32] = match qs.try_into() {
                Ok(o) => o,
                Err(_) => unreachable!("chunks_exact(32)"),
            };
            // Values are now sign-extended bytes, so the saturating pack is exact.
            pack_store(q, out);
        }
        y.d = F32Le::new(1.0 / iscale);
    }
}
