//! # kiln-quant
//!
//! GGML block formats and the arithmetic on them: dequantization, conversion of activations
//! to the type each weight type is dotted with (`vec_dot_type`), integer dot products, and the
//! matrix products the model runs on (GEMV at decode, a cache-blocked GEMM at prefill).
//!
//! **Owns:** the `#[repr(C)]` block layouts ([`blocks`]), a scalar reference kernel for
//! everything, SIMD kernels chosen once at run time ([`Isa`], [`kernels`], `KILN_ISA`), and
//! [`matmul`].
//!
//! **Must never:** know about models, tensors' names or files; allocate inside a kernel or a
//! matmul once its [`MatmulScratch`] has grown; detect CPU features per call; silently run a
//! different ISA than the one requested; produce an output that depends on batch size,
//! tiling or thread count.
//!
//! ## Fidelity to ggml
//! Outputs are compared token for token with llama.cpp's x86 build, so activations are
//! quantized as ggml's AVX2 code does (see `scalar::act`) and the AVX2 dot kernels perform
//! ggml's AVX2 operations in the same order. The scalar kernels are the readable oracle: the
//! same quantized activations bit for bit, dot products equal up to float summation order.
//!
//! ## Kernel coverage
//! Which ISA implements what (also [`Kernels::implementations`], checked by a test):
//!
//! | kernel | scalar | avx2 | neon |
//! |---|---|---|---|
//! | quantize Q8_0, Q8_1, Q8_K | ✓ | ✓ | ✓ |
//! | quantize F16 | ✓ | ✓ | scalar |
//! | quantize BF16, F32 | ✓ | scalar (conversion / copy; not hot) | scalar |
//! | dequantize F16, BF16, Q4_0, Q4_1, Q5_0, Q8_0, Q4_K, Q6_K | ✓ | ✓ | scalar |
//! | dequantize F32 | ✓ | scalar (a copy) | scalar |
//! | dequantize Q5_1, Q2_K, Q3_K, Q5_K, IQ4_NL, IQ4_XS | ✓ | scalar (not on a per-token path) | scalar |
//! | dot, dotr4 (GEMV), dot4 (GEMM) | ✓ every weight type | the types `tests/isa.rs` lists with AVX2 dots (today every type: K-quant, IQ4, Q5_1 and float `dotr4`; F32, Q2_K, Q3_K, IQ4 `dot4`: repeated single dots; F16, BF16 `dot4`: the weights widened once for four tokens; `dot8`, 1 row × 8 tokens, and `dot23`, 1 row × 2 or 3 tokens, for Q4_0, Q4_1, Q5_0, Q8_0, Q4_K, Q6_K); a type added with scalar kernels only reports scalar | F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q8_0, Q4_K, Q6_K: ✓ (`sdot` with `dotprod`, else widening multiplies; float `dotr4`/`dot4`: repeated single dots); the other types: scalar |
//!
//! The AVX-512 table (F/BW/VL + VNNI, chosen over AVX2 when present) is the AVX2 table with
//! `dot4` and `dot8` of Q4_K, Q5_K, F16 and BF16, every dot of Q6_K, the single-row `dot` of
//! Q4_K and the GEMV `dotr4` of Q4_K, Q4_0, Q5_0, Q8_0 and Q4_1 replaced by AVX-512 kernels,
//! plus GEMM tiles no other table has: two rows × eight tokens (`dot8r2`) for Q4_K and Q6_K,
//! four rows × eight tokens with the tokens across the lanes (`dot8r4`) for Q4_0, Q5_0, Q8_0
//! and Q4_1; every other entry is AVX2's but `dot23`, which it leaves out (two or three
//! tokens take its wider kernels over padding, as measured on an AVX-512 machine). The NEON
//! table (aarch64) is tested against scalar under qemu-user (`cargo xtask test-aarch64`).
//!
//! The attention kernels over paged K/V (scores, value accumulation, K/V row storage) are in
//! [`attn`], with their own coverage table.

pub mod attn;
pub mod blocks;
mod error;
mod isa;
mod kernels;
mod matmul;
pub mod pool;
mod quantize;
mod types;

mod arch;
mod scalar;
mod table;

pub use error::QuantError;
pub use isa::{Isa, IsaError};
pub use kernels::{
    KernelImpl, active_isa, available_isas, kernels, kernels_for, select_isa, try_active_isa,
};
pub use kiln_format::GgmlType;
pub use matmul::{
    GATHER_ZERO, GROUP_ROW_ALIGN, MatmulGroup, MatmulScratch, QMatrix, group_starts_aligned,
    matmul, matmul_grouped, matmul_grouped_with, matmul_prepared, matmul_prepared_with,
};
pub use quantize::{quantize_row, quantize_types};
pub use table::Kernels;

use types::{AType, WType};

/// Whether kiln-quant can compute with `ty` (dequantize it and dot it with activations).
pub fn is_supported(ty: GgmlType) -> bool {
    WType::of(ty).is_some()
}

/// Every weight type kiln-quant computes with (dequantizes and dots with activations), in
/// family order: F32, F16, BF16, the legacy types, the K-quants, IQ4_NL, IQ4_XS. Derived
/// from the one list in `types.rs` that also builds the scalar kernel table, so every type
/// here has kernels on every ISA.
pub fn supported_types() -> Vec<GgmlType> {
    WType::ALL.iter().map(|w| w.ggml()).collect()
}

/// Every activation type (what activations are converted to before a dot product: F32, F16,
/// BF16, Q8_0, Q8_1, Q8_K), from the same list as the kernel tables.
pub fn activation_types() -> Vec<GgmlType> {
    AType::ALL.iter().map(|a| a.ggml()).collect()
}

/// The type activations are converted to before a dot product with weights of type `ty`
/// (ggml's `vec_dot_type`): Q4_0/Q5_0/Q8_0/IQ4_NL → Q8_0, Q4_1/Q5_1 → Q8_1,
/// Q2_K/Q3_K/Q4_K/Q5_K/Q6_K/IQ4_XS → Q8_K, and the float types to themselves.
pub fn vec_dot_type(ty: GgmlType) -> Result<GgmlType, QuantError> {
    WType::of(ty)
        .map(|w| w.act().ggml())
        .ok_or(QuantError::unsupported(ty))
}

/// Whether `ty` is an activation type (F32, F16, BF16, Q8_0, Q8_1, Q8_K).
pub fn is_activation_type(ty: GgmlType) -> bool {
    AType::of(ty).is_some()
}

/// Dequantizes the first `dst.len()` elements of `src` (blocks of `ty`) into `dst`, with the
/// active kernels. `dst.len()` must be a whole number of blocks and `src` must hold them.
pub fn dequantize_row(ty: GgmlType, src: &[u8], dst: &mut [f32]) -> Result<(), QuantError> {
    if !is_supported(ty) {
        return Err(QuantError::unsupported(ty));
    }
    if !dst.len().is_multiple_of(ty.block_elems()) {
        return Err(QuantError::PartialBlock {
            type_name: ty.name(),
            elems: dst.len(),
            block_elems: ty.block_elems(),
        });
    }
    let need = dst.len() / ty.block_elems() * ty.block_bytes();
    let src = src.get(..need).ok_or(QuantError::BadShape {
        type_name: ty.name(),
        what: "source bytes (too few for the requested elements)",
        expected: need,
        actual: src.len(),
    })?;
    kernels().dequantize(ty, src, dst)
}
