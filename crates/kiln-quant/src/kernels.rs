//! The kernel tables: one [`Kernels`] per instruction set, chosen once per process.
//!
//! A table holds, for each activation type, a quantizer, and for each weight type a
//! dequantizer, a dot product and a four-token dot product (the GEMM micro-kernel). Each
//! entry records which ISA actually implements it, so a table may honestly reuse a scalar
//! kernel where a fast one does not exist yet ([`Kernels::implementations`] lists them; the
//! crate docs carry the same table).
//!
//! The tables form a ladder, after ggml's per-ISA `quants.c` + `arch-fallback.h`: the scalar
//! table (`scalar::table`) is generated from the type lists in `crate::types`, and each SIMD
//! table starts from it, or from a table whose ISA its own implies ([`Kernels::inherit`]),
//! and replaces the entries its ISA has code for (`set_dots`, `set_dequant`, …). A new type
//! thus runs everywhere as soon as it has scalar kernels.
//!
//! The function pointers are `unsafe fn` whose only obligation is "this CPU supports the
//! table's ISA". A `&Kernels` can only be obtained from [`kernels_for`] (or [`kernels`]),
//! which checks exactly that, so holding one is the proof. Lengths are the callers' business:
//! a kernel handed inconsistent slice lengths panics (slice indexing), it never reads out of
//! bounds.

use std::sync::OnceLock;

use bytemuck::Zeroable;

use kiln_format::GgmlType;

use crate::error::QuantError;
use crate::isa::{Isa, active_isa};
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

/// Unpacks a weight row into [`crate::blocks::BlockI8`] blocks (`out` holds one per block):
/// the values and scales the type's dot kernels use, exactly.
pub(crate) type UnpackFn = unsafe fn(w: &[u8], out: &mut [crate::blocks::BlockI8]);

/// Activation rows for the GEMM micro-kernels (four or eight): row `t` is
/// `a[t * stride..][..row_bytes]`.
/// For Q8_0/Q8_1 activations `sc` also holds each row's block scales widened to `f32` (see
/// [`act_scales`]), row `t` at `t * sc_stride`, so the micro-kernel, which reuses each
/// activation row for many weight rows, does not convert them again for every weight row.
///
/// For the eight-token kernels `sc8` holds the same scales interleaved across the eight
/// rows, scale `j` of row `t` at `j * 8 + t` (see [`interleave8`]), so that one load gives
/// a block's scale for all eight tokens; it is empty for the four-token kernels.
#[derive(Clone, Copy)]
pub(crate) struct ActRows<'a> {
    pub(crate) a: &'a [u8],
    pub(crate) stride: usize,
    pub(crate) sc: &'a [f32],
    pub(crate) sc_stride: usize,
    pub(crate) sc8: &'a [f32],
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
        AType::Q8_0 => n_blocks,
        AType::Q8_1 => 2 * n_blocks,
        _ => 0,
    }
}

/// Widens the block scales of one activation row: Q8_0 → `d` per block, Q8_1 → `d, s` per
/// block (exact conversions); nothing for the other types.
pub(crate) fn act_scales(a: AType, row: &[u8], out: &mut [f32]) {
    use crate::blocks::{BlockQ8_0, BlockQ8_1, as_blocks};
    match a {
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
        _ => {}
    }
}

/// Checks `T` activation rows laid end to end in `a` against the weight row `w` and widens
/// their block scales: `(scales, row stride in bytes, scales per row)`.
fn act_rows_checked<const T: usize>(
    wt: WType,
    ty: GgmlType,
    w: &[u8],
    a: &[u8],
) -> Result<(Vec<f32>, usize, usize), QuantError> {
    let n = elems_in(ty, w.len())?;
    let at = wt.act();
    let stride = at.row_bytes(n);
    let what = if T == 4 {
        "activation bytes (4 rows)"
    } else {
        "activation bytes (8 rows)"
    };
    check_len(at.ggml(), what, T * stride, a.len())?;
    let n_sc = act_scale_count(at, n / at.ggml().block_elems());
    let mut sc = vec![0.0f32; T * n_sc];
    for t in 0..T {
        act_scales(
            at,
            &a[t * stride..(t + 1) * stride],
            &mut sc[t * n_sc..(t + 1) * n_sc],
        );
    }
    Ok((sc, stride, n_sc))
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
    /// For types whose unpacking dominates: an unpacker to [`crate::blocks::BlockI8`] rows
    /// and an eight-token micro-kernel over such rows. The driver unpacks each weight row
    /// once per token tile and runs this instead of `dot8`; results equal `dot` bit for bit.
    pub(crate) dot8_unpacked: Option<(Imp<UnpackFn>, Imp<Dot8Fn>)>,
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

    /// Gives `w` an eight-token GEMM micro-kernel.
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
    pub(crate) const fn set_dot8(&mut self, w: WType, dot8: Dot8Fn) {
        self.weights[w as usize].dot8 = Some(self.own(dot8));
        self.weights[w as usize].dot8_unpacked = None;
    }

    /// Replaces only the four-token GEMM kernel of `w` (its dot and GEMV stay the parent's;
    /// the kernel must still equal the dot bit for bit).
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
    pub(crate) const fn set_dot4(&mut self, w: WType, dot4: Dot4Fn) {
        self.weights[w as usize].dot4 = self.own(dot4);
    }

    /// Replaces the eight-token kernel over unpacked rows of `w`, keeping the parent's row
    /// unpacker (whose output layout the new kernel reads). `w` must have one.
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
    pub(crate) const fn set_dot8_over_parent_unpack(&mut self, w: WType, dot8: Dot8Fn) {
        let own = self.own(dot8);
        match &mut self.weights[w as usize].dot8_unpacked {
            Some((_, d)) => *d = own,
            None => panic!("set_dot8_over_parent_unpack: the parent table has no row unpacker"),
        }
    }

    /// Gives `w` an eight-token GEMM micro-kernel over rows unpacked once per token tile.
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
    pub(crate) const fn set_dot8_unpacked(&mut self, w: WType, unpack: UnpackFn, dot8: Dot8Fn) {
        self.weights[w as usize].dot8_unpacked = Some((self.own(unpack), self.own(dot8)));
        self.weights[w as usize].dot8 = None;
    }
}

/// Which ISA implements one kernel of a table (see [`Kernels::implementations`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KernelImpl {
    /// `"quantize"` (activations), `"dequantize"`, `"dot"`, `"dotr4"` (GEMV: four weight
    /// rows × one token), `"dot4"` (GEMM: one weight row × four tokens) or `"dot8"` (wide
    /// GEMM: one weight row × eight tokens; listed only where a table has one).
    pub kernel: &'static str,
    pub ty: GgmlType,
    pub isa: Isa,
}

fn wtype(ty: GgmlType) -> Result<WType, QuantError> {
    WType::of(ty).ok_or(QuantError::unsupported(ty))
}

fn check_len(
    ty: GgmlType,
    what: &'static str,
    expected: usize,
    actual: usize,
) -> Result<(), QuantError> {
    if expected == actual {
        Ok(())
    } else {
        Err(QuantError::BadShape {
            type_name: ty.name(),
            what,
            expected,
            actual,
        })
    }
}

/// Elements in `bytes` of type `ty`, if `bytes` is a whole number of blocks.
fn elems_in(ty: GgmlType, bytes: usize) -> Result<usize, QuantError> {
    let bb = ty.block_bytes();
    if !bytes.is_multiple_of(bb) {
        return Err(QuantError::BadShape {
            type_name: ty.name(),
            what: "bytes (not a whole number of blocks)",
            expected: bytes / bb * bb,
            actual: bytes,
        });
    }
    Ok(bytes / bb * ty.block_elems())
}

fn check_whole_blocks(ty: GgmlType, n: usize) -> Result<(), QuantError> {
    if !n.is_multiple_of(ty.block_elems()) {
        return Err(QuantError::PartialBlock {
            type_name: ty.name(),
            elems: n,
            block_elems: ty.block_elems(),
        });
    }
    Ok(())
}

impl Kernels {
    /// The instruction set this table was built for.
    pub fn isa(&self) -> Isa {
        self.isa
    }

    /// Converts a row of activations to `act` (one of F32, F16, BF16, Q8_0, Q8_1, Q8_K) as
    /// ggml's x86 build does. `dst` must be exactly the row's size in `act`.
    pub fn quantize_activations(
        &self,
        act: GgmlType,
        src: &[f32],
        dst: &mut [u8],
    ) -> Result<(), QuantError> {
        let a = AType::of(act).ok_or(QuantError::NotAnActivationType {
            type_name: act.name(),
        })?;
        check_whole_blocks(act, src.len())?;
        check_len(act, "activation bytes", a.row_bytes(src.len()), dst.len())?;
        // SAFETY: `self` exists only for an ISA this CPU supports (see `kernels_for`).
        unsafe { (self.act[a as usize].f)(src, dst) };
        Ok(())
    }

    /// Dequantizes whole blocks of `ty`; `dst.len()` must be the number of elements.
    pub fn dequantize(&self, ty: GgmlType, src: &[u8], dst: &mut [f32]) -> Result<(), QuantError> {
        let w = wtype(ty)?;
        let n = elems_in(ty, src.len())?;
        check_len(ty, "output elements", n, dst.len())?;
        // SAFETY: as in `quantize_activations`.
        unsafe { (self.weights[w as usize].dequant.f)(src, dst) };
        Ok(())
    }

    /// Dot product of one weight row `w` of type `ty` with an activation row `a` already in
    /// `vec_dot_type(ty)` (see [`Kernels::quantize_activations`]).
    pub fn dot(&self, ty: GgmlType, w: &[u8], a: &[u8]) -> Result<f32, QuantError> {
        let wt = wtype(ty)?;
        let n = elems_in(ty, w.len())?;
        let at = wt.act();
        check_len(at.ggml(), "activation bytes", at.row_bytes(n), a.len())?;
        // SAFETY: as in `quantize_activations`; lengths checked above.
        Ok(unsafe { (self.weights[wt as usize].dot.f)(w, a) })
    }

    /// The GEMM micro-kernel: dots of `w` with four activation rows laid end to end in `a`.
    /// Each result equals [`Kernels::dot`] of the same row bit for bit. (A checked entry point
    /// for tests and benchmarks: it widens the activation scales into a fresh buffer on every
    /// call, which the matmul driver does once per batch.)
    pub fn dot4(&self, ty: GgmlType, w: &[u8], a: &[u8]) -> Result<[f32; 4], QuantError> {
        let wt = wtype(ty)?;
        let (sc, stride, sc_stride) = act_rows_checked::<4>(wt, ty, w, a)?;
        let rows = ActRows {
            a,
            stride,
            sc: &sc,
            sc_stride,
            sc8: &[],
        };
        let mut out = [0.0; 4];
        // SAFETY: as in `quantize_activations`; lengths checked above.
        unsafe { (self.weights[wt as usize].dot4.f)(w, rows, &mut out) };
        Ok(out)
    }

    /// The wide GEMM micro-kernel: dots of `w` with eight activation rows laid end to end in
    /// `a`, each equal to [`Kernels::dot`] of the same row bit for bit. Types without an
    /// eight-token kernel in this table ([`Kernels::has_dot8`]) answer with two four-token
    /// calls, as the matmul driver does.
    pub fn dot8(&self, ty: GgmlType, w: &[u8], a: &[u8]) -> Result<[f32; 8], QuantError> {
        let wt = wtype(ty)?;
        let (sc, stride, sc_stride) = act_rows_checked::<8>(wt, ty, w, a)?;
        let k = &self.weights[wt as usize];
        let mut out = [0.0; 8];
        if let Some((unpack, d8)) = k.dot8_unpacked {
            let mut sc8 = vec![0.0f32; 8 * sc_stride];
            interleave8(&sc, sc_stride, &mut sc8);
            let rows = ActRows {
                a,
                stride,
                sc: &sc,
                sc_stride,
                sc8: &sc8,
            };
            let mut wu = vec![crate::blocks::BlockI8::zeroed(); w.len() / ty.block_bytes()];
            // SAFETY: as in `quantize_activations`; `wu` holds one unpacked block per block.
            unsafe {
                (unpack.f)(w, &mut wu);
                (d8.f)(bytemuck::cast_slice(&wu), rows, &mut out);
            }
            return Ok(out);
        }
        match k.dot8 {
            Some(d8) => {
                let mut sc8 = vec![0.0f32; 8 * sc_stride];
                interleave8(&sc, sc_stride, &mut sc8);
                let rows = ActRows {
                    a,
                    stride,
                    sc: &sc,
                    sc_stride,
                    sc8: &sc8,
                };
                // SAFETY: as in `quantize_activations`; lengths checked above.
                unsafe { (d8.f)(w, rows, &mut out) }
            }
            None => {
                for half in 0..2 {
                    let part = ActRows {
                        a: &a[4 * half * stride..4 * (half + 1) * stride],
                        stride,
                        sc: &sc[4 * half * sc_stride..4 * (half + 1) * sc_stride],
                        sc_stride,
                        sc8: &[],
                    };
                    let mut o = [0.0; 4];
                    // SAFETY: as above; `part` is four of the checked rows.
                    unsafe { (k.dot4.f)(w, part, &mut o) };
                    out[4 * half..4 * half + 4].copy_from_slice(&o);
                }
            }
        }
        Ok(out)
    }

    /// Whether this table has an eight-token GEMM micro-kernel for `ty`.
    pub fn has_dot8(&self, ty: GgmlType) -> bool {
        wtype(ty).is_ok_and(|wt| {
            let k = &self.weights[wt as usize];
            k.dot8.is_some() || k.dot8_unpacked.is_some()
        })
    }

    /// The GEMV kernel: dots of four consecutive weight rows (laid end to end in `w`) with one
    /// activation row. Each result equals [`Kernels::dot`] of that row bit for bit.
    pub fn dotr4(&self, ty: GgmlType, w: &[u8], a: &[u8]) -> Result<[f32; 4], QuantError> {
        let wt = wtype(ty)?;
        let total = elems_in(ty, w.len())?;
        if total % 4 != 0 || !(total / 4).is_multiple_of(ty.block_elems()) {
            return Err(QuantError::BadShape {
                type_name: ty.name(),
                what: "weight bytes (not four whole rows)",
                expected: w.len() / 4 * 4,
                actual: w.len(),
            });
        }
        let n = total / 4;
        let at = wt.act();
        check_len(at.ggml(), "activation bytes", at.row_bytes(n), a.len())?;
        let mut out = [0.0; 4];
        // SAFETY: as in `quantize_activations`; lengths checked above.
        unsafe { (self.weights[wt as usize].dotr4.f)(w, w.len() / 4, a, &mut out) };
        Ok(out)
    }

    /// Which ISA implements each kernel in this table.
    pub fn implementations(&self) -> Vec<KernelImpl> {
        let mut v = Vec::new();
        for a in AType::ALL {
            v.push(KernelImpl {
                kernel: "quantize",
                ty: a.ggml(),
                isa: self.act[a as usize].isa,
            });
        }
        for w in WType::ALL {
            let k = &self.weights[w as usize];
            for (kernel, isa) in [
                ("dequantize", k.dequant.isa),
                ("dot", k.dot.isa),
                ("dotr4", k.dotr4.isa),
                ("dot4", k.dot4.isa),
            ] {
                v.push(KernelImpl {
                    kernel,
                    ty: w.ggml(),
                    isa,
                });
            }
            if let Some(d8) = k.dot8.or(k.dot8_unpacked.map(|(_, d8)| d8)) {
                v.push(KernelImpl {
                    kernel: "dot8",
                    ty: w.ggml(),
                    isa: d8.isa,
                });
            }
        }
        v
    }

    pub(crate) fn weight(&self, w: WType) -> &WeightKernels {
        &self.weights[w as usize]
    }
}

/// The kernels for `isa`, if this CPU supports it and Kiln has kernels for it.
pub fn kernels_for(isa: Isa) -> Option<&'static Kernels> {
    match isa {
        Isa::Scalar => Some(&crate::scalar::KERNELS),
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 if isa.cpu_has() => Some(&crate::arch::x86_64::AVX2),
        #[cfg(target_arch = "x86_64")]
        Isa::Avx512 if isa.cpu_has() => Some(&crate::arch::x86_64::AVX512),
        #[cfg(target_arch = "aarch64")]
        Isa::Neon if isa.cpu_has() => crate::arch::aarch64::neon_kernels(),
        _ => None,
    }
}

static ACTIVE: OnceLock<&'static Kernels> = OnceLock::new();

/// The kernels of [`active_isa`].
///
/// # Panics
/// As [`active_isa`]: when `KILN_ISA` asks for something this machine cannot do.
pub fn kernels() -> &'static Kernels {
    ACTIVE.get_or_init(|| match kernels_for(active_isa()) {
        Some(k) => k,
        // `select_isa` only returns ISAs that `kernels_for` accepts.
        None => unreachable!("active ISA without kernels"),
    })
}
