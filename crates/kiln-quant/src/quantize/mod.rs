//! Weight quantizers: rows of `f32` to ggml block types, with ggml's reference algorithms
//! (`quantize_row_*_ref`, no importance matrix), so a tensor quantized here has the blocks
//! `llama-quantize` writes for the same float input and the files load in llama.cpp.
//!
//! These run once per load or per `kiln quantize`, not per token, so there is one portable
//! implementation of each; they are not in the per-ISA kernel tables.
//!
//! To add a type: write `quantize_row_<type>(x: &[f32], out: &mut [u8])` in a submodule and
//! add a line to [`QUANTIZERS`].

mod k;
mod legacy;

use kiln_format::GgmlType;

use crate::error::QuantError;

type RowQuantizer = fn(&[f32], &mut [u8]);

/// Every type with a quantizer, in the order listed to users.
const QUANTIZERS: &[(GgmlType, RowQuantizer)] = &[
    (GgmlType::Q8_0, legacy::quantize_row_q8_0),
    (GgmlType::Q4_0, legacy::quantize_row_q4_0),
    (GgmlType::Q4_K, k::quantize_row_q4_k),
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
