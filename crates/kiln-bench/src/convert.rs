//! A full-precision copy of a quantized model: every tensor dequantized to F32 (or F16),
//! metadata and tokenizer kept. It is the reference that requantized copies are measured
//! against in `cargo xtask bench kl` (the dequantized weights are exactly what the
//! quantized model computes with, so the copy is the quantized model's "f32 source").

use std::path::Path;

use kiln_format::{GgmlType, GgufFile, GgufWriter};

use crate::BenchError;

/// A one-word summary of a model's weights: the type holding the most bytes among its
/// matrices (e.g. `Q4_1` for SmolLM2-135M-Instruct Q4_1, `Q4_K` for a Q4_K_M mix).
pub fn dominant_type(file: &GgufFile) -> String {
    let mut bytes: Vec<(GgmlType, u64)> = Vec::new();
    for t in file.tensors().iter().filter(|t| t.dims.len() >= 2) {
        match bytes.iter_mut().find(|(ty, _)| *ty == t.ty) {
            Some((_, n)) => *n += t.n_bytes,
            None => bytes.push((t.ty, t.n_bytes)),
        }
    }
    bytes
        .iter()
        .max_by_key(|(_, n)| *n)
        .map_or_else(|| "none".to_string(), |(ty, _)| ty.name().to_string())
}

/// `general.file_type` values (llama.cpp's `llama_ftype`).
fn file_type_of(ty: GgmlType) -> Option<u32> {
    match ty {
        GgmlType::F32 => Some(0),
        GgmlType::F16 => Some(1),
        _ => None,
    }
}

/// Writes `src` with every tensor converted to `to` (F32 or F16); 1-D tensors stay F32 as
/// llama.cpp keeps norms. Returns the bytes written.
pub fn dequantize_model(src: &GgufFile, to: GgmlType, out: &Path) -> Result<u64, BenchError> {
    let Some(file_type) = file_type_of(to) else {
        return Err(BenchError::UnsupportedTarget {
            type_name: to.name(),
        });
    };
    let mut w = GgufWriter::new();
    for (key, value) in src.metadata().iter() {
        if key == "general.file_type" {
            w.add_metadata(key, file_type)?;
        } else {
            w.add_metadata(key, value.clone())?;
        }
    }
    if !src.metadata().contains_key("general.file_type") {
        w.add_metadata("general.file_type", file_type)?;
    }
    let mut row = Vec::new();
    for info in src.tensors() {
        let data = src.tensor_data(info);
        // The parser bounded n_bytes by the file, so the element count fits in memory.
        row.resize(info.n_elements() as usize, 0.0f32);
        kiln_quant::dequantize_row(info.ty, data, &mut row)?;
        let target = if info.dims.len() == 1 {
            GgmlType::F32
        } else {
            to
        };
        let bytes: Vec<u8> = match target {
            GgmlType::F16 => row
                .iter()
                .flat_map(|&x| half::f16::from_f32(x).to_le_bytes())
                .collect(),
            _ => row.iter().flat_map(|x| x.to_le_bytes()).collect(),
        };
        w.add_tensor(info.name.clone(), target, &info.dims, bytes)?;
    }
    Ok(w.write_file(out)?)
}
