//! Quantize-on-load (`--quantize TYPE`, any of [`kiln_quant::quantize_types`]): float
//! weight matrices converted to a block type once, so an F16/BF16 checkpoint runs on the integer kernels.
//!
//! The row quantizers are kiln-quant's ([`kiln_quant::quantize_row`], ggml's reference
//! algorithms); this module picks the type per tensor and runs rows in parallel.

use kiln_format::GgmlType;
use kiln_quant::QMatrix;
use rayon::prelude::*;

use crate::ModelError;

/// The type a row of `cols` elements is quantized to when `target` is asked for: `target`
/// itself if the row is a whole number of its blocks, else llama-quantize's fallback for
/// it (`tensor_type_fallback`: IQ4_XS → IQ4_NL, Q2_K/Q3_K → Q4_0, Q4_K → Q5_0,
/// Q5_K → Q5_1, anything else → Q8_0),
/// else Q8_0, each only if the row is a whole number of its blocks and kiln-quant can
/// both write and compute with it; `None` (keep the stored type) when nothing fits.
pub fn fit(target: GgmlType, cols: usize) -> Option<GgmlType> {
    if cols.is_multiple_of(target.block_elems()) {
        return Some(target);
    }
    let fallback = match target {
        GgmlType::IQ4_XS => GgmlType::IQ4_NL,
        GgmlType::Q2_K | GgmlType::Q3_K => GgmlType::Q4_0,
        GgmlType::Q4_K => GgmlType::Q5_0,
        GgmlType::Q5_K => GgmlType::Q5_1,
        _ => GgmlType::Q8_0,
    };
    let usable = |t: &GgmlType| {
        cols.is_multiple_of(t.block_elems())
            && kiln_quant::quantize_types().contains(t)
            && kiln_quant::is_supported(*t)
    };
    [fallback, GgmlType::Q8_0].into_iter().find(usable)
}

/// Quantizes every row of `src` (any type kiln-quant can dequantize) to `ty`.
pub fn quantize_matrix(src: &QMatrix, ty: GgmlType) -> Result<Vec<u8>, ModelError> {
    if !kiln_quant::quantize_types().contains(&ty) {
        return Err(ModelError::UnsupportedQuantization {
            requested: ty.name().to_string(),
            supported: kiln_quant::quantize_types()
                .iter()
                .map(|t| t.name())
                .collect(),
        });
    }
    let cols = src.cols();
    let row_bytes = cols / ty.block_elems() * ty.block_bytes();
    let mut out = vec![0u8; row_bytes * src.rows()];
    out.par_chunks_mut(row_bytes)
        .enumerate()
        .try_for_each_init(
            || vec![0.0f32; cols],
            |row, (r, dst)| {
                src.dequantize_row(r, row);
                kiln_quant::quantize_row(ty, row, dst)
            },
        )
        .map_err(ModelError::from)?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_that_do_not_fit_fall_back_like_llama_quantize_then_to_the_stored_type() {
        assert_eq!(fit(GgmlType::Q4_K, 512), Some(GgmlType::Q4_K));
        assert_eq!(fit(GgmlType::Q4_K, 576), Some(GgmlType::Q5_0));
        assert_eq!(fit(GgmlType::Q6_K, 576), Some(GgmlType::Q8_0));
        assert_eq!(fit(GgmlType::Q4_0, 576), Some(GgmlType::Q4_0));
        assert_eq!(fit(GgmlType::Q8_0, 172), None);
    }
}
