//! The kernel tables: one [`Kernels`] per instruction set, chosen once per process.
//!
//! A table holds, for each activation type, a quantizer, and for each weight type a
//! dequantizer, a dot product and a four-token dot product (the GEMM micro-kernel). Each
//! entry records which ISA actually implements it, so a table may honestly reuse a scalar
//! kernel where a fast one does not exist yet ([`Kernels::implementations`] lists them; the
//! crate docs carry the same table).
//!
//! The function pointers are `unsafe fn` whose only obligation is "this CPU supports the
//! table's ISA". A `&Kernels` can only be obtained from [`kernels_for`] (or [`kernels`]),
//! which checks exactly that, so holding one is the proof. Lengths are the callers' business:
//! a kernel handed inconsistent slice lengths panics (slice indexing), it never reads out of
//! bounds.

use std::sync::OnceLock;

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
/// Dots of one weight row with four activation rows that start `stride` bytes apart in `a`.
/// Each result must equal [`DotFn`]'s bit for bit (same operations in the same order).
pub(crate) type Dot4Fn = unsafe fn(w: &[u8], a: &[u8], stride: usize, out: &mut [f32; 4]);

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
    pub(crate) dot4: Imp<Dot4Fn>,
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

/// Which ISA implements one kernel of a table (see [`Kernels::implementations`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KernelImpl {
    /// `"quantize"` (activations), `"dequantize"`, `"dot"` or `"dot4"`.
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
    if bytes % bb != 0 {
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
    if n % ty.block_elems() != 0 {
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
    /// Each result equals [`Kernels::dot`] of the same row bit for bit.
    pub fn dot4(&self, ty: GgmlType, w: &[u8], a: &[u8]) -> Result<[f32; 4], QuantError> {
        let wt = wtype(ty)?;
        let n = elems_in(ty, w.len())?;
        let at = wt.act();
        let stride = at.row_bytes(n);
        check_len(at.ggml(), "activation bytes (4 rows)", 4 * stride, a.len())?;
        let mut out = [0.0; 4];
        // SAFETY: as in `quantize_activations`; lengths checked above.
        unsafe { (self.weights[wt as usize].dot4.f)(w, a, stride, &mut out) };
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
                ("dot4", k.dot4.isa),
            ] {
                v.push(KernelImpl {
                    kernel,
                    ty: w.ggml(),
                    isa,
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
