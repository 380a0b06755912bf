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
use crate::isa::{Isa, IsaError};
use crate::table::{
    ActRows, Kernels, WeightKernels, act_scale_count, act_scales, interleave8, interleave8_q8k,
    interleave8_q80, interleave8_q81, lay8_group_bytes,
};
use crate::types::{AType, WType};

/// Eight activation rows laid out as the matmul scratch lays them out for the eight-token
/// kernels (`lay8`: `interleave8_q8k`, `interleave8_q80`, `interleave8_q81`); empty for other
/// activation types.
fn lay8_of(wt: WType, a: &[u8], stride: usize) -> Vec<u8> {
    let at = wt.act();
    let nb = stride / at.ggml().block_bytes();
    let mut out = vec![0u8; lay8_group_bytes(at, nb)];
    match at {
        AType::Q8_K => interleave8_q8k(a, stride, nb, &mut out),
        AType::Q8_0 => interleave8_q80(a, stride, nb, &mut out),
        AType::Q8_1 => interleave8_q81(a, stride, nb, &mut out),
        _ => {}
    }
    out
}

/// Eight checked activation rows with what the eight-token kernels read beside them: the
/// widened scales, those interleaved, and the `lay8` layout (built once per batch by the
/// matmul scratch; here per call).
struct Acts8 {
    stride: usize,
    sc: Vec<f32>,
    sc_stride: usize,
    sc8: Vec<f32>,
    lay8: Vec<u8>,
}

impl Acts8 {
    /// Checks the eight rows `a` against the weight row `w` and lays them out.
    fn new(wt: WType, ty: GgmlType, w: &[u8], a: &[u8]) -> Result<Acts8, QuantError> {
        let (sc, stride, sc_stride) = act_rows_checked::<8>(wt, ty, w, a)?;
        let mut sc8 = vec![0.0f32; 8 * sc_stride];
        interleave8(&sc, sc_stride, &mut sc8);
        let lay8 = lay8_of(wt, a, stride);
        Ok(Acts8 {
            stride,
            sc,
            sc_stride,
            sc8,
            lay8,
        })
    }

    fn rows<'a>(&'a self, a: &'a [u8]) -> ActRows<'a> {
        ActRows {
            a,
            stride: self.stride,
            sc: &self.sc,
            sc_stride: self.sc_stride,
            sc8: &self.sc8,
            lay8: &self.lay8,
        }
    }
}

/// Activation rows for the kernels of fewer than eight tokens (no eight-token layouts).
fn few_rows<'a>(a: &'a [u8], stride: usize, sc: &'a [f32], sc_stride: usize) -> ActRows<'a> {
    ActRows {
        a,
        stride,
        sc,
        sc_stride,
        sc8: &[],
        lay8: &[],
    }
}

/// The bytes of each of `n` whole rows of `ty` laid end to end in `w`.
fn whole_rows(ty: GgmlType, w: &[u8], n: usize, what: &'static str) -> Result<usize, QuantError> {
    let total = elems_in(ty, w.len())?;
    if total % n != 0 || !(total / n).is_multiple_of(ty.block_elems()) {
        return Err(QuantError::BadShape {
            type_name: ty.name(),
            what,
            expected: w.len() / n * n,
            actual: w.len(),
        });
    }
    Ok(w.len() / n)
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
    let what = match T {
        2 => "activation bytes (2 rows)",
        3 => "activation bytes (3 rows)",
        4 => "activation bytes (4 rows)",
        _ => "activation bytes (8 rows)",
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

/// Which ISA implements one kernel of a table (see [`Kernels::implementations`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KernelImpl {
    /// `"quantize"` (activations), `"dequantize"`, `"dot"`, `"dotr4"` (GEMV: four weight
    /// rows × one token), `"dot4"` (GEMM: one weight row × four tokens), `"dot8"` (wide
    /// GEMM: one weight row × eight tokens) or `"dot8r2"` (GEMM tile: two weight rows × eight
    /// tokens); the last two listed only where a table has one.
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
        let rows = few_rows(a, stride, &sc, sc_stride);
        let mut out = [0.0; 4];
        // SAFETY: as in `quantize_activations`; lengths checked above.
        unsafe { (self.weights[wt as usize].dot4.f)(w, rows, &mut out) };
        Ok(out)
    }

    /// The eight-token kernel over rows unpacked once per GEMM task (the matmul driver's
    /// choice for tasks of many groups of eight tokens), on `w` unpacked here; `None` when
    /// this table has none for `ty`. Each result equals [`Kernels::dot`] bit for bit.
    pub fn dot8_unpacked(
        &self,
        ty: GgmlType,
        w: &[u8],
        a: &[u8],
    ) -> Result<Option<[f32; 8]>, QuantError> {
        let wt = wtype(ty)?;
        let acts = Acts8::new(wt, ty, w, a)?;
        let Some((unpack, d8)) = self.weights[wt as usize].dot8_unpacked else {
            return Ok(None);
        };
        let mut out = [0.0; 8];
        let mut wu = vec![crate::blocks::BlockI8::zeroed(); w.len() / ty.block_bytes()];
        // SAFETY: as in `quantize_activations`; `wu` holds one unpacked block per block.
        unsafe {
            (unpack.f)(w, &mut wu);
            (d8.f)(bytemuck::cast_slice(&wu), acts.rows(a), &mut out);
        }
        Ok(Some(out))
    }

    /// The two- or three-token GEMM micro-kernel (`a` holds `N` activation rows, `N` 2 or
    /// 3), each result equal to [`Kernels::dot`] of the same row bit for bit; `None` when
    /// this table has none for `ty` (the driver then pads to a wider kernel).
    pub fn dot23<const N: usize>(
        &self,
        ty: GgmlType,
        w: &[u8],
        a: &[u8],
    ) -> Result<Option<[f32; N]>, QuantError> {
        let wt = wtype(ty)?;
        if !(2..=3).contains(&N) {
            return Err(QuantError::BadShape {
                type_name: ty.name(),
                what: "tokens of a two- or three-token kernel",
                expected: 3,
                actual: N,
            });
        }
        let (sc, stride, sc_stride) = act_rows_checked::<N>(wt, ty, w, a)?;
        let Some((d2, d3)) = self.weights[wt as usize].dot23 else {
            return Ok(None);
        };
        let f = if N == 2 { d2.f } else { d3.f };
        let mut out = [0.0; 4];
        // SAFETY: as in `quantize_activations`; lengths checked above.
        unsafe { f(w, few_rows(a, stride, &sc, sc_stride), &mut out) };
        Ok(Some(std::array::from_fn(|t| out[t])))
    }

    /// The wide GEMM micro-kernel: dots of `w` with eight activation rows laid end to end in
    /// `a`, each equal to [`Kernels::dot`] of the same row bit for bit. Types without an
    /// eight-token kernel in this table ([`Kernels::has_dot8`]) answer with two four-token
    /// calls, as the matmul driver does.
    pub fn dot8(&self, ty: GgmlType, w: &[u8], a: &[u8]) -> Result<[f32; 8], QuantError> {
        let wt = wtype(ty)?;
        let k = &self.weights[wt as usize];
        if k.dot8.is_none()
            && let Some(out) = self.dot8_unpacked(ty, w, a)?
        {
            return Ok(out);
        }
        let acts = Acts8::new(wt, ty, w, a)?;
        let (stride, sc, sc_stride) = (acts.stride, &acts.sc, acts.sc_stride);
        let mut out = [0.0; 8];
        match k.dot8 {
            // SAFETY: as in `quantize_activations`; lengths checked above.
            Some(d8) => unsafe { (d8.f)(w, acts.rows(a), &mut out) },
            None => {
                for half in 0..2 {
                    let part = few_rows(
                        &a[4 * half * stride..4 * (half + 1) * stride],
                        stride,
                        &sc[4 * half * sc_stride..4 * (half + 1) * sc_stride],
                        sc_stride,
                    );
                    let mut o = [0.0; 4];
                    // SAFETY: as above; `part` is four of the checked rows.
                    unsafe { (k.dot4.f)(w, part, &mut o) };
                    out[4 * half..4 * half + 4].copy_from_slice(&o);
                }
            }
        }
        Ok(out)
    }

    /// The two-row GEMM tile: dots of two consecutive weight rows (laid end to end in `w`)
    /// with eight activation rows laid end to end in `a`; `out[r][t]` equals [`Kernels::dot`]
    /// of row `r` and token `t` bit for bit. Types without a tile in this table
    /// ([`Kernels::has_dot8r2`]) answer with two [`Kernels::dot8`] calls, as the matmul
    /// driver does.
    pub fn dot8r2(&self, ty: GgmlType, w: &[u8], a: &[u8]) -> Result<[[f32; 8]; 2], QuantError> {
        let wt = wtype(ty)?;
        let rb = whole_rows(ty, w, 2, "weight bytes (not two whole rows)")?;
        let k = &self.weights[wt as usize];
        if k.dot8r2.is_none() && k.dot8r2_unpacked.is_none() {
            return Ok([self.dot8(ty, &w[..rb], a)?, self.dot8(ty, &w[rb..], a)?]);
        }
        let acts = Acts8::new(wt, ty, &w[..rb], a)?;
        let rows = acts.rows(a);
        let mut out = [[0.0; 8]; 2];
        if let Some(tile) = k.dot8r2 {
            // SAFETY: as in `quantize_activations`; lengths checked above (`w` is two rows
            // of `rb` bytes, `a` eight activation rows of their length).
            unsafe { (tile.f)(w, rb, rows, &mut out) };
        } else if let Some(p) = k.dot8r2_unpacked {
            // As the matmul driver: the pair unpacked, then the tile over it.
            let nb = rb / ty.block_bytes();
            let mut wu = vec![crate::table::Line64([0; 64]); nb * p.block_bytes / 64];
            let wu: &mut [u8] = bytemuck::cast_slice_mut(&mut wu);
            // SAFETY: as above; `wu` holds the layout's bytes for each of the `nb`
            // super-blocks.
            unsafe {
                (p.unpack.f)(w, rb, wu);
                (p.tile.f)(wu, rows, &mut out);
            }
        }
        Ok(out)
    }

    /// Whether this table has a two-row × eight-token GEMM tile for `ty`.
    pub fn has_dot8r2(&self, ty: GgmlType) -> bool {
        wtype(ty).is_ok_and(|wt| {
            let k = &self.weights[wt as usize];
            k.dot8r2.is_some() || k.dot8r2_unpacked.is_some()
        })
    }

    /// The four-row GEMM tile: dots of four weight rows (laid end to end in `w`) with eight
    /// activation rows (laid end to end in `a`); `out[r][t]` equals [`Kernels::dot`] of row
    /// `r` and token `t` bit for bit. Types without the tile in this table
    /// ([`Kernels::has_dot8r4`]) answer with four [`Kernels::dot8`] calls, as the matmul
    /// driver does.
    pub fn dot8r4(&self, ty: GgmlType, w: &[u8], a: &[u8]) -> Result<[[f32; 8]; 4], QuantError> {
        let wt = wtype(ty)?;
        let rb = whole_rows(ty, w, 4, "weight bytes (not four whole rows)")?;
        if let Some(tile) = self.weights[wt as usize].dot8r4 {
            let acts = Acts8::new(wt, ty, &w[..rb], a)?;
            let mut out = [[0.0; 8]; 4];
            // SAFETY: as in `quantize_activations`; lengths checked above (`w` is four rows
            // of `rb` bytes, `a` eight activation rows of their length).
            unsafe { (tile.f)(w, rb, acts.rows(a), &mut out) };
            return Ok(out);
        }
        if let Some(out) = self.dot8r4_laid_out(ty, w, a)? {
            return Ok(out);
        }
        let mut out = [[0.0; 8]; 4];
        for (r, o) in out.iter_mut().enumerate() {
            *o = self.dot8(ty, &w[r * rb..(r + 1) * rb], a)?;
        }
        Ok(out)
    }

    /// [`Kernels::dot8r4`] by the tile over rows laid out once per row block, when this
    /// table has one for `ty` (`None` otherwise): a type with both tiles runs this one for
    /// GEMM tasks of many tokens and the one over rows as stored, which [`Kernels::dot8r4`]
    /// answers with, for few.
    pub fn dot8r4_laid_out(
        &self,
        ty: GgmlType,
        w: &[u8],
        a: &[u8],
    ) -> Result<Option<[[f32; 8]; 4]>, QuantError> {
        let wt = wtype(ty)?;
        let rb = whole_rows(ty, w, 4, "weight bytes (not four whole rows)")?;
        let Some(q) = self.weights[wt as usize].dot8r4_grouped else {
            return Ok(None);
        };
        let acts = Acts8::new(wt, ty, &w[..rb], a)?;
        // As the matmul driver: the four rows unpacked, then the tile over them.
        let mut wu = vec![0u8; q.group_bytes(rb / ty.block_bytes())];
        let mut out = [[0.0; 8]; 4];
        // SAFETY: as in `quantize_activations`; lengths checked above (`w` is four rows of
        // `rb` bytes, `a` eight activation rows of their length, `wu` the group's layout).
        unsafe {
            (q.unpack.f)(w, rb, &mut wu);
            (q.tile.f)(&wu, acts.rows(a), &mut out);
        }
        Ok(Some(out))
    }

    /// Whether this table has a four-row × eight-token GEMM tile for `ty`.
    pub fn has_dot8r4(&self, ty: GgmlType) -> bool {
        wtype(ty).is_ok_and(|wt| {
            let k = &self.weights[wt as usize];
            k.dot8r4_grouped.is_some() || k.dot8r4.is_some()
        })
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
        let rb = whole_rows(ty, w, 4, "weight bytes (not four whole rows)")?;
        let n = elems_in(ty, rb)?;
        let at = wt.act();
        check_len(at.ggml(), "activation bytes", at.row_bytes(n), a.len())?;
        let mut out = [0.0; 4];
        // SAFETY: as in `quantize_activations`; lengths checked above.
        unsafe { (self.weights[wt as usize].dotr4.f)(w, rb, a, &mut out) };
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
            if let Some(isa) = k
                .dot8r4_grouped
                .map(|q| q.tile.isa)
                .or(k.dot8r4.map(|t| t.isa))
            {
                v.push(KernelImpl {
                    kernel: "dot8r4",
                    ty: w.ggml(),
                    isa,
                });
            }
            if let Some(isa) = k
                .dot8r2
                .map(|t| t.isa)
                .or(k.dot8r2_unpacked.map(|p| p.tile.isa))
            {
                v.push(KernelImpl {
                    kernel: "dot8r2",
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

/// The ISAs whose kernels can run on this machine, most capable first.
pub fn available_isas() -> Vec<Isa> {
    let mut v: Vec<Isa> = Isa::ALL
        .into_iter()
        .filter(|&i| kernels_for(i).is_some())
        .collect();
    v.reverse();
    v
}

/// Chooses the ISA for a `KILN_ISA` value (`None` or empty: the best one available). Pure
/// apart from CPU detection, so tests can call it with any value.
pub fn select_isa(request: Option<&str>) -> Result<Isa, IsaError> {
    let request = request.map(str::trim).filter(|s| !s.is_empty());
    let Some(value) = request else {
        // The most capable level that both the CPU and Kiln support; Scalar always is.
        return Ok(available_isas().first().copied().unwrap_or(Isa::Scalar));
    };
    let isa = Isa::from_name(value).ok_or_else(|| IsaError::UnknownName {
        value: value.to_string(),
    })?;
    if !isa.cpu_has() {
        return Err(IsaError::NotOnThisCpu {
            isa,
            needs: isa.required_features(),
        });
    }
    if kernels_for(isa).is_none() {
        let available: Vec<&str> = available_isas().iter().map(|i| i.name()).collect();
        return Err(IsaError::NoKernels {
            isa,
            available: available.join(", "),
        });
    }
    Ok(isa)
}

static ACTIVE_ISA: OnceLock<Result<Isa, IsaError>> = OnceLock::new();

/// The ISA chosen for this process (reads `KILN_ISA` on first call), or why the request in
/// `KILN_ISA` cannot be honoured. Call this at startup to report a bad `KILN_ISA` cleanly.
pub fn try_active_isa() -> Result<Isa, IsaError> {
    ACTIVE_ISA
        .get_or_init(|| select_isa(std::env::var("KILN_ISA").ok().as_deref()))
        .clone()
}

/// The ISA chosen for this process.
///
/// # Panics
/// If `KILN_ISA` names an ISA that is unknown, missing on this CPU, or has no kernels:
/// Kiln never silently falls back to another one. Use [`try_active_isa`] to handle that.
pub fn active_isa() -> Isa {
    match try_active_isa() {
        Ok(isa) => isa,
        Err(e) => panic!("{e}"),
    }
}
