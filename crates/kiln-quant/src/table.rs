//! The shape of a kernel table: the kernel signatures, the activation rows the GEMM
//! micro-kernels read, and [`Kernels`] with the setters an ISA's table is built with
//! (`inherit` + `set_*`). A leaf: the scalar and SIMD tables (`crate::scalar`,
//! `crate::arch`) and the checked entry points and dispatch (`crate::kernels`) all build on
//! it, and it on none of them.

use crate::isa::Isa;
use crate::types::{AType, WType};

/// Quantizes one row of activations (`src.len()` a whole number of blocks) into `dst`
/// (exactly the row's bytes).
pub(crate) type ActFn = unsafe fn(src: &[f32], dst: &mut [u8]);
/// Dequantizes whole blocks; `dst.len()` is the number of elements in `src`.
pub(crate) type DequantFn = unsafe fn(src: &[u8], dst: &mut [f32]);
/// Dot of one weight row with one activation row of the weight's `vec_dot_type`.
pub(crate) type DotFn = unsafe fn(w: &[u8], a: &[u8]) -> f32;
/// Dots of four consecutive weight rows (`w` holds them, `row_bytes` apart) with one
/// activation row: the GEMV kernel. Each result must equal [`DotFn`]'s bit for bit.
pub(crate) type DotRowsFn = unsafe fn(w: &[u8], row_bytes: usize, a: &[u8], out: &mut [f32; 4]);
/// Dots of one weight row with four activation rows. Each result must equal [`DotFn`]'s bit
/// for bit (same operations in the same order).
pub(crate) type Dot4Fn = unsafe fn(w: &[u8], a: ActRows<'_>, out: &mut [f32; 4]);
/// Dots of one weight row with eight activation rows: the wide GEMM micro-kernel of the types
/// whose weight unpacking is costly enough that sharing it over eight tokens pays. Each
/// result must equal [`DotFn`]'s bit for bit.
pub(crate) type Dot8Fn = unsafe fn(w: &[u8], a: ActRows<'_>, out: &mut [f32; 8]);

/// Dots of two consecutive weight rows (`w` holds them, `row_bytes` apart) with eight
/// activation rows: the two-row GEMM tile, which loads each activation vector once for both
/// rows. `out[r][t]` must equal [`DotFn`]'s result for row `r`, token `t` bit for bit.
pub(crate) type Dot8R2Fn =
    unsafe fn(w: &[u8], row_bytes: usize, a: ActRows<'_>, out: &mut [[f32; 8]; 2]);

/// Dots of four consecutive weight rows (`w` holds them, `row_bytes` apart) with eight
/// activation rows: the four-row GEMM tile over rows as stored. `out[r][t]` must equal
/// [`DotFn`]'s result for row `r`, token `t` bit for bit.
pub(crate) type Dot8R4Fn =
    unsafe fn(w: &[u8], row_bytes: usize, a: ActRows<'_>, out: &mut [[f32; 8]; 4]);

/// Unpacks two consecutive weight rows (`w` holds them, `row_bytes` apart) into the layout
/// of the type's [`Dot8R2UnpackedFn`] (`out` holds the table's bytes per super-block for
/// each super-block of a row).
pub(crate) type PairUnpackFn = unsafe fn(w: &[u8], row_bytes: usize, out: &mut [u8]);

/// The two-row × eight-token tile over a row pair unpacked by the matching
/// [`PairUnpackFn`] (`wu`, whole super-blocks). `out[r][t]` must equal [`DotFn`]'s result for
/// row `r`, token `t` bit for bit.
pub(crate) type Dot8R2UnpackedFn = unsafe fn(wu: &[u8], a: ActRows<'_>, out: &mut [[f32; 8]; 2]);

/// Unpacks one to four consecutive weight rows (`w` holds them, `row_bytes` apart; a
/// shorter group is padded with rows of zeros) into the layout of the type's
/// [`Dot8R4GroupedFn`] (`out`: [`QuadUnpacked::group_bytes`] for the row length).
pub(crate) type QuadUnpackFn = unsafe fn(w: &[u8], row_bytes: usize, out: &mut [u8]);

/// The four-row × eight-token tile over four rows unpacked by the matching
/// [`QuadUnpackFn`] (`wu`; the row length is the activations', `a.sc8.len() / 8` blocks).
/// `out[r][t]` must equal [`DotFn`]'s result for row `r`, token `t` bit for bit.
pub(crate) type Dot8R4GroupedFn = unsafe fn(wu: &[u8], a: ActRows<'_>, out: &mut [[f32; 8]; 4]);

/// Unpacks a weight row into [`crate::blocks::BlockI8`] blocks (`out` holds one per block):
/// the values and scales the type's dot kernels use, exactly.
pub(crate) type UnpackFn = unsafe fn(w: &[u8], out: &mut [crate::blocks::BlockI8]);

/// Activation rows for the GEMM micro-kernels (four or eight): row `t` is
/// `a[t * stride..][..row_bytes]`.
/// For Q8_0/Q8_1/Q8_K activations `sc` also holds each row's block scales widened to `f32` (see
/// [`act_scales`]), row `t` at `t * sc_stride`, so the micro-kernel, which reuses each
/// activation row for many weight rows, does not convert them again for every weight row.
///
/// For the eight-token kernels `sc8` holds the same scales interleaved across the eight
/// rows, scale `j` of row `t` at `j * 8 + t` (see [`interleave8`]), so that one load gives
/// a block's scale for all eight tokens; it is empty for the four-token kernels.
///
/// For the eight-token kernels of Q8_K, Q8_0 and Q8_1 activations `lay8` holds the eight
/// rows' values once more, laid out for the AVX-512 tiles ([`lay8_group_bytes`] per group of
/// eight rows; see [`interleave8_q8k`], [`interleave8_q80`], [`interleave8_q81`]; the AVX2
/// Q4_K tile reads only the Q8_K layout's pair sums); it is empty otherwise.
#[derive(Clone, Copy)]
pub(crate) struct ActRows<'a> {
    pub(crate) a: &'a [u8],
    pub(crate) stride: usize,
    pub(crate) sc: &'a [f32],
    pub(crate) sc_stride: usize,
    pub(crate) sc8: &'a [f32],
    pub(crate) lay8: &'a [u8],
}

impl<'a> ActRows<'a> {
    /// Row `t` (`len` bytes).
    #[inline(always)]
    pub(crate) fn row(&self, t: usize, len: usize) -> &'a [u8] {
        &self.a[t * self.stride..t * self.stride + len]
    }

    /// Scales of row `t` (`len` values).
    #[inline(always)]
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
    pub(crate) fn scales(&self, t: usize, len: usize) -> &'a [f32] {
        &self.sc[t * self.sc_stride..t * self.sc_stride + len]
    }
}

/// Number of `f32` scales [`act_scales`] writes for a row of `n_blocks` blocks of `a`.
pub(crate) fn act_scale_count(a: AType, n_blocks: usize) -> usize {
    match a {
        // One-element blocks: every value, widened.
        AType::Q8_0 | AType::Q8_K | AType::F16 | AType::BF16 => n_blocks,
        AType::Q8_1 => 2 * n_blocks,
        _ => 0,
    }
}

/// Widens the block scales of one activation row: Q8_0 → `d` per block, Q8_1 → `d, s` per
/// block (exact conversions), Q8_K → its `f32` `d` per block (a copy, so the eight-token
/// kernels load eight tokens' scales at once from `sc8`); F16 and BF16 → every value
/// widened (exact), so the GEMM micro-kernels, which reuse an activation row for many
/// weight rows, do not convert it again for each; nothing for the other types.
pub(crate) fn act_scales(a: AType, row: &[u8], out: &mut [f32]) {
    use crate::blocks::{BlockQ8_0, BlockQ8_1, BlockQ8K, as_blocks};
    match a {
        // The widenings are exact (the same values as the scalar dequantizers give); written
        // here so this leaf module needs no kernel module.
        AType::F16 => {
            for (o, b) in out.iter_mut().zip(row.chunks_exact(2)) {
                *o = half::f16::from_bits(u16::from_le_bytes([b[0], b[1]])).to_f32();
            }
        }
        AType::BF16 => {
            for (o, b) in out.iter_mut().zip(row.chunks_exact(2)) {
                *o = crate::blocks::bf16_to_f32(u16::from_le_bytes([b[0], b[1]]));
            }
        }
        AType::Q8_0 => {
            for (o, b) in out.iter_mut().zip(as_blocks::<BlockQ8_0>(row)) {
                *o = b.d.to_f32();
            }
        }
        AType::Q8_1 => {
            for (o, b) in out.chunks_exact_mut(2).zip(as_blocks::<BlockQ8_1>(row)) {
                o[0] = b.d.to_f32();
                o[1] = b.s.to_f32();
            }
        }
        AType::Q8_K => {
            for (o, b) in out.iter_mut().zip(as_blocks::<BlockQ8K>(row)) {
                *o = b.d.get();
            }
        }
        _ => {}
    }
}

/// Interleaves the scales of eight rows (`sc`, row `t` at `t * n_sc`, `n_sc` each) into
/// `out` (`8 * n_sc`): scale `j` of row `t` at `j * 8 + t`.
pub(crate) fn interleave8(sc: &[f32], n_sc: usize, out: &mut [f32]) {
    for (j, o) in out[..8 * n_sc].chunks_exact_mut(8).enumerate() {
        for (t, v) in o.iter_mut().enumerate() {
            *v = sc[t * n_sc + j];
        }
    }
}

/// Bytes per super-block of [`interleave8_q8k`]'s layout: eight tokens' 256 values, then
/// their eight `bsums` pair sums.
pub(crate) const Q8K8_BLOCK_BYTES: usize = 8 * 256 + 8 * 16;

/// Lays out eight Q8_K rows (`rows`, row `t` at `t * stride`, `nb` blocks each) for the
/// AVX-512 Q4_K tile (the AVX2 one reads only the pair sums), `Q8K8_BLOCK_BYTES` per
/// super-block `i` from `i * Q8K8_BLOCK_BYTES`: the 256 values of token `t` offset to
/// unsigned bytes (`y + 128`, so `y ^ 0x80`) at `256 t`, then from `2048 + 16 t` the
/// token's eight pair sums `bsum_2k + bsum_2k+1` wrapped to `i16` (as `hadd_epi16` forms
/// them), little-endian. The tile's integer sums are then of unsigned activations and
/// non-negative, which it corrects exactly.
pub(crate) fn interleave8_q8k(rows: &[u8], stride: usize, nb: usize, out: &mut [u8]) {
    use crate::blocks::{BlockQ8K, as_blocks};
    let out = &mut out[..nb * Q8K8_BLOCK_BYTES];
    for t in 0..8 {
        let row: &[BlockQ8K] =
            as_blocks(&rows[t * stride..t * stride + nb * size_of::<BlockQ8K>()]);
        for (b, o) in row.iter().zip(out.chunks_exact_mut(Q8K8_BLOCK_BYTES)) {
            for (d, &q) in o[256 * t..256 * t + 256].iter_mut().zip(&b.qs) {
                *d = (q as u8) ^ 0x80;
            }
            for k in 0..8 {
                let s = b.bsum(2 * k).wrapping_add(b.bsum(2 * k + 1));
                let at = 2048 + 16 * t + 2 * k;
                o[at..at + 2].copy_from_slice(&s.to_le_bytes());
            }
        }
    }
}

/// Bytes per value block of the layout of [`interleave8_q81`], and of the values of
/// [`interleave8_q80`]'s: eight tokens' 32 values.
pub(crate) const Q808_BLOCK_BYTES: usize = 8 * 32;

/// Bytes per block of [`interleave8_q80`]'s layout: eight tokens' 32 values, then their
/// quads' sums.
pub(crate) const Q80_LAY_BLOCK_BYTES: usize = 2 * Q808_BLOCK_BYTES;

/// Bytes of the `lay8` layout of one group of eight activation rows of `nb` blocks of `a`
/// (zero for the types that have none).
pub(crate) fn lay8_group_bytes(a: AType, nb: usize) -> usize {
    match a {
        AType::Q8_K => nb * Q8K8_BLOCK_BYTES,
        AType::Q8_0 => (nb * Q80_LAY_BLOCK_BYTES + nb).next_multiple_of(64),
        AType::Q8_1 => nb * Q808_BLOCK_BYTES,
        _ => 0,
    }
}

/// Where quad `q` (values `4q..4q + 4`) of token `t`'s block goes in a group's block of the
/// layout of [`interleave8_q81`]: vector `q mod 4`, 32-bit lane `2t + q / 4`, as a byte
/// offset.
#[inline(always)]
fn quad_lane(t: usize, q: usize) -> usize {
    64 * (q % 4) + 4 * (2 * t + q / 4)
}

/// Lays out eight Q8_0 rows (`rows`, row `t` at `t * stride`, `nb` blocks each) for the
/// AVX-512 four-row tiles of the signed-weight types, [`lay8_group_bytes`] in all: block `i`
/// at [`Q80_LAY_BLOCK_BYTES`]` · i` as four 64-byte vectors, vector `k` holding in its
/// 64-bit lane `t` token `t`'s values `8k..8k + 8` (its quads `2k` and `2k + 1`) as signed
/// bytes, then four more vectors holding in their 32-bit lanes `2t + h` the negated sums of
/// quad `2k + h` as `i32` (the tiles' offset for weights stored as unsigned codes); then
/// from [`Q80_LAY_BLOCK_BYTES`]` · nb` one byte per block, 1 where some token's block holds
/// a `-128` (which AVX2's sign trick treats apart), else 0.
pub(crate) fn interleave8_q80(rows: &[u8], stride: usize, nb: usize, out: &mut [u8]) {
    use crate::blocks::{BlockQ8_0, as_blocks};
    let out = &mut out[..lay8_group_bytes(AType::Q8_0, nb)];
    let (vals, flags) = out.split_at_mut(nb * Q80_LAY_BLOCK_BYTES);
    flags.fill(0);
    for t in 0..8 {
        let row: &[BlockQ8_0] =
            as_blocks(&rows[t * stride..t * stride + nb * size_of::<BlockQ8_0>()]);
        for (i, (b, o)) in row
            .iter()
            .zip(vals.chunks_exact_mut(Q80_LAY_BLOCK_BYTES))
            .enumerate()
        {
            let (ys, sums) = o.split_at_mut(Q808_BLOCK_BYTES);
            for (q, quad) in b.qs.chunks_exact(4).enumerate() {
                // Vector `q / 2`, 32-bit lane `2t + q mod 2`.
                let at = 64 * (q / 2) + 4 * (2 * t + q % 2);
                for (d, &y) in ys[at..at + 4].iter_mut().zip(quad) {
                    *d = y as u8;
                }
                let s: i32 = quad.iter().map(|&y| i32::from(y)).sum();
                sums[at..at + 4].copy_from_slice(&(-s).to_le_bytes());
            }
            if b.qs.contains(&i8::MIN) {
                flags[i] = 1;
            }
        }
    }
}

/// Lays out eight Q8_1 rows (`rows`, row `t` at `t * stride`, `nb` blocks each) for the
/// AVX-512 four-row tile of Q4_1, [`Q808_BLOCK_BYTES`] per block: four 64-byte vectors,
/// vector `k` holding in its 32-bit lane `2t + h` the four values `4 (k + 4h) ..` of token
/// `t`'s block (its quad `k + 4h`) as signed bytes.
pub(crate) fn interleave8_q81(rows: &[u8], stride: usize, nb: usize, out: &mut [u8]) {
    use crate::blocks::{BlockQ8_1, as_blocks};
    let out = &mut out[..lay8_group_bytes(AType::Q8_1, nb)];
    for t in 0..8 {
        let row: &[BlockQ8_1] =
            as_blocks(&rows[t * stride..t * stride + nb * size_of::<BlockQ8_1>()]);
        for (b, o) in row.iter().zip(out.chunks_exact_mut(Q808_BLOCK_BYTES)) {
            for q in 0..8 {
                let at = quad_lane(t, q);
                for (d, &y) in o[at..at + 4].iter_mut().zip(&b.qs[4 * q..4 * q + 4]) {
                    *d = y as u8;
                }
            }
        }
    }
}

/// 64 bytes on a 64-byte boundary: the unit of the row-pair layouts ([`PairUnpacked`]), so a
/// buffer of them holds whole cache lines.
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
#[repr(C, align(64))]
pub(crate) struct Line64(pub(crate) [u8; 64]);

/// One kernel and the ISA whose code it is.
#[derive(Clone, Copy)]
pub(crate) struct Imp<F> {
    pub(crate) isa: Isa,
    pub(crate) f: F,
}

#[derive(Clone, Copy)]
pub(crate) struct WeightKernels {
    pub(crate) dequant: Imp<DequantFn>,
    pub(crate) dot: Imp<DotFn>,
    pub(crate) dotr4: Imp<DotRowsFn>,
    pub(crate) dot4: Imp<Dot4Fn>,
    /// The eight-token GEMM micro-kernel, where one exists (the driver then takes tokens
    /// eight at a time, and the rest four at a time).
    pub(crate) dot8: Option<Imp<Dot8Fn>>,
    /// Whether `dot8` reads the activations' `lay8` layout when it is there (the AVX2
    /// Q4_K tile takes each token's `bsums` pair sums from it instead of forming them again
    /// for every weight row). The matmul scratch lays it out only for a table that reads it.
    /// True only beside a `dot8`: `set_dot8_reading_lay8` sets both, `set_dot8` clears it.
    pub(crate) dot8_reads_lay8: bool,
    /// GEMM micro-kernels for two and for three tokens (the first two or three outputs of
    /// a four-token call's), where they exist: the driver then runs two or three tokens
    /// left after its wider calls with them, not a four- or eight-token call over padding.
    /// For a table whose wide kernels cost per (row, token) about what these do, padding is
    /// pure waste; with a few tokens the weight stream, not the arithmetic, then sets the
    /// pace (speculative verification, a few sequences decoding together).
    pub(crate) dot23: Option<(Imp<Dot4Fn>, Imp<Dot4Fn>)>,
    /// For types whose unpacking dominates: an unpacker to [`crate::blocks::BlockI8`] rows
    /// and an eight-token micro-kernel over such rows. The driver unpacks each weight row
    /// once per GEMM task (for all its tokens) and runs this instead of `dot8` when the
    /// task has at least [`crate::matmul::UNPACK_MIN_GROUPS`] groups of eight tokens (or
    /// the type has no `dot8`); results equal `dot` bit for bit.
    pub(crate) dot8_unpacked: Option<(Imp<UnpackFn>, Imp<Dot8Fn>)>,
    /// The four-row × eight-token tile over groups of four rows unpacked once per row block,
    /// where one exists (the driver then takes every group of eight tokens with it, a row
    /// block's last group of rows padded to four, before any other eight-token kernel).
    pub(crate) dot8r4_grouped: Option<QuadUnpacked>,
    /// The two-row × eight-token tile, where one exists (then the driver takes weight rows
    /// two at a time with it, and an odd last row with `dot8`, which the type must have).
    pub(crate) dot8r2: Option<Imp<Dot8R2Fn>>,
    /// The four-row × eight-token tile over rows as stored, where one exists (then the
    /// driver takes weight rows four at a time with it, the rest with `dot8r2` and `dot8`).
    pub(crate) dot8r4: Option<Imp<Dot8R4Fn>>,
    /// The two-row × eight-token tile over row pairs unpacked once per row block, where one
    /// exists (instead of `dot8r2`; an odd last row then takes `dot8`, which the type must
    /// have). The driver unpacks each row pair of a GEMM task's row block once, for all the
    /// task's groups of eight tokens.
    pub(crate) dot8r2_unpacked: Option<PairUnpacked>,
}

/// A row-pair unpacker, the tile over its output, and the bytes of that output per
/// super-block (a multiple of 64: the layout is read as 64-byte lines).
#[derive(Clone, Copy)]
pub(crate) struct PairUnpacked {
    pub(crate) unpack: Imp<PairUnpackFn>,
    pub(crate) tile: Imp<Dot8R2UnpackedFn>,
    pub(crate) block_bytes: usize,
}

/// A four-row unpacker, the tile over its output, and the bytes of that output per block
/// column of the four rows.
#[derive(Clone, Copy)]
pub(crate) struct QuadUnpacked {
    pub(crate) unpack: Imp<QuadUnpackFn>,
    pub(crate) tile: Imp<Dot8R4GroupedFn>,
    pub(crate) block_bytes: usize,
}

impl QuadUnpacked {
    /// Bytes of one group of four unpacked rows of `nb` blocks (whole 64-byte lines).
    pub(crate) fn group_bytes(&self, nb: usize) -> usize {
        (nb * self.block_bytes).next_multiple_of(64)
    }
}

/// The kernels for one instruction set. Obtain with [`kernels`] (the process's choice) or
/// [`kernels_for`] (a specific ISA, e.g. in tests and benchmarks).
pub struct Kernels {
    pub(crate) isa: Isa,
    /// Indexed by `AType as usize`.
    pub(crate) act: [Imp<ActFn>; AType::COUNT],
    /// Indexed by `WType as usize`.
    pub(crate) weights: [WeightKernels; WType::COUNT],
}

/// Building an ISA's table from its parent's: every entry starts as the parent's kernel (and
/// keeps saying which ISA implements it), and each setter replaces one with code of the new
/// table's ISA. So a table lists only what its ISA implements, and an entry it does not set
/// is its parent's, honestly reported by [`Kernels::implementations`].
impl Kernels {
    /// A table for `isa` that starts as `parent` (the scalar table, or another table of the
    /// same architecture whose ISA `isa` implies).
    pub(crate) const fn inherit(parent: Kernels, isa: Isa) -> Kernels {
        Kernels { isa, ..parent }
    }

    /// Whether a kernel of this table reads the `lay8` layout of activations of type `a`:
    /// the eight-token tiles over row layouts (`dot8r2_unpacked`, `dot8r4_grouped`) of the
    /// weight types whose activations are `a` do, and a `dot8` set with
    /// [`Kernels::set_dot8_reading_lay8`]. The matmul scratch lays them out only then.
    pub(crate) fn reads_lay8(&self, a: AType) -> bool {
        WType::ALL.iter().any(|&w| {
            let k = &self.weights[w as usize];
            w.act() == a
                && (k.dot8r2_unpacked.is_some()
                    || k.dot8r4_grouped.is_some()
                    || k.dot8r4.is_some()
                    || k.dot8_reads_lay8)
        })
    }

    const fn own<F>(&self, f: F) -> Imp<F> {
        Imp { isa: self.isa, f }
    }

    /// Replaces the activation converter of `a`.
    pub(crate) const fn set_quantize(&mut self, a: AType, f: ActFn) {
        self.act[a as usize] = self.own(f);
    }

    /// Replaces the dequantizer of `w`.
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
    pub(crate) const fn set_dequant(&mut self, w: WType, f: DequantFn) {
        self.weights[w as usize].dequant = self.own(f);
    }

    /// Replaces the dot product of `w` and its GEMV and GEMM kernels (which must equal the dot
    /// bit for bit).
    pub(crate) const fn set_dots(&mut self, w: WType, dot: DotFn, dotr4: DotRowsFn, dot4: Dot4Fn) {
        let k = &mut self.weights[w as usize];
        k.dot = Imp {
            isa: self.isa,
            f: dot,
        };
        k.dotr4 = Imp {
            isa: self.isa,
            f: dotr4,
        };
        k.dot4 = Imp {
            isa: self.isa,
            f: dot4,
        };
    }

    /// Replaces only the GEMV tile (four rows × one token) of `w`: its dot stays the parent's,
    /// and the tile must equal that dot bit for bit.
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
    pub(crate) const fn set_dotr4(&mut self, w: WType, dotr4: DotRowsFn) {
        self.weights[w as usize].dotr4 = self.own(dotr4);
    }

    /// Gives `w` an eight-token GEMM micro-kernel.
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
    pub(crate) const fn set_dot8(&mut self, w: WType, dot8: Dot8Fn) {
        self.weights[w as usize].dot8 = Some(self.own(dot8));
        self.weights[w as usize].dot8_reads_lay8 = false;
        self.weights[w as usize].dot8_unpacked = None;
        self.weights[w as usize].dot8r4_grouped = None;
        self.weights[w as usize].dot8r2 = None;
        self.weights[w as usize].dot8r4 = None;
        self.weights[w as usize].dot8r2_unpacked = None;
    }

    /// [`Kernels::set_dot8`] with a kernel that reads the activations' `lay8` layout when
    /// the driver gives one (and must agree with the dot without it too).
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
    pub(crate) const fn set_dot8_reading_lay8(&mut self, w: WType, dot8: Dot8Fn) {
        self.set_dot8(w, dot8);
        self.weights[w as usize].dot8_reads_lay8 = true;
    }

    /// Gives `w` a two-row × eight-token GEMM tile (`w` must have a `dot8`, set first: a
    /// later `set_dot8` or `set_dot8_unpacked` removes the tile, which must agree with it).
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
    pub(crate) const fn set_dot8r2(&mut self, w: WType, tile: Dot8R2Fn) {
        match self.weights[w as usize].dot8 {
            Some(_) => self.weights[w as usize].dot8r2 = Some(self.own(tile)),
            None => panic!("set_dot8r2: the type has no eight-token kernel"),
        }
        self.weights[w as usize].dot8r2_unpacked = None;
    }

    /// Gives `w` a four-row × eight-token tile over rows as stored. `w` must have a `dot8`,
    /// set first (for rows left after whole groups of four).
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
    pub(crate) const fn set_dot8r4(&mut self, w: WType, tile: Dot8R4Fn) {
        match self.weights[w as usize].dot8 {
            Some(_) => self.weights[w as usize].dot8r4 = Some(self.own(tile)),
            None => panic!("set_dot8r4: the type has no eight-token kernel"),
        }
    }

    /// Gives `w` a two-row × eight-token tile over row pairs unpacked once per row block
    /// (`block_bytes` of layout per super-block, a multiple of 64), replacing any `dot8r2`.
    /// `w` must have a `dot8`, set first (for an odd last row).
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
    pub(crate) const fn set_dot8r2_unpacked(
        &mut self,
        w: WType,
        unpack: PairUnpackFn,
        tile: Dot8R2UnpackedFn,
        block_bytes: usize,
    ) {
        assert!(block_bytes > 0 && block_bytes.is_multiple_of(64));
        match self.weights[w as usize].dot8 {
            Some(_) => {
                self.weights[w as usize].dot8r2_unpacked = Some(PairUnpacked {
                    unpack: self.own(unpack),
                    tile: self.own(tile),
                    block_bytes,
                })
            }
            None => panic!("set_dot8r2_unpacked: the type has no eight-token kernel"),
        }
        self.weights[w as usize].dot8r2 = None;
    }

    /// Gives `w` GEMM micro-kernels for two and for three tokens (each must equal `dot` bit
    /// for bit on its tokens, and leave the rest of `out` alone).
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
    pub(crate) const fn set_dot23(&mut self, w: WType, dot2: Dot4Fn, dot3: Dot4Fn) {
        self.weights[w as usize].dot23 = Some((self.own(dot2), self.own(dot3)));
    }

    /// Drops every type's two- and three-token kernels.
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
    pub(crate) const fn clear_dot23(&mut self) {
        let mut i = 0;
        while i < self.weights.len() {
            self.weights[i].dot23 = None;
            i += 1;
        }
    }

    /// Replaces only the four-token GEMM kernel of `w` (its dot and GEMV stay the parent's;
    /// the kernel must still equal the dot bit for bit).
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
    pub(crate) const fn set_dot4(&mut self, w: WType, dot4: Dot4Fn) {
        self.weights[w as usize].dot4 = self.own(dot4);
    }

    /// Gives `w` a four-row × eight-token tile over groups of four rows unpacked once per
    /// row block (`block_bytes` of layout per block column of the four rows). It takes
    /// precedence over the type's other eight-token kernels, which stay for the four-token
    /// and single-dot paths' neighbours (a later `set_dot8_unpacked` or `set_dot8` removes
    /// the tile).
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
    pub(crate) const fn set_dot8r4_grouped(
        &mut self,
        w: WType,
        unpack: QuadUnpackFn,
        tile: Dot8R4GroupedFn,
        block_bytes: usize,
    ) {
        assert!(block_bytes > 0);
        self.weights[w as usize].dot8r4_grouped = Some(QuadUnpacked {
            unpack: self.own(unpack),
            tile: self.own(tile),
            block_bytes,
        });
    }

    /// Gives `w` an eight-token GEMM micro-kernel over rows unpacked once per GEMM task,
    /// beside its packed `dot8` if it has one (set first; the driver takes that one for a
    /// task of few groups of eight tokens, where unpacking does not pay).
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
    pub(crate) const fn set_dot8_unpacked(&mut self, w: WType, unpack: UnpackFn, dot8: Dot8Fn) {
        self.weights[w as usize].dot8_unpacked = Some((self.own(unpack), self.own(dot8)));
        self.weights[w as usize].dot8r4_grouped = None;
        self.weights[w as usize].dot8r2 = None;
        self.weights[w as usize].dot8r4 = None;
        self.weights[w as usize].dot8r2_unpacked = None;
    }
}
