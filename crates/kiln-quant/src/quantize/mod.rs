//! Weight quantizers: rows of `f32` to ggml block types, with the algorithms ggml runs when
//! `llama-quantize` has no importance matrix (`quantize_row_*_ref` for the legacy and
//! K-quant types, `quantize_row_iq4_nl_impl` with 7 scale trials for IQ4_NL/IQ4_XS) and
//! ggml's float details (round-half-even `nearest_int`, f16 scales rounded to nearest even,
//! sums in ggml's order, ggml's integer truncations). A tensor quantized here has the
//! blocks `llama-quantize` writes for the same float input, byte for byte (checked against
//! its output in `testdata/quant/llama_quantize_blocks.json`), so files load in llama.cpp.
//!
//! Modules: `legacy` (32-element Q4_0, Q4_1, Q5_0, Q5_1, Q8_0), `k` (affine K-quants Q2_K,
//! Q4_K, Q5_K), `k_sym` (symmetric K-quants Q3_K, Q6_K), `iq4` (IQ4_NL, IQ4_XS).
//!
//! These run once per load or per `kiln quantize`, not per token, so there is one portable
//! implementation of each; they are not in the per-ISA kernel tables.
//!
//! To add a type: write `quantize_row_<type>(x: &[f32], out: &mut [u8])` in a submodule and
//! add a line to [`QUANTIZERS`].

mod iq4;
mod k;
mod k_sym;
mod legacy;

use kiln_format::GgmlType;

use crate::error::QuantError;

type RowQuantizer = fn(&[f32], &mut [u8]);

/// Every type with a quantizer, in the order listed to users.
const QUANTIZERS: &[(GgmlType, RowQuantizer)] = &[
    (GgmlType::Q8_0, legacy::quantize_row_q8_0),
    (GgmlType::Q4_0, legacy::quantize_row_q4_0),
    (GgmlType::Q4_1, legacy::quantize_row_q4_1),
    (GgmlType::Q5_0, legacy::quantize_row_q5_0),
    (GgmlType::Q5_1, legacy::quantize_row_q5_1),
    (GgmlType::Q2_K, k::quantize_row_q2_k),
    (GgmlType::Q3_K, k_sym::quantize_row_q3_k),
    (GgmlType::Q4_K, k::quantize_row_q4_k),
    (GgmlType::Q5_K, k::quantize_row_q5_k),
    (GgmlType::Q6_K, k_sym::quantize_row_q6_k),
    (GgmlType::IQ4_NL, iq4::quantize_row_iq4_nl),
    (GgmlType::IQ4_XS, iq4::quantize_row_iq4_xs),
];

/// The block types [`quantize_row`] can write.
pub fn quantize_types() -> Vec<GgmlType> {
    QUANTIZERS.iter().map(|(t, _)| *t).collect()
}

/// Quantizes one row `src` (a whole number of `ty` blocks) into `dst` (exactly the row's
/// bytes in `ty`).
pub fn quantize_row(ty: GgmlType, src: &[f32], dst: &mut [u8]) -> Result<(), QuantError> {
    let Some((_, f)) = QUANTIZERS.iter().find(|(t, _)| *t == ty) else {
        return Err(QuantError::NoQuantizer {
            type_name: ty.name(),
            supported: quantize_types().iter().map(|t| t.name()).collect(),
        });
    };
    if !src.len().is_multiple_of(ty.block_elems()) {
        return Err(QuantError::PartialBlock {
            type_name: ty.name(),
            elems: src.len(),
            block_elems: ty.block_elems(),
        });
    }
    let want = src.len() / ty.block_elems() * ty.block_bytes();
    if dst.len() != want {
        return Err(QuantError::BadShape {
            type_name: ty.name(),
            what: "quantized row bytes",
            expected: want,
            actual: dst.len(),
        });
    }
    f(src, dst);
    Ok(())
}

#[cfg(test)]
mod tests;
