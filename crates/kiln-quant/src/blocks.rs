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

/// A block of 32 signed-byte weights with its scale widened: the unpacked form of a Q4_0 /
/// Q5_0 block (the GEMM driver unpacks a weight row into this once per GEMM task, for all
/// its tokens, so the eight-token micro-kernel does not unpack it again for every group of
/// eight tokens).
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
#[repr(C)]
pub struct BlockI8 {
    pub qs: [i8; QK],
    pub d: f32,
}

/// `Q5_1`: 32 weights `d * q + m`, `q` five bits laid out as in [`BlockQ5_0`].
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
#[repr(C)]
#[allow(non_camel_case_types)]
pub struct BlockQ5_1 {
    pub d: F16Le,
    pub m: F16Le,
    pub qh: [u8; 4],
    pub qs: [u8; QK / 2],
}

/// `Q2_K`: 256 weights in 16 sub-blocks of 16, `d * sc[j] * q - dmin * m[j]`, `q` two bits;
/// `scales[j]` holds `sc` (low nibble) and `m` (high nibble). Element `128 h + 32 k + l`
/// (`h` 0..2, `k` 0..4, `l` 0..32) is bits `2k, 2k + 1` of `qs[32 h + l]`.
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
#[repr(C)]
pub struct BlockQ2K {
    pub scales: [u8; QK_K / 16],
    pub qs: [u8; QK_K / 4],
    pub d: F16Le,
    pub dmin: F16Le,
}

/// `Q3_K`: 256 weights in 16 sub-blocks of 16, `d * (sc[j] - 32) * (q - 4 * !h)`: `q` the
/// two low bits (laid out as in [`BlockQ2K`]), `h` the high bit (element `32 g + l` is bit
/// `g` of `hmask[l]`), `sc` six bits packed into 12 bytes (see [`q3k_scales`]).
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
#[repr(C)]
pub struct BlockQ3K {
    pub hmask: [u8; QK_K / 8],
    pub qs: [u8; QK_K / 4],
    pub scales: [u8; 12],
    pub d: F16Le,
}

/// `Q5_K`: as [`BlockQ4K`] with a fifth bit per weight: element `32 g + l` of sub-block `g`
/// has bit `g` of `qh[l]` as its bit 4.
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
#[repr(C)]
pub struct BlockQ5K {
    pub d: F16Le,
    pub dmin: F16Le,
    pub scales: [u8; 12],
    pub qh: [u8; QK_K / 8],
    pub qs: [u8; QK_K / 2],
}

/// `IQ4_NL`: 32 weights `d * IQ4NL_VALUES[q]`, nibbles laid out as in [`BlockQ4_0`].
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
#[repr(C)]
#[allow(non_camel_case_types)]
pub struct BlockIQ4NL {
    pub d: F16Le,
    pub qs: [u8; QK / 2],
}

/// `IQ4_XS`: 256 weights in 8 sub-blocks of 32, `d * (ls[j] - 32) * IQ4NL_VALUES[q]`, `ls`
/// six bits (see [`iq4xs_scale`]); sub-block `j` is laid out as an [`BlockIQ4NL`] in
/// `qs[16 j .. 16 j + 16]`.
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
#[repr(C)]
pub struct BlockIQ4XS {
    pub d: F16Le,
    pub scales_h: [u8; 2],
    pub scales_l: [u8; QK_K / 64],
    pub qs: [u8; QK_K / 2],
}

/// The 16 non-linear levels of `IQ4_NL` / `IQ4_XS` (ggml's `kvalues_iq4nl`).
pub const IQ4NL_VALUES: [i8; 16] = [
    -127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113,
];

const _: () = assert!(size_of::<BlockQ4_0>() == 18);
const _: () = assert!(size_of::<BlockQ4_1>() == 20);
const _: () = assert!(size_of::<BlockQ5_0>() == 22);
const _: () = assert!(size_of::<BlockQ8_0>() == 34);
const _: () = assert!(size_of::<BlockQ8_1>() == 36);
const _: () = assert!(size_of::<BlockQ4K>() == 144);
const _: () = assert!(size_of::<BlockQ6K>() == 210);
const _: () = assert!(size_of::<BlockQ8K>() == 292);
const _: () = assert!(size_of::<BlockQ5_1>() == 24);
const _: () = assert!(size_of::<BlockQ2K>() == 84);
const _: () = assert!(size_of::<BlockQ3K>() == 110);
const _: () = assert!(size_of::<BlockQ5K>() == 176);
const _: () = assert!(size_of::<BlockIQ4NL>() == 18);
const _: () = assert!(size_of::<BlockIQ4XS>() == 136);
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

/// All eight scales and mins of a `Q4_K` block, as [`q4k_scale_min`] gives them one by one,
/// computed four at a time in 32-bit words (a dozen integer operations per block instead of
/// about four per value: at decode this runs once per weight super-block).
#[inline(always)]
pub fn q4k_scales_mins(q: &[u8; 12]) -> ([u8; 8], [u8; 8]) {
    const LOW6: u32 = 0x3F3F_3F3F;
    const LOW4: u32 = 0x0F0F_0F0F;
    const LOW2: u32 = 0x0303_0303;
    let word = |i: usize| u32::from_le_bytes([q[4 * i], q[4 * i + 1], q[4 * i + 2], q[4 * i + 3]]);
    let (u0, u1, u2) = (word(0), word(1), word(2));
    // Bytes 0..4: the low six bits of scales / mins 0..4. Scales / mins 4..8: a nibble of
    // bytes 8..12, and above it the top two bits of bytes 0..4 / 4..8 (per byte lane: the
    // shifts move bits within a byte, the masks drop what crossed from the next byte).
    let sc_lo = u0 & LOW6;
    let m_lo = u1 & LOW6;
    let sc_hi = (u2 & LOW4) | (((u0 >> 6) & LOW2) << 4);
    let m_hi = ((u2 >> 4) & LOW4) | (((u1 >> 6) & LOW2) << 4);
    let join = |lo: u32, hi: u32| (u64::from(lo) | (u64::from(hi) << 32)).to_le_bytes();
    (join(sc_lo, sc_hi), join(m_lo, m_hi))
}

/// The 16 scales of a `Q3_K` block, unbiased (`-32..32`). Bytes 0..8 hold the low nibbles
/// (scale `j` in byte `j % 8`, low nibble for `j < 8`, high nibble above); bytes 8..12 the
/// high two bits (scale `j`'s in byte `8 + j % 4`, bits `2 (j / 4)`, `2 (j / 4) + 1`).
#[inline(always)]
pub fn q3k_scales(q: &[u8; 12]) -> [i8; 16] {
    std::array::from_fn(|j| {
        let lo = if j < 8 { q[j] & 0x0F } else { q[j - 8] >> 4 };
        let hi = (q[8 + j % 4] >> (2 * (j / 4))) & 3;
        (lo | (hi << 4)) as i8 - 32
    })
}

/// The scale of sub-block `j` (0..8) of an `IQ4_XS` block, unbiased (`-32..32`): low nibble
/// from `scales_l[j / 2]` (low or high half), high two bits from bits `2j, 2j + 1` of the
/// little-endian `scales_h`.
#[inline(always)]
pub fn iq4xs_scale(x: &BlockIQ4XS, j: usize) -> i8 {
    let lo = (x.scales_l[j / 2] >> (4 * (j % 2))) & 0x0F;
    let hi = ((u16::from_le_bytes(x.scales_h) >> (2 * j)) & 3) as u8;
    (lo | (hi << 4)) as i8 - 32
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
    fn q4k_scales_and_mins_in_words_equal_the_one_by_one_unpacking() {
        // Every value of every byte position, beside pseudo-random other bytes.
        let mut seed = 0x9E37_79B9_7F4A_7C15u64;
        for pos in 0..12 {
            for v in 0..=255u8 {
                let mut q = [0u8; 12];
                for b in q.iter_mut() {
                    seed = seed
                        .wrapping_mul(6_364_136_223_846_793_005)
                        .wrapping_add(1_442_695_040_888_963_407);
                    *b = (seed >> 56) as u8;
                }
                q[pos] = v;
                let (sc, m) = q4k_scales_mins(&q);
                for j in 0..8 {
                    assert_eq!((sc[j], m[j]), q4k_scale_min(j, &q), "{q:?} sub-block {j}");
                }
            }
        }
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

    #[test]
    fn q3k_scales_take_nibbles_from_the_first_eight_bytes_and_high_bits_from_the_last_four() {
        let mut q = [0u8; 12];
        q[1] = 0x5A; // scale 1 low nibble 0xA, scale 9 low nibble 0x5
        q[6] = 0x3C; // scale 6 low nibble 0xC, scale 14 low nibble 0x3
        q[9] = 0b1110_0100; // high bits: scale 1 → 0, scale 5 → 1, scale 9 → 2, scale 13 → 3
        q[10] = 0b1000_0000; // scale 14 (byte 10, bits 6..8) → 2
        let sc = q3k_scales(&q);
        assert_eq!(sc[1], 0x0A - 32);
        assert_eq!(sc[5], 0x10 - 32);
        assert_eq!(sc[9], 0x25 - 32);
        assert_eq!(sc[13], 0x30 - 32);
        assert_eq!(sc[6], 0x0C - 32);
        assert_eq!(sc[14], 0x23 - 32);
        assert_eq!(sc[0], -32);
    }

    #[test]
    fn iq4xs_scales_combine_a_nibble_with_two_bits_of_scales_h() {
        let mut x = BlockIQ4XS::zeroed();
        x.scales_l = [0x21, 0, 0, 0xF0];
        // Bits 2j, 2j + 1 of scales_h: j = 0 → 0b10, j = 1 → 0b01, j = 7 → 0b11.
        x.scales_h = 0b1100_0000_0000_0110u16.to_le_bytes();
        assert_eq!(iq4xs_scale(&x, 0), (0x1 | 0x20) - 32);
        assert_eq!(iq4xs_scale(&x, 1), (0x2 | 0x10) - 32);
        assert_eq!(iq4xs_scale(&x, 2), -32);
        assert_eq!(iq4xs_scale(&x, 6), -32);
        assert_eq!(iq4xs_scale(&x, 7), (0xF | 0x30) - 32);
    }
}
