//! The inner loops of attention over a paged KV cache, and the conversion of K/V rows to
//! their stored types.
//!
//! The arithmetic is that of ggml's CPU flash attention with an f16 cache, with one
//! summation order fixed so a SIMD kernel can reproduce it bit for bit:
//!
//! - **Scores** ([`AttnKernels::scores_f16`], [`AttnKernels::scores_f32`]): for each key,
//!   `s = (Σ_d q[d]·k[d]) · scale`, the sum taken *sequentially* over `d` from `-0.0`, one
//!   rounding per term. For f16 keys the query has been rounded to f16 ([`AttnKernels::round_f16`])
//!   so every product is exact in f32 and the sum is the plain f32 sum; for f32 keys each step
//!   is a fused multiply-add. Keys are stored *dimension-major* within a page
//!   (`k[d·bs + slot]`), so the SIMD kernels run eight keys per register, each lane its own
//!   sequential sum: no horizontal reduction, and the scalar loop is the exact oracle.
//!   The one-row arithmetic's scores ([`AttnKernels::scores_rows_f16_split`]) are summed
//!   instead in the order of ggml's `ggml_vec_dot_f16` as built for AVX-512 — the kernel
//!   its one-row flash attention calls for every score, and the build llama.cpp's
//!   references were made with: dimension `d < hd − hd mod 64` into lane sum `d mod 64`
//!   (four accumulators of sixteen lanes), the 64 lane sums folded by a fixed tree, the
//!   remaining dimensions added in f64. (Its AVX2 build sums in yet another order, eight
//!   lanes and a horizontal add; no order is right on every build, and this one makes the
//!   attention output of a short prompt bit-identical to the references' build.)
//! - **Values** ([`AttnKernels::accum_f16`], [`AttnKernels::accum_f32`]): given, per key, the
//!   rescale factor `ms` (1 unless the key raised the running maximum) and the weight `vs`,
//!   the accumulator becomes `acc = round(acc · ms)` (when `ms ≠ 1`) then
//!   `acc = round(fma(v, vs, acc))`, elementwise, keys in order. `round` is to f16 for the
//!   f16 accumulator (ggml's `ggml_vec_scale_f16` / `ggml_vec_mad_f16` with F16C) and the
//!   identity for f32. Elementwise operations have no order to get wrong, so any split of the
//!   dimensions or of the keys into calls gives the same bits.
//!
//! The many-row forms ([`AttnKernels::scores_rows_f16`], [`AttnKernels::accum_rows_f16`] …)
//! run several query rows — the query heads of one KV group, several tokens of a prompt —
//! over the same pages: each row's result is that of the one-row kernel alone, bit for bit,
//! and each key or value vector loaded (and widened from f16) serves several rows.
//!
//! The online-softmax bookkeeping between the two (running maximum, `exp`, running sum) has
//! two forms. Key by key (the one-row arithmetic), [`AttnKernels::softmax_online`] keeps
//! llama.cpp's order of operations with [`expf`], glibc's `expf` written down (so the
//! weights are the same bits on every platform, and a SIMD kernel computes sixteen at a
//! time); tile by tile (the prompt arithmetic) [`AttnKernels::softmax_weights`] computes a
//! row's tile maximum, weights and their sum with a vector [`exp`] and a fixed summation
//! order. The page tables
//! are the caller's too: every kernel takes the *offsets*
//! of the pages it reads (`pages`, in elements) into one arena slice and the page size `bs`
//! (tokens per page).
//!
//! Which ISA implements what ([`AttnKernels::implementations`]):
//!
//! | kernel | scalar | avx2 | avx512 |
//! |---|---|---|---|
//! | `round_f16`, `scores_f16`, `scores_f32`, `accum_f16`, `accum_f32` | ✓ (oracle) | ✓ (bit-identical) | avx2's |
//! | `scores_rows_f16_split` (one-row scores, ggml's `vec_dot_f16` order) | ✓ (oracle) | ✓ (bit-identical; eight keys a register, each group of eight widened once for every row, two rows per pass over it; the f64 tail, slots past whole groups of eight and heads over 256 dimensions by the oracle's steps) | avx2's |
//! | `scores_rows_*`, `accum_rows_*` (many rows over the same pages) | ✓ (the one-row oracle, row by row) | ✓ (bit-identical; each loaded key or value serves six rows, the f32 accumulators' rescale keys found ahead; `accum_rows_f16` over two or more rows key by key, each value row widened once for every row, the f16 accumulators in memory) | ✓ (bit-identical; 16 keys a register, up to 8 rows per key load; 4 rows × 64 dimensions of accumulator in registers; avx2's for pages or value rows not a multiple of 16) |
//! | `softmax_weights` (tile softmax, [`exp`]) | ✓ (oracle) | ✓ (bit-identical) | ✓ (bit-identical) |
//! | `silu_mul` (the FFN's gated SiLU, [`expf`]) | ✓ (oracle) | ✓ (bit-identical; `expf` on four `f64` lanes) | ✓ (bit-identical; `expf` on eight `f64` lanes) |
//! | `softmax_online` (key-by-key softmax, [`expf`]) | ✓ (oracle) | ✓ (bit-identical; eight keys a step under the running maximum, `expf` on four `f64` lanes) | ✓ (bit-identical; sixteen keys a step under the running maximum, `expf` on eight `f64` lanes) |
//! | [`store_row`] F16, Q8_0 | ✓ | ✓ (kiln-quant activation converters) | avx2's |
//! | [`store_row`] F32, Q4_0, Q4_1, Q5_0 | ✓ | scalar (not hot: once per token) | scalar |
//! | [`hadamard_rotate`] (rotation of quantized K/V, see [`hadamard`]) | ✓ | scalar (compiler-vectorised; a few thousand additions per token and layer) | scalar |

#[cfg(target_arch = "x86_64")]
mod avx2;
#[cfg(target_arch = "x86_64")]
mod avx512;
pub mod hadamard;
mod scalar;
mod store;

use half::f16;

use crate::isa::Isa;
use crate::kernels::active_isa;

pub use hadamard::{hadamard_rotate, key_rotation_size, value_rotation_size};
pub use scalar::{exp, expf};
pub use store::{KV_STORE_TYPES, store_row};

/// `q` (f32, rounded to f16 or not) against `pages` of keys: `out[p·bs + j]` is the scaled
/// score of slot `j` of page `p`.
pub(crate) type ScoresF16Fn =
    unsafe fn(q: &[f32], k: &[f16], pages: &[usize], bs: usize, scale: f32, out: &mut [f32]);
pub(crate) type ScoresF32Fn =
    unsafe fn(q: &[f32], k: &[f32], pages: &[usize], bs: usize, scale: f32, out: &mut [f32]);
/// Accumulates keys `first..first + ms.len()` (counted across `pages`) into `acc`.
pub(crate) type AccumF16Fn = unsafe fn(
    acc: &mut [f16],
    v: &[f16],
    pages: &[usize],
    bs: usize,
    first: usize,
    ms: &[f32],
    vs: &[f32],
);
pub(crate) type AccumF32Fn = unsafe fn(
    acc: &mut [f32],
    v: &[f32],
    pages: &[usize],
    bs: usize,
    first: usize,
    ms: &[f32],
    vs: &[f32],
);
/// Accumulates f16 value rows into an f32 accumulator (as [`AccumF32Fn`]).
pub(crate) type AccumF16F32Fn = unsafe fn(
    acc: &mut [f32],
    v: &[f16],
    pages: &[usize],
    bs: usize,
    first: usize,
    ms: &[f32],
    vs: &[f32],
);
/// One row's softmax step over a tile of scores (see [`AttnKernels::softmax_weights`]).
pub(crate) type SoftmaxFn = unsafe fn(s: &[f32], m: f32, out: &mut [f32]) -> (f32, f32);
/// One row's key-by-key online softmax (see [`AttnKernels::softmax_online`]).
pub(crate) type SoftmaxOnlineFn =
    unsafe fn(s: &[f32], max: f32, sum: f32, ms: &mut [f32], vs: &mut [f32]) -> (f32, f32);
pub(crate) type RoundFn = unsafe fn(x: &[f32], out: &mut [f32]);
/// The gated SiLU of a feed-forward block (see [`AttnKernels::silu_mul`]).
pub(crate) type SiluMulFn = unsafe fn(g: &mut [f32], u: &[f32]);
/// Many query rows (of `hd`) against the same pages: row `r`'s scores at `out[r·n..]`,
/// `n = pages.len()·bs`.
pub(crate) type ScoresRowsFn<K> = unsafe fn(
    q: &[f32],
    hd: usize,
    k: &[K],
    pages: &[usize],
    bs: usize,
    scale: f32,
    out: &mut [f32],
);
/// Many accumulator rows (of `dv`) over the same keys `first..first + n`: row `r`, key `i`
/// weighted by `ms[r·stride + i]`, `vs[r·stride + i]`.
pub(crate) type AccumRowsFn<A, V> = unsafe fn(
    acc: &mut [A],
    dv: usize,
    v: &[V],
    pages: &[usize],
    bs: usize,
    first: usize,
    n: usize,
    ms: &[f32],
    vs: &[f32],
    stride: usize,
);

/// The attention kernels of one instruction set. The `unsafe fn` entries require the CPU to
/// support `isa` and the slice bounds the safe methods check; a `&AttnKernels` comes only
/// from [`attn_kernels_for`], which checks the CPU, so holding one is the proof of the first.
pub struct AttnKernels {
    isa: Isa,
    round_f16: (Isa, RoundFn),
    scores_f16: (Isa, ScoresF16Fn),
    scores_f32: (Isa, ScoresF32Fn),
    accum_f16: (Isa, AccumF16Fn),
    accum_f32: (Isa, AccumF32Fn),
    accum_f16_f32: (Isa, AccumF16F32Fn),
    scores_rows_f16: (Isa, ScoresRowsFn<f16>),
    scores_rows_f16_split: (Isa, ScoresRowsFn<f16>),
    scores_rows_f32: (Isa, ScoresRowsFn<f32>),
    accum_rows_f16: (Isa, AccumRowsFn<f16, f16>),
    accum_rows_f32: (Isa, AccumRowsFn<f32, f32>),
    accum_rows_f16_f32: (Isa, AccumRowsFn<f32, f16>),
    softmax_weights: (Isa, SoftmaxFn),
    softmax_online: (Isa, SoftmaxOnlineFn),
    silu_mul: (Isa, SiluMulFn),
}

static SCALAR: AttnKernels = AttnKernels {
    isa: Isa::Scalar,
    round_f16: (Isa::Scalar, scalar::round_f16),
    scores_f16: (Isa::Scalar, scalar::scores_f16),
    scores_f32: (Isa::Scalar, scalar::scores_f32),
    accum_f16: (Isa::Scalar, scalar::accum_f16),
    accum_f32: (Isa::Scalar, scalar::accum_f32),
    accum_f16_f32: (Isa::Scalar, scalar::accum_f16_f32),
    scores_rows_f16: (Isa::Scalar, scalar::scores_rows_f16),
    scores_rows_f16_split: (Isa::Scalar, scalar::scores_rows_f16_split),
    scores_rows_f32: (Isa::Scalar, scalar::scores_rows_f32),
    accum_rows_f16: (Isa::Scalar, scalar::accum_rows_f16),
    accum_rows_f32: (Isa::Scalar, scalar::accum_rows_f32),
    accum_rows_f16_f32: (Isa::Scalar, scalar::accum_rows_f16_f32),
    softmax_weights: (Isa::Scalar, scalar::softmax_weights),
    softmax_online: (Isa::Scalar, scalar::softmax_online_fn),
    silu_mul: (Isa::Scalar, scalar::silu_mul),
};

#[cfg(target_arch = "x86_64")]
static AVX2: AttnKernels = AttnKernels {
    isa: Isa::Avx2,
    round_f16: (Isa::Avx2, avx2::round_f16),
    scores_f16: (Isa::Avx2, avx2::scores_f16),
    scores_f32: (Isa::Avx2, avx2::scores_f32),
    accum_f16: (Isa::Avx2, avx2::accum_f16),
    accum_f32: (Isa::Avx2, avx2::accum_f32),
    accum_f16_f32: (Isa::Avx2, avx2::accum_f16_f32),
    scores_rows_f16: (Isa::Avx2, avx2::scores_rows_f16),
    scores_rows_f16_split: (Isa::Avx2, avx2::scores_rows_f16_split),
    scores_rows_f32: (Isa::Avx2, avx2::scores_rows_f32),
    accum_rows_f16: (Isa::Avx2, avx2::accum_rows_f16),
    accum_rows_f32: (Isa::Avx2, avx2::accum_rows_f32),
    accum_rows_f16_f32: (Isa::Avx2, avx2::accum_rows_f16_f32),
    softmax_weights: (Isa::Avx2, avx2::softmax_weights),
    softmax_online: (Isa::Avx2, avx2::softmax_online),
    silu_mul: (Isa::Avx2, avx2::silu_mul),
};

/// AVX-512: the many-row kernels (prompt tiles, a KV group's query heads) sixteen lanes a
/// register; the one-row kernels are AVX2's.
#[cfg(target_arch = "x86_64")]
static AVX512: AttnKernels = AttnKernels {
    isa: Isa::Avx512,
    scores_rows_f16: (Isa::Avx512, avx512::scores_rows_f16),
    scores_rows_f32: (Isa::Avx512, avx512::scores_rows_f32),
    accum_rows_f16: (Isa::Avx512, avx512::accum_rows_f16),
    accum_rows_f32: (Isa::Avx512, avx512::accum_rows_f32),
    accum_rows_f16_f32: (Isa::Avx512, avx512::accum_rows_f16_f32),
    softmax_weights: (Isa::Avx512, avx512::softmax_weights),
    softmax_online: (Isa::Avx512, avx512::softmax_online),
    silu_mul: (Isa::Avx512, avx512::silu_mul),
    ..AVX2
};

/// The attention kernels for `isa`, if this CPU has it and Kiln has kernels for it (the
/// same ISAs as [`crate::kernels_for`]).
pub fn attn_kernels_for(isa: Isa) -> Option<&'static AttnKernels> {
    match isa {
        Isa::Scalar => Some(&SCALAR),
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 if isa.cpu_has() => Some(&AVX2),
        #[cfg(target_arch = "x86_64")]
        Isa::Avx512 if isa.cpu_has() && crate::kernels_for(isa).is_some() => Some(&AVX512),
        // Other ISAs have matmul kernels first; attention runs scalar there.
        _ if crate::kernels_for(isa).is_some() => Some(&SCALAR),
        _ => None,
    }
}

/// The attention kernels of [`active_isa`].
///
/// # Panics
/// As [`active_isa`]: when `KILN_ISA` asks for something this machine cannot do.
pub fn attn_kernels() -> &'static AttnKernels {
    match attn_kernels_for(active_isa()) {
        Some(k) => k,
        None => unreachable!("the active ISA always has kernels"),
    }
}

/// Checks that every page of `page_elems` elements starting at an offset in `pages` lies in
/// an arena of `arena_len` elements.
fn check_pages(pages: &[usize], page_elems: usize, arena_len: usize) {
    for &p in pages {
        assert!(
            p.checked_add(page_elems)
                .is_some_and(|end| end <= arena_len),
            "page at {p} (+{page_elems}) outside an arena of {arena_len}"
        );
    }
}

impl AttnKernels {
    /// The instruction set of this table.
    pub fn isa(&self) -> Isa {
        self.isa
    }

    /// Which ISA implements each kernel (kernel name, ISA).
    pub fn implementations(&self) -> Vec<(&'static str, Isa)> {
        vec![
            ("round_f16", self.round_f16.0),
            ("scores_f16", self.scores_f16.0),
            ("scores_f32", self.scores_f32.0),
            ("accum_f16", self.accum_f16.0),
            ("accum_f32", self.accum_f32.0),
            ("accum_f16_f32", self.accum_f16_f32.0),
            ("scores_rows_f16", self.scores_rows_f16.0),
            ("scores_rows_f16_split", self.scores_rows_f16_split.0),
            ("scores_rows_f32", self.scores_rows_f32.0),
            ("accum_rows_f16", self.accum_rows_f16.0),
            ("accum_rows_f32", self.accum_rows_f32.0),
            ("accum_rows_f16_f32", self.accum_rows_f16_f32.0),
            ("softmax_weights", self.softmax_weights.0),
            ("silu_mul", self.silu_mul.0),
            ("softmax_online", self.softmax_online.0),
        ]
    }

    /// `out[i] = f32(f16(x[i]))`, rounding to nearest even (the f16 query of ggml's flash
    /// attention with an f16 cache).
    ///
    /// # Panics
    /// If the lengths differ.
    pub fn round_f16(&self, x: &[f32], out: &mut [f32]) {
        assert_eq!(x.len(), out.len(), "round_f16: length mismatch");
        // SAFETY: the table exists only for a CPU with its ISA; lengths checked.
        unsafe { (self.round_f16.1)(x, out) }
    }

    /// Scores of one query against whole pages of f16 keys stored dimension-major
    /// (`k[page + d·bs + slot]`, `d < q.len()`): `out[p·bs + slot] = (Σ_d q[d]·k) · scale`,
    /// summed sequentially over `d`. `q` must already be f16-rounded for ggml's arithmetic.
    /// Slots past a sequence's end are computed too (from whatever the page holds) and are
    /// the caller's to ignore.
    ///
    /// # Panics
    /// If `out.len() != pages.len() · bs` or a page lies outside `k`.
    pub fn scores_f16(
        &self,
        q: &[f32],
        k: &[f16],
        pages: &[usize],
        bs: usize,
        scale: f32,
        out: &mut [f32],
    ) {
        assert_eq!(out.len(), pages.len() * bs, "scores_f16: output length");
        check_pages(pages, q.len() * bs, k.len());
        // SAFETY: the table exists only for a CPU with its ISA; bounds checked above.
        unsafe { (self.scores_f16.1)(q, k, pages, bs, scale, out) }
    }

    /// [`AttnKernels::scores_f16`] for f32 keys: each step `acc = fma(q[d], k, acc)`.
    ///
    /// # Panics
    /// As [`AttnKernels::scores_f16`].
    pub fn scores_f32(
        &self,
        q: &[f32],
        k: &[f32],
        pages: &[usize],
        bs: usize,
        scale: f32,
        out: &mut [f32],
    ) {
        assert_eq!(out.len(), pages.len() * bs, "scores_f32: output length");
        check_pages(pages, q.len() * bs, k.len());
        // SAFETY: as in `scores_f16`.
        unsafe { (self.scores_f32.1)(q, k, pages, bs, scale, out) }
    }

    /// Accumulates value rows into an f16 accumulator of `acc.len()` dimensions. Key `i` of
    /// `ms`/`vs` is key `first + i` counted across `pages`, i.e. the row at
    /// `v[pages[key / bs] + (key % bs) · acc.len()..]`. For each key in order:
    /// `acc = f16(acc · ms)` if `ms ≠ 1`, then `acc = f16(fma(v, vs, acc))`.
    ///
    /// # Panics
    /// If `ms` and `vs` differ in length, the keys run past the pages, or a page lies
    /// outside `v`.
    #[allow(clippy::too_many_arguments)]
    pub fn accum_f16(
        &self,
        acc: &mut [f16],
        v: &[f16],
        pages: &[usize],
        bs: usize,
        first: usize,
        ms: &[f32],
        vs: &[f32],
    ) {
        check_accum(acc.len(), v.len(), pages, bs, first, ms, vs);
        // SAFETY: as in `scores_f16`.
        unsafe { (self.accum_f16.1)(acc, v, pages, bs, first, ms, vs) }
    }

    /// [`AttnKernels::accum_f16`] with an f32 accumulator: `acc = acc · ms` if `ms ≠ 1`,
    /// then `acc = fma(v, vs, acc)`.
    ///
    /// # Panics
    /// As [`AttnKernels::accum_f16`].
    #[allow(clippy::too_many_arguments)]
    pub fn accum_f32(
        &self,
        acc: &mut [f32],
        v: &[f32],
        pages: &[usize],
        bs: usize,
        first: usize,
        ms: &[f32],
        vs: &[f32],
    ) {
        check_accum(acc.len(), v.len(), pages, bs, first, ms, vs);
        // SAFETY: as in `scores_f16`.
        unsafe { (self.accum_f32.1)(acc, v, pages, bs, first, ms, vs) }
    }
}

impl AttnKernels {
    /// [`AttnKernels::accum_f32`] over f16 value rows (each widened exactly): `acc = acc · ms`
    /// if `ms ≠ 1`, then `acc = fma(f32(v), vs, acc)` — the f32 accumulator of ggml's tiled
    /// flash attention, over an f16 cache.
    ///
    /// # Panics
    /// As [`AttnKernels::accum_f16`].
    #[allow(clippy::too_many_arguments)]
    pub fn accum_f16_f32(
        &self,
        acc: &mut [f32],
        v: &[f16],
        pages: &[usize],
        bs: usize,
        first: usize,
        ms: &[f32],
        vs: &[f32],
    ) {
        check_accum(acc.len(), v.len(), pages, bs, first, ms, vs);
        // SAFETY: as in `scores_f16`.
        unsafe { (self.accum_f16_f32.1)(acc, v, pages, bs, first, ms, vs) }
    }
}

impl AttnKernels {
    /// Many query rows against the same pages of keys, `q` holding the rows one after another
    /// (`hd` each): row `r`'s scores are `out[r·n..(r + 1)·n]`, `n = pages.len()·bs`, each
    /// exactly [`AttnKernels::scores_f16`] of that row alone. Sharing each loaded key among
    /// several rows is what makes this faster than a call per row.
    ///
    /// # Panics
    /// If `hd` is 0 or does not divide `q.len()`, `out` is not `rows·n` long, or a page lies
    /// outside `k`.
    #[allow(clippy::too_many_arguments)]
    pub fn scores_rows_f16(
        &self,
        q: &[f32],
        hd: usize,
        k: &[f16],
        pages: &[usize],
        bs: usize,
        scale: f32,
        out: &mut [f32],
    ) {
        check_rows(q.len(), hd, out.len(), pages.len() * bs, "scores_rows_f16");
        check_pages(pages, hd * bs, k.len());
        // SAFETY: as in `scores_f16`.
        unsafe { (self.scores_rows_f16.1)(q, hd, k, pages, bs, scale, out) }
    }

    /// The scores of the one-row arithmetic: as [`AttnKernels::scores_rows_f16`] (rows of
    /// f16-rounded queries against the same pages of f16 keys, `out[r·n..]`), each score's
    /// dot product summed in the order of ggml's `ggml_vec_dot_f16` in its AVX-512 build
    /// rather than sequentially: 64 lane sums (dimension `d` into lane `d mod 64`) folded by
    /// a fixed tree, then the last `hd mod 64` dimensions in f64 (see the module docs).
    ///
    /// # Panics
    /// As [`AttnKernels::scores_rows_f16`].
    #[allow(clippy::too_many_arguments)]
    pub fn scores_rows_f16_split(
        &self,
        q: &[f32],
        hd: usize,
        k: &[f16],
        pages: &[usize],
        bs: usize,
        scale: f32,
        out: &mut [f32],
    ) {
        check_rows(
            q.len(),
            hd,
            out.len(),
            pages.len() * bs,
            "scores_rows_f16_split",
        );
        check_pages(pages, hd * bs, k.len());
        // SAFETY: as in `scores_f16`.
        unsafe { (self.scores_rows_f16_split.1)(q, hd, k, pages, bs, scale, out) }
    }

    /// [`AttnKernels::scores_rows_f16`] for f32 keys (each row as [`AttnKernels::scores_f32`]).
    ///
    /// # Panics
    /// As [`AttnKernels::scores_rows_f16`].
    #[allow(clippy::too_many_arguments)]
    pub fn scores_rows_f32(
        &self,
        q: &[f32],
        hd: usize,
        k: &[f32],
        pages: &[usize],
        bs: usize,
        scale: f32,
        out: &mut [f32],
    ) {
        check_rows(q.len(), hd, out.len(), pages.len() * bs, "scores_rows_f32");
        check_pages(pages, hd * bs, k.len());
        // SAFETY: as in `scores_f16`.
        unsafe { (self.scores_rows_f32.1)(q, hd, k, pages, bs, scale, out) }
    }

    /// Many f16 accumulator rows (`acc` holds rows of `dv`) over the same keys
    /// `first..first + n`: row `r` is exactly [`AttnKernels::accum_f16`] of that row alone
    /// with weights `ms[r·stride..][..n]`, `vs[r·stride..][..n]`. Each value row read serves
    /// every accumulator row.
    ///
    /// # Panics
    /// If `dv` is 0 or does not divide `acc.len()`, `n > stride` (with more than one row),
    /// the weights are too short for the rows, the keys run past the pages, or a page lies
    /// outside `v`.
    #[allow(clippy::too_many_arguments)]
    pub fn accum_rows_f16(
        &self,
        acc: &mut [f16],
        dv: usize,
        v: &[f16],
        pages: &[usize],
        bs: usize,
        first: usize,
        n: usize,
        ms: &[f32],
        vs: &[f32],
        stride: usize,
    ) {
        check_accum_rows(acc.len(), dv, v.len(), pages, bs, first, n, ms, vs, stride);
        // SAFETY: as in `scores_f16`.
        unsafe { (self.accum_rows_f16.1)(acc, dv, v, pages, bs, first, n, ms, vs, stride) }
    }

    /// [`AttnKernels::accum_rows_f16`] with f32 accumulators and values (each row as
    /// [`AttnKernels::accum_f32`]).
    ///
    /// # Panics
    /// As [`AttnKernels::accum_rows_f16`].
    #[allow(clippy::too_many_arguments)]
    pub fn accum_rows_f32(
        &self,
        acc: &mut [f32],
        dv: usize,
        v: &[f32],
        pages: &[usize],
        bs: usize,
        first: usize,
        n: usize,
        ms: &[f32],
        vs: &[f32],
        stride: usize,
    ) {
        check_accum_rows(acc.len(), dv, v.len(), pages, bs, first, n, ms, vs, stride);
        // SAFETY: as in `scores_f16`.
        unsafe { (self.accum_rows_f32.1)(acc, dv, v, pages, bs, first, n, ms, vs, stride) }
    }

    /// [`AttnKernels::accum_rows_f16`] with f32 accumulators over f16 values (each row as
    /// [`AttnKernels::accum_f16_f32`]).
    ///
    /// # Panics
    /// As [`AttnKernels::accum_rows_f16`].
    #[allow(clippy::too_many_arguments)]
    pub fn accum_rows_f16_f32(
        &self,
        acc: &mut [f32],
        dv: usize,
        v: &[f16],
        pages: &[usize],
        bs: usize,
        first: usize,
        n: usize,
        ms: &[f32],
        vs: &[f32],
        stride: usize,
    ) {
        check_accum_rows(acc.len(), dv, v.len(), pages, bs, first, n, ms, vs, stride);
        // SAFETY: as in `scores_f16`.
        unsafe { (self.accum_rows_f16_f32.1)(acc, dv, v, pages, bs, first, n, ms, vs, stride) }
    }
}

impl AttnKernels {
    /// One row's softmax step over a tile of its scores `s` (the tiled prompt arithmetic):
    /// with `m` the running maximum so far, returns `(m', sum)` where `m' = max(m, max s)`
    /// (`-0.0` as `+0.0`), and writes `out[j] = exp(s[j] − m')` with [`exp`]; `sum` is
    /// `Σ out[j]` in a fixed order — element `j` into partial sum `j mod 16`, the sixteen
    /// folded pairwise (`i + 8`, `+ 4`, `+ 2`, `+ 1`) — so every ISA gives the same bits.
    /// The caller rescales what it had by `exp(m − m')`. Scores must be NaN-free.
    ///
    /// # Panics
    /// If `out` is shorter than `s`.
    pub fn softmax_weights(&self, s: &[f32], m: f32, out: &mut [f32]) -> (f32, f32) {
        assert!(out.len() >= s.len(), "softmax_weights: output too short");
        // SAFETY: as in `scores_f16`; `out` holds `s.len()` floats.
        unsafe { (self.softmax_weights.1)(s, m, &mut out[..s.len()]) }
    }

    /// One row's key-by-key online softmax over its scores `s` (the one-row arithmetic,
    /// llama.cpp's one-row flash attention), from the running maximum `max` and sum `sum`:
    /// for each key in order, when `s > max` the rescale `ms = expf(max − s)`, the weight
    /// `vs = 1`, `sum = sum·ms + 1` and `max = s`; otherwise `ms = 1`, `vs = expf(s − max)`,
    /// `sum += vs`. Writes `ms[j]`, `vs[j]` for every key and returns `(max, sum)`; `expf` is
    /// [`expf`] (glibc's algorithm, written down). The weights are those the value kernels
    /// take.
    ///
    /// # Panics
    /// If `ms` or `vs` is shorter than `s`.
    pub fn softmax_online(
        &self,
        s: &[f32],
        max: f32,
        sum: f32,
        ms: &mut [f32],
        vs: &mut [f32],
    ) -> (f32, f32) {
        let n = s.len();
        assert!(
            ms.len() >= n && vs.len() >= n,
            "softmax_online: weights of {} / {} for {n} scores",
            ms.len(),
            vs.len()
        );
        // SAFETY: as in `scores_f16`; the weights hold `n` floats each.
        unsafe { (self.softmax_online.1)(s, max, sum, &mut ms[..n], &mut vs[..n]) }
    }

    /// The gated SiLU of a feed-forward block, `g = g / (1 + expf(−g)) · u` elementwise,
    /// `expf` being [`expf`] (glibc's, written down), so every ISA gives the scalar
    /// function's bits.
    ///
    /// # Panics
    /// If `g` and `u` differ in length.
    pub fn silu_mul(&self, g: &mut [f32], u: &[f32]) {
        assert_eq!(g.len(), u.len(), "silu_mul: gate and up lengths differ");
        // SAFETY: as in `scores_f16`; equal lengths (asserted).
        unsafe { (self.silu_mul.1)(g, u) }
    }
}

fn check_rows(q_len: usize, hd: usize, out_len: usize, n: usize, what: &str) {
    assert!(
        hd > 0 && q_len.is_multiple_of(hd),
        "{what}: {q_len} query elements are not rows of {hd}"
    );
    assert_eq!(out_len, q_len / hd * n, "{what}: output length");
}

#[allow(clippy::too_many_arguments)]
fn check_accum_rows(
    acc_len: usize,
    dv: usize,
    v_len: usize,
    pages: &[usize],
    bs: usize,
    first: usize,
    n: usize,
    ms: &[f32],
    vs: &[f32],
    stride: usize,
) {
    assert!(
        dv > 0 && acc_len.is_multiple_of(dv),
        "accum_rows: {acc_len} accumulator elements are not rows of {dv}"
    );
    let rows = acc_len / dv;
    if rows > 0 {
        assert!(
            rows == 1 || n <= stride,
            "accum_rows: {n} keys exceed the stride {stride}"
        );
        let need = (rows - 1) * stride + n;
        assert!(
            ms.len() >= need && vs.len() >= need,
            "accum_rows: weights of {} / {} for {rows} rows of stride {stride}, {n} keys",
            ms.len(),
            vs.len()
        );
    }
    assert!(
        first + n <= pages.len() * bs,
        "accum_rows: keys {first}..{} run past {} pages of {bs}",
        first + n,
        pages.len()
    );
    check_pages(pages, dv * bs, v_len);
}

fn check_accum(
    dv: usize,
    v_len: usize,
    pages: &[usize],
    bs: usize,
    first: usize,
    ms: &[f32],
    vs: &[f32],
) {
    assert_eq!(ms.len(), vs.len(), "accum: ms and vs lengths differ");
    assert!(
        first + ms.len() <= pages.len() * bs,
        "accum: keys {first}..{} run past {} pages of {bs}",
        first + ms.len(),
        pages.len()
    );
    check_pages(pages, dv * bs, v_len);
}

#[cfg(test)]
mod tests;
