//! Small NEON building blocks shared by the kernels. An 8-lane vector of the canonical order
//! (see `scalar::util`) is a pair of 4-lane registers: `.0` holds lanes 0..4 (bytes 0..16 of
//! a 32-byte group), `.1` lanes 4..8.
//!
//! The integer quad sums come from `sdot` when the CPU has `dotprod` (`DP = true`) and from
//! widening multiplies otherwise; integer sums are exact, so both give the same lanes.
//!
//! Everything used by more than one type family lives here (with the views of activation
//! and weight rows the tile kernels take), so the family files never import each other.

use std::arch::aarch64::*;

use bytemuck::Pod;

use crate::blocks::{F16Le, as_blocks};
use crate::table::ActRows;

/// Eight `f32` lanes as two registers.
#[derive(Clone, Copy)]
pub(crate) struct F32x8(pub(crate) float32x4_t, pub(crate) float32x4_t);

/// Eight `i32` lanes as two registers.
#[derive(Clone, Copy)]
pub(crate) struct I32x8(pub(crate) int32x4_t, pub(crate) int32x4_t);

/// 32 signed bytes as two registers.
#[derive(Clone, Copy)]
pub(crate) struct I8x32(pub(crate) int8x16_t, pub(crate) int8x16_t);

#[inline]
#[target_feature(enable = "neon")]
pub(crate) fn zero8() -> F32x8 {
    F32x8(vdupq_n_f32(0.0), vdupq_n_f32(0.0))
}

#[inline]
#[target_feature(enable = "neon")]
pub(crate) fn izero8() -> I32x8 {
    I32x8(vdupq_n_s32(0), vdupq_n_s32(0))
}

/// `sdot` (Armv8.2 dot product): `acc[l] += sum a[4l..4l+4] * b[4l..4l+4]`, wrapping.
///
/// Emitted as a raw instruction word with pinned registers, so this compiles in any
/// function whatever its target features; it must only run where `dotprod` was detected
/// (the kernels take it through `DP = true`, which the table selects only then).
#[inline(always)]
fn sdot_insn(acc: int32x4_t, a: int8x16_t, b: int8x16_t) -> int32x4_t {
    let mut acc = acc;
    // SAFETY: register-only instruction (no memory, no stack, flags untouched). 0x4e829420
    // encodes `sdot v0.4s, v1.16b, v2.16b`; the operands are pinned to those registers. The
    // table hands out `DP = true` kernels only when `is_aarch64_feature_detected!("dotprod")`.
    unsafe {
        std::arch::asm!(
            ".inst 0x4e829420",
            inout("v0") acc,
            in("v1") a,
            in("v2") b,
            options(pure, nomem, nostack, preserves_flags),
        );
    }
    acc
}

/// Quad sums of signed bytes added to `acc`: `acc[l] += sum_{k<4} a[4l+k] * b[4l+k]`.
/// `DP = true` runs `sdot`: only the kernels' `unsafe` entry points, whose contract includes
/// `dotprod`, instantiate it.
#[inline]
#[target_feature(enable = "neon")]
pub(super) fn quads<const DP: bool>(acc: int32x4_t, a: int8x16_t, b: int8x16_t) -> int32x4_t {
    if DP {
        sdot_insn(acc, a, b)
    } else {
        // Products of two i8 fit in i16; pairs then quads are summed exactly in i32.
        let p0 = vmull_s8(vget_low_s8(a), vget_low_s8(b));
        let p1 = vmull_high_s8(a, b);
        vaddq_s32(acc, vpaddq_s32(vpaddlq_s16(p0), vpaddlq_s16(p1)))
    }
}

/// The 8 quad-sum lanes of 32 signed bytes times 32 signed bytes.
#[inline]
#[target_feature(enable = "neon")]
pub(super) fn quads8<const DP: bool>(x: I8x32, y: I8x32) -> I32x8 {
    let z = vdupq_n_s32(0);
    I32x8(quads::<DP>(z, x.0, y.0), quads::<DP>(z, x.1, y.1))
}

/// `acc = fma(d, lanes as f32, acc)` lane by lane (one rounding, like `vfmadd`).
#[inline]
#[target_feature(enable = "neon")]
pub(crate) fn fma8(acc: F32x8, d: f32, q: I32x8) -> F32x8 {
    F32x8(
        vfmaq_n_f32(acc.0, vcvtq_f32_s32(q.0), d),
        vfmaq_n_f32(acc.1, vcvtq_f32_s32(q.1), d),
    )
}

/// `scalar::util::hsum8`: `(a_i + a_{i+4})`, then `(r0 + r2) + (r1 + r3)`.
#[inline]
#[target_feature(enable = "neon")]
pub(crate) fn hsum8(a: F32x8) -> f32 {
    hsum4(vaddq_f32(a.0, a.1))
}

/// `scalar::util::hsum4`: `(a0 + a2) + (a1 + a3)`.
#[inline]
#[target_feature(enable = "neon")]
pub(crate) fn hsum4(r: float32x4_t) -> f32 {
    (vgetq_lane_f32::<0>(r) + vgetq_lane_f32::<2>(r))
        + (vgetq_lane_f32::<1>(r) + vgetq_lane_f32::<3>(r))
}

/// Exact `f16` → `f32` with the base-FP `fcvt` (no `fp16` extension needed).
#[inline]
#[target_feature(enable = "neon")]
pub(crate) fn f16_to_f32(h: F16Le) -> f32 {
    let bits = h.bits() as u32;
    let out: f32;
    // SAFETY: register-only instructions (no memory, no stack, flags untouched); `fmov`
    // (general → single) and `fcvt` (half → single) are Armv8.0 floating point.
    unsafe {
        std::arch::asm!(
            "fmov {t:s}, {b:w}",
            "fcvt {o:s}, {t:h}",
            b = in(reg) bits,
            t = out(vreg) _,
            o = out(vreg) out,
            options(pure, nomem, nostack, preserves_flags),
        );
    }
    out
}

/// 16 bytes from the start of a slice that has at least 16 (checked).
#[inline]
#[target_feature(enable = "neon")]
pub(crate) fn load16<T: bytemuck::Pod>(p: &[T]) -> uint8x16_t {
    let bytes: &[u8] = bytemuck::cast_slice(p);
    assert!(bytes.len() >= 16);
    // SAFETY: at least 16 readable bytes (asserted); `ld1` has no alignment requirement.
    unsafe { vld1q_u8(bytes.as_ptr()) }
}

/// 32 bytes from the start of a slice that has at least 32 (checked), as signed bytes.
#[inline]
#[target_feature(enable = "neon")]
pub(crate) fn load_i8x32<T: bytemuck::Pod>(p: &[T]) -> I8x32 {
    let bytes: &[u8] = bytemuck::cast_slice(p);
    assert!(bytes.len() >= 32);
    I8x32(
        vreinterpretq_s8_u8(load16(&bytes[..16])),
        vreinterpretq_s8_u8(load16(&bytes[16..32])),
    )
}

/// 4 floats from the start of a slice that has at least 4 (checked).
#[inline]
#[target_feature(enable = "neon")]
pub(crate) fn load_f32x4(src: &[f32]) -> float32x4_t {
    assert!(src.len() >= 4);
    // SAFETY: at least 4 readable floats (asserted); `ld1` has no alignment requirement.
    unsafe { vld1q_f32(src.as_ptr()) }
}

/// The 32 nibbles of 16 bytes in element order: low nibbles (elements 0..16), then high
/// nibbles (16..32), as Q4_0/Q4_1/Q5_0 lay them out.
#[inline]
#[target_feature(enable = "neon")]
pub(crate) fn nibbles32(p: &[u8; 16]) -> I8x32 {
    let t = load16(p);
    I8x32(
        vreinterpretq_s8_u8(vandq_u8(t, vdupq_n_u8(0x0F))),
        vreinterpretq_s8_u8(vshrq_n_u8::<4>(t)),
    )
}

/// Spreads the 32 bits of the little-endian `p` to 32 bytes: byte `j` is `0x10` when bit
/// `j` is set, else 0 (Q5_0's fifth bit, in place).
#[inline]
#[target_feature(enable = "neon")]
pub(crate) fn bit4_of_32(p: &[u8; 4]) -> I8x32 {
    let v = vreinterpretq_u8_u32(vdupq_n_u32(u32::from_le_bytes(*p)));
    let idx_lo: [u8; 16] = [0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1];
    let idx_hi: [u8; 16] = [2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3];
    let bit: [u8; 16] = [1, 2, 4, 8, 16, 32, 64, 128, 1, 2, 4, 8, 16, 32, 64, 128];
    let bit = load16(&bit);
    let spread = |idx: &[u8; 16]| {
        let bytes = vqtbl1q_u8(v, load16(idx));
        vreinterpretq_s8_u8(vandq_u8(vtstq_u8(bytes, bit), vdupq_n_u8(0x10)))
    };
    I8x32(spread(&idx_lo), spread(&idx_hi))
}

// ---------------------------------------------------------------- activation and weight rows

/// The four activation rows of a `dot4` call, each `n` blocks long.
#[inline(always)]
pub(crate) fn rows4<'a, B: Pod>(a: &ActRows<'a>, n: usize) -> [&'a [B]; 4] {
    let len = n * size_of::<B>();
    std::array::from_fn(|t| as_blocks(a.row(t, len)))
}

/// `R` consecutive weight rows of `row_bytes` each, as blocks.
#[inline(always)]
pub(crate) fn weight_rows<const R: usize, B: Pod>(w: &[u8], row_bytes: usize) -> [&[B]; R] {
    std::array::from_fn(|r| as_blocks(&w[r * row_bytes..(r + 1) * row_bytes]))
}

/// The three entry points of a weight type with an `R × T` tile kernel
/// `$tile::<R, T, PRE, DP, ..>(weight rows, activation rows, widened scales, ..)`: `dot`
/// (1 × 1), the GEMV kernel `dotr4` (4 × 1) and the GEMM micro-kernel `dot4` (1 × 4, with
/// the tokens' scales widened by the driver, `$per` values per block, and `PRE = true`).
/// `[$generics]` are the tile's further generic arguments, `$extra` its further arguments.
macro_rules! tile_entry_points {
    (
        $dot:ident, $dotr4:ident, $dot4:ident,
        $tile:ident[$($generics:tt)*]($wb:ty, $ab:ty, scales per block $per:expr $(, $extra:expr)*)
    ) => {
        /// # Safety
        /// The CPU must have NEON and, for `DP = true`, `dotprod`.
        #[target_feature(enable = "neon")]
        pub(crate) unsafe fn $dot<const DP: bool>(w: &[u8], a: &[u8]) -> f32 {
            let w: &[$wb] = as_blocks(w);
            let y: &[$ab] = as_blocks(a);
            $tile::<1, 1, false, DP $($generics)*>([w], [y], [&[]] $(, $extra)*)[0][0]
        }

        /// # Safety
        /// The CPU must have NEON and, for `DP = true`, `dotprod`.
        #[target_feature(enable = "neon")]
        pub(crate) unsafe fn $dotr4<const DP: bool>(
            w: &[u8],
            row_bytes: usize,
            a: &[u8],
            out: &mut [f32; 4],
        ) {
            let w = weight_rows::<4, $wb>(w, row_bytes);
            let y: &[$ab] = as_blocks(a);
            let o = $tile::<4, 1, false, DP $($generics)*>(w, [y], [&[]] $(, $extra)*);
            for r in 0..4 {
                out[r] = o[r][0];
            }
        }

        /// # Safety
        /// The CPU must have NEON and, for `DP = true`, `dotprod`.
        #[target_feature(enable = "neon")]
        pub(crate) unsafe fn $dot4<const DP: bool>(w: &[u8], a: ActRows<'_>, out: &mut [f32; 4]) {
            let w: &[$wb] = as_blocks(w);
            let ys = rows4::<$ab>(&a, w.len());
            let sc: [&[f32]; 4] = std::array::from_fn(|t| a.scales(t, $per * w.len()));
            *out = $tile::<1, 4, true, DP $($generics)*>([w], ys, sc $(, $extra)*)[0];
        }
    };
}
pub(crate) use tile_entry_points;
