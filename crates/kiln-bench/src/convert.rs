//! A full-precision copy of a quantized model: every tensor dequantized to F32 (or F16),
//! metadata and tokenizer kept. It is the reference that requantized copies are measured
//! against in `cargo xtask bench kl` (the dequantized weights are exactly what the
//! quantized model computes with, so the copy is the quantized model's "f32 source").
//!
//! [`quantize_model`] goes the other way (`kiln quantize`): every weight matrix of a GGUF
//! requantized to a block type with the ggml-reference quantizers of
//! [`kiln_model::quantize`], metadata and tokenizer kept, so the file loads in Kiln and in
//! llama.cpp.

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

/// `general.file_type` values (llama.cpp's `llama_ftype`). A whole-file K-quant is written
/// as the `_M` mix of its type (Q3_K → `Q3_K_M`, Q4_K → `Q4_K_M`, Q5_K → `Q5_K_M`), the
/// value `llama-quantize --pure` writes for those.
fn file_type_of(ty: GgmlType) -> Option<u32> {
    match ty {
        GgmlType::F32 => Some(0),
        GgmlType::F16 => Some(1),
        GgmlType::Q4_0 => Some(2),
        GgmlType::Q4_1 => Some(3),
        GgmlType::Q8_0 => Some(7),
        GgmlType::Q5_0 => Some(8),
        GgmlType::Q5_1 => Some(9),
        GgmlType::Q2_K => Some(10),
        GgmlType::Q3_K => Some(12),
        GgmlType::Q4_K => Some(15),
        GgmlType::Q5_K => Some(17),
        GgmlType::Q6_K => Some(18),
        GgmlType::IQ4_NL => Some(25),
        GgmlType::IQ4_XS => Some(30),
        GgmlType::BF16 => Some(32),
        _ => None,
    }
}

/// The types [`convert_model`] writes: F32, F16, BF16 and the quantizers' types.
pub fn convert_types() -> Vec<GgmlType> {
    let mut v = vec![GgmlType::F32, GgmlType::F16, GgmlType::BF16];
    v.extend(kiln_model::quantize_types());
    v
}

/// What [`quantize_model`] did to one tensor.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TensorPlan {
    pub name: String,
    pub from: GgmlType,
    pub to: GgmlType,
}

/// Writes `src` to `out` with every weight matrix (a tensor of two or more dimensions whose
/// name ends in `.weight`) quantized to `to` (any of [`kiln_quant::quantize_types`]), as
/// `llama-quantize` does: a matrix whose rows are not a whole number of `to`'s blocks falls
/// back as llama-quantize does ([`kiln_model::quantize::fit`]; it keeps its stored type
/// if nothing fits); the output head (`output.weight`, or `token_embd.weight` when the
/// head is tied to it) is written at Q6_K unless `to` is Q8_0 (Q8_0 if its rows do not fit
/// Q6_K), as llama-quantize does; a matrix already of its target type is copied
/// unchanged; 1-D tensors (norms, biases) become F32. Metadata (the tokenizer with it) is
/// copied, `general.file_type` set. Returns what happened to each tensor and the bytes
/// written.
pub fn quantize_model(
    src: &GgufFile,
    to: GgmlType,
    out: &Path,
) -> Result<(Vec<TensorPlan>, u64), BenchError> {
    if !kiln_model::quantize_types().contains(&to) {
        return Err(BenchError::UnsupportedTarget {
            type_name: to.name(),
        });
    }
    let Some(file_type) = file_type_of(to) else {
        return Err(BenchError::UnsupportedTarget {
            type_name: to.name(),
        });
    };
    let mut w = GgufWriter::new();
    copy_metadata(src, &mut w, file_type)?;
    let has_output = src.tensor_info("output.weight").is_some();
    let mut plan = Vec::new();
    for info in src.tensors() {
        let data = src.tensor_data(info);
        let cols = info.row_len() as usize;
        let rows = info.n_rows() as usize;
        let is_matrix = info.dims.len() >= 2 && info.name.ends_with(".weight");
        // The output head (the token embedding when the head is tied to it) decides every
        // logit: like llama-quantize, Kiln writes it at Q6_K for every target but Q8_0
        // (Q8_0 when its rows are not whole Q6_K blocks, through `fit`).
        let is_head =
            info.name == "output.weight" || (info.name == "token_embd.weight" && !has_output);
        let want = if is_head && to != GgmlType::Q8_0 {
            GgmlType::Q6_K
        } else {
            to
        };
        let target = if is_matrix {
            kiln_model::quantize::fit(want, cols).unwrap_or(info.ty)
        } else {
            GgmlType::F32
        };
        let bytes = if target == info.ty {
            data.to_vec()
        } else if target == GgmlType::F32 {
            let mut row = vec![0.0f32; info.n_elements() as usize];
            kiln_quant::dequantize_row(info.ty, data, &mut row)?;
            row.iter().flat_map(|x| x.to_le_bytes()).collect()
        } else {
            let m = kiln_quant::QMatrix::new(info.ty, rows, cols, data)?;
            kiln_model::quantize::quantize_matrix(&m, target)?
        };
        w.add_tensor(info.name.clone(), target, &info.dims, bytes)?;
        plan.push(TensorPlan {
            name: info.name.clone(),
            from: info.ty,
            to: target,
        });
    }
    Ok((plan, w.write_file(out)?))
}

/// [`dequantize_model`] for F32/F16/BF16, else [`quantize_model`].
pub fn convert_model(
    src: &GgufFile,
    to: GgmlType,
    out: &Path,
) -> Result<(Vec<TensorPlan>, u64), BenchError> {
    match to {
        GgmlType::F32 | GgmlType::F16 | GgmlType::BF16 => {
            let bytes = dequantize_model(src, to, out)?;
            let plan = src
                .tensors()
                .iter()
                .map(|t| TensorPlan {
                    name: t.name.clone(),
                    from: t.ty,
                    to: if t.dims.len() == 1 { GgmlType::F32 } else { to },
                })
                .collect();
            Ok((plan, bytes))
        }
        _ => quantize_model(src, to, out),
    }
}

fn copy_metadata(src: &GgufFile, w: &mut GgufWriter, file_type: u32) -> Result<(), BenchError> {
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
    Ok(())
}

/// Writes `src` with every tensor converted to `to` (F32, F16 or BF16, rounded to nearest
/// even as ggml does); 1-D tensors stay F32 as llama.cpp keeps norms. Returns the bytes
/// written.
pub fn dequantize_model(src: &GgufFile, to: GgmlType, out: &Path) -> Result<u64, BenchError> {
    let Some(file_type) = file_type_of(to) else {
        return Err(BenchError::UnsupportedTarget {
            type_name: to.name(),
        });
    };
    if !matches!(to, GgmlType::F32 | GgmlType::F16 | GgmlType::BF16) {
        return Err(BenchError::UnsupportedTarget {
            type_name: to.name(),
        });
    }
    let mut w = GgufWriter::new();
    copy_metadata(src, &mut w, file_type)?;
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
            GgmlType::BF16 => row
                .iter()
                .flat_map(|&x| kiln_quant::blocks::f32_to_bf16(x).to_le_bytes())
                .collect(),
            _ => row.iter().flat_map(|x| x.to_le_bytes()).collect(),
        };
        w.add_tensor(info.name.clone(), target, &info.dims, bytes)?;
    }
    Ok(w.write_file(out)?)
}

/// The architectures [`convert_hf_dir`] writes, by GGUF name: those whose descriptor says
/// their converted layout loads in llama.cpp (`ArchDescriptor::gguf_export`).
/// `config.json`'s `model_type` is mapped as the loader maps it (`mistral` → `llama`,
/// `gemma3_text` → `gemma3`).
pub fn hf_convert_archs() -> Vec<&'static str> {
    kiln_model::ARCHITECTURES
        .iter()
        .filter(|a| a.gguf_export)
        .map(|a| a.gguf_name)
        .collect()
}

/// What [`convert_hf_dir`] wrote.
#[derive(Clone, Debug)]
pub struct HfConversion {
    pub plan: Vec<TensorPlan>,
    pub bytes: u64,
    /// Whether the directory had a `tokenizer.json` (the file then carries the
    /// `tokenizer.ggml.*` keys; without them Kiln loads the file, llama.cpp does not).
    pub tokenizer: bool,
}

/// Writes the Hugging Face checkpoint in `dir` (config.json, safetensors, tokenizer.json)
/// as a GGUF file at `out` with every weight matrix converted to `to`, as
/// `convert_hf_to_gguf.py` followed by `llama-quantize` would: the GGUF metadata and tensor
/// layout of [`kiln_model::convert::hf_to_gguf`] (llama Q/K rows permuted, Gemma norms
/// stored as `1 + w`), the vocabulary of [`kiln_tokenizer::gguf_metadata_from_hf_dir`]
/// (padded to the embedding's rows), `general.name` from the directory's name, then the
/// plan of [`convert_model`]. Only [`hf_convert_archs`] are written; others are refused
/// before any tensor is read.
pub fn convert_hf_dir(dir: &Path, to: GgmlType, out: &Path) -> Result<HfConversion, BenchError> {
    if let Some(model_type) = model_type(dir) {
        let arch = kiln_model::ArchDescriptor::by_hf_model_type(&model_type).ok();
        if !arch.is_some_and(|a| a.gguf_export) {
            return Err(BenchError::UnsupportedHfArchitecture {
                dir: dir.to_path_buf(),
                // A model_type Kiln does not load at all is named as itself.
                arch: arch.map_or(model_type.clone(), |a| a.gguf_name.to_string()),
                model_type,
                supported: hf_convert_archs().join(", "),
            });
        }
    }
    let mut w = kiln_model::convert::hf_to_gguf(dir)?;
    let arch = w.metadata().str("general.architecture")?.to_string();
    let n_vocab = w.metadata().opt_u64(&format!("{arch}.vocab_size"))?;
    if let Some(name) = dir
        .canonicalize()
        .ok()
        .and_then(|d| d.file_name().map(|n| n.to_string_lossy().into_owned()))
    {
        w.add_metadata("general.name", name)?;
    }
    w.add_metadata("general.quantization_version", 2u32)?;
    let tokenizer = dir.join("tokenizer.json").is_file();
    if tokenizer {
        let md = kiln_tokenizer::gguf_metadata_from_hf_dir(dir, n_vocab.map(|n| n as usize))?;
        for (k, v) in md.iter() {
            w.add_metadata(k, v.clone())?;
        }
    }
    let src = GgufFile::from_bytes(w.to_bytes()?)?;
    drop(w);
    let (plan, bytes) = convert_model(&src, to, out)?;
    Ok(HfConversion {
        plan,
        bytes,
        tokenizer,
    })
}

/// `config.json`'s `model_type`, when it can be read (else the loader reports why not).
fn model_type(dir: &Path) -> Option<String> {
    let path = dir.join("config.json");
    if std::fs::metadata(&path).ok()?.len() > 4 << 20 {
        return None;
    }
    let text = std::fs::read_to_string(&path).ok()?;
    let v: serde_json::Value = serde_json::from_str(&text).ok()?;
    v.get("model_type")?.as_str().map(str::to_string)
}
