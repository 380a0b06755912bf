//! Block layouts, byte for byte the same as ggml's (`ggml-common.h`: `block_q4_0` …).
//!
//! Every field is a byte array or a byte-array newtype, so every block type has alignment 1:
//! any `&[u8]` whose length is a whole number of blocks can be viewed as a block slice,
//! wherever it sits in an mmap. Sizes and field offsets equal ggml's; multi-byte fields are
//! little-endian, as in GGUF files.

use bytemuck::{Pod, Zeroable};
use half::f16;

/// Elements in a K-quant super-block.
pub const QK_K: usize = 256;
/// Elements in a legacy (`Q4_0` … `Q8_1`) block.
pub const QK: usize = 32;

/// An IEEE half stored as two little-endian bytes (ggml's `ggml_half`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Pod, Zeroable)]
#[repr(transparent)]
pub struct F16Le(pub [u8; 2]);

impl F16Le {
    /// The raw bits.
    #[inline(always)]
    pub fn bits(self) -> u16 {
        u16::from_le_bytes(self.0)
    }

    /// Exact widening to `f32`.
    #[inline(always)]
    pub fn to_f32(self) -> f32 {
        f16::from_bits(self.bits()).to_f32()
    }

    /// Rounds to nearest, ties to even (what F16C's `vcvtps2ph` with mode 0 does).
    #[inline(always)]
    pub fn from_f32(x: f32) -> F16Le {
        F16Le(f16::from_f32(x).to_bits().to_le_bytes())
    }
}

/// A 32-bit float stored as four little-endian bytes (the `d` of `block_q8_K`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Pod, Zeroable)]
#[repr(transparent)]
pub struct F32Le(pub [u8; 4]);

impl F32Le {
    #[inline(always)]
    pub fn get(self) -> f32 {
        f32::from_le_bytes(self.0)
    }

    #[inline(always)]
    pub fn new(x: f32) -> F32Le {
        F32Le(x.to_le_bytes())
    }
}

/// `Q4_0`: 32 weights `d * (q - 8)`, `q` a nibble; element `j` is the low nibble of `qs[j]`,
/// element `j + 16` its high nibble.
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
#[repr(C)]
#[allow(non_camel_case_types)]
pub struct BlockQ4_0 {
    pub d: F16Le,
    pub qs: [u8; QK / 2],
}

/// `Q4_1`: 32 weights `d * q + m`, nibbles laid out as in [`BlockQ4_0`].
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
#[repr(C)]
#[allow(non_camel_case_types)]
pub struct BlockQ4_1 {
    pub d: F16Le,
    pub m: F16Le,
    pub qs: [u8; QK / 2],
}

/// `Q5_0`: 32 weights `d * (q - 16)`, `q` five bits: nibbles as in [`BlockQ4_0`], bit 4 of
/// element `j` is bit `j` of the little-endian `qh`.
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
#[repr(C)]
#[allow(non_camel_case_types)]
pub struct BlockQ5_0 {
    pub d: F16Le,
    pub qh: [u8; 4],
    pub qs: [u8; QK / 2],
}

/// `Q8_0`: 32 values `d * q`, `q` a signed byte. Also the activation type of `Q4_0`, `Q5_0`
/// and `Q8_0` weights.
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
#[repr(C)]
#[allow(non_camel_case_types)]
pub struct BlockQ8_0 {
    pub d: F16Le,
    pub qs: [i8; QK],
}

/// `Q8_1`: as [`BlockQ8_0`] plus `s = d * sum(qs)` (the activation type of `Q4_1`).
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
#[repr(C)]
#[allow(non_camel_case_types)]
pub struct BlockQ8_1 {
    pub d: F16Le,
    pub s: F16Le,
    pub qs: [i8; QK],
}

/// `Q4_K`: 256 weights in 8 sub-blocks of 32, `d * sc[j] * q - dmin * m[j]`, with 6-bit
/// `sc`/`m` packed into 12 bytes (see [`q4k_scale_min`]). Sub-blocks `2i` and `2i + 1` are
/// the low and high nibbles of `qs[32 i .. 32 i + 32]`.
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
#[repr(C)]
pub struct BlockQ4K {
    pub d: F16Le,
    pub dmin: F16Le,
    pub scales: [u8; 12],
    pub qs: [u8; QK_K / 2],
}

/// `Q6_K`: 256 weights in 16 sub-blocks of 16, `d * sc[j] * (q - 32)`, `q` six bits: low
/// nibbles in `ql`, high two bits in `qh`, `sc` signed bytes.
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
#[repr(C)]
pub struct BlockQ6K {
    pub ql: [u8; QK_K / 2],
    pub qh: [u8; QK_K / 4],
    pub scales: [i8; QK_K / 16],
    pub d: F16Le,
}

/// `Q8_K`: the activation type of the K-quants: 256 values `d * q` with an `f32` scale and
/// the sums of each 16 consecutive `q` (`bsums`, little-endian `i16`).
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
#[repr(C)]
pub struct BlockQ8K {
    pub d: F32Le,
    pub qs: [i8; QK_K],
    pub bsums: [[u8; 2]; QK_K / 16],
}

impl BlockQ8K {
    #[inline(always)]
    pub fn bsum(&self, j: usize) -> i16 {
        i16::from_le_bytes(self.bsums[j])
    }
}

const _: () = assert!(size_of::<BlockQ4_0>() == 18);
const _: () = assert!(size_of::<BlockQ4_1>() == 20);
const _: () = assert!(size_of::<BlockQ5_0>() == 22);
const _: () = assert!(size_of::<BlockQ8_0>() == 34);
const _: () = assert!(size_of::<BlockQ8_1>() == 36);
const _: () = assert!(size_of::<BlockQ4K>() == 144);
const _: () = assert!(size_of::<BlockQ6K>() == 210);
const _: () = assert!(size_of::<BlockQ8K>() == 292);
const _: () = assert!(align_of::<BlockQ8K>() == 1 && align_of::<BlockQ4K>() == 1);

/// Scale and min of sub-block `j` (0..8) of a `Q4_K` block (ggml's `get_scale_min_k4`):
/// bytes 0..4 hold the low 6 bits of scales 0..4 (top 2 bits: high bits of scale 4..8),
/// bytes 4..8 the same for the mins, bytes 8..12 the low nibbles of scales 4..8 and (high
/// nibble) of mins 4..8.
#[inline(always)]
pub fn q4k_scale_min(j: usize, q: &[u8; 12]) -> (u8, u8) {
    if j < 4 {
        (q[j] & 63, q[j + 4] & 63)
    } else {
        (
            (q[j + 4] & 0x0F) | ((q[j - 4] >> 6) << 4),
            (q[j + 4] >> 4) | ((q[j] >> 6) << 4),
        )
    }
}

/// All eight scales and mins of a `Q4_K` block.
#[inline(always)]
pub fn q4k_scales_mins(q: &[u8; 12]) -> ([u8; 8], [u8; 8]) {
    let mut sc = [0u8; 8];
    let mut m = [0u8; 8];
    for j in 0..8 {
        (sc[j], m[j]) = q4k_scale_min(j, q);
    }
    (sc, m)
}

/// Views whole blocks. Block types have alignment 1, so this fails only when `bytes` is not a
/// whole number of blocks, which every caller has checked at the API boundary.
#[inline(always)]
pub(crate) fn as_blocks<B: Pod>(bytes: &[u8]) -> &[B] {
    bytemuck::cast_slice(bytes)
}

#[inline(always)]
pub(crate) fn as_blocks_mut<B: Pod>(bytes: &mut [u8]) -> &mut [B] {
    bytemuck::cast_slice_mut(bytes)
}

/// `bf16` bits to `f32` (exact).
#[inline(always)]
pub fn bf16_to_f32(bits: u16) -> f32 {
    f32::from_bits((bits as u32) << 16)
}

/// `f32` to `bf16` the way ggml does (`ggml_compute_fp32_to_bf16`): round to nearest even,
/// NaN forced quiet.
#[inline(always)]
pub fn f32_to_bf16(x: f32) -> u16 {
    let u = x.to_bits();
    if (u & 0x7fff_ffff) > 0x7f80_0000 {
        return ((u >> 16) | 64) as u16;
    }
    (u.wrapping_add(0x7fff + ((u >> 16) & 1)) >> 16) as u16
}

#[cfg(test)]
mod tests {
    use super::*;
    use half::bf16;

    #[test]
    fn bf16_rounding_matches_half_for_finite_values() {
        for &x in &[
            1.0f32,
            -2.5,
            3.25159,
            1e-30,
            65504.0,
            1.0 + f32::EPSILON * 3.0,
        ] {
            assert_eq!(f32_to_bf16(x), bf16::from_f32(x).to_bits(), "{x}");
        }
        assert_eq!(bf16_to_f32(0x3f80), 1.0);
    }

    #[test]
    fn q4k_scale_unpacking_reads_the_high_bits_from_the_first_eight_bytes() {
        let mut q = [0u8; 12];
        q[0] = 0b1100_0001; // scale 0 = 1, high bits of scale 4 = 3
        q[4] = 0b0100_0010; // min 0 = 2, high bits of min 4 = 1
        q[8] = 0b0101_1010; // scale 4 low = 0xA, min 4 low = 0x5
        assert_eq!(q4k_scale_min(0, &q), (1, 2));
        assert_eq!(q4k_scale_min(4, &q), (0x3A, 0x15));
    }
}
