//! Hugging Face checkpoint → GGUF, the way llama.cpp's converter lays it out: GGUF tensor
//! names and metadata keys, llama Q/K rows permuted for adjacent-pair RoPE, GPT-2 `Conv1D`
//! weights transposed, Gemma norms stored as `1 + w`, Llama 3 `rope_freqs` materialised.
//! Matrices keep their stored type (F32, F16 or BF16); vectors are written as F32. Integer
//! hyperparameters are written as u32, the type llama.cpp requires.
//!
//! No tokenizer is written (the model does not need one); the result is for loading with
//! [`crate::Model`], e.g. to check that a checkpoint gives the same logits from both
//! formats.

use std::path::Path;

use kiln_format::{GgmlType, GgufWriter, SafetensorsSet};

use crate::ModelError;
use crate::arch::{ArchDescriptor, read_hf_config};
use crate::hf::Transform;

/// Tensor names outside the blocks, in GGUF order.
const TOP: &[&str] = &[
    "token_embd.weight",
    "position_embd.weight",
    "output_norm.weight",
    "output_norm.bias",
    "output.weight",
    "output.bias",
];

/// Tensor names inside block `N` (`blk.N.` + these).
const BLOCK: &[&str] = &[
    "attn_norm.weight",
    "attn_norm.bias",
    "attn_q.weight",
    "attn_q.bias",
    "attn_k.weight",
    "attn_k.bias",
    "attn_v.weight",
    "attn_v.bias",
    "attn_qkv.weight",
    "attn_qkv.bias",
    "attn_q_norm.weight",
    "attn_k_norm.weight",
    "attn_output.weight",
    "attn_output.bias",
    "post_attention_norm.weight",
    "ffn_norm.weight",
    "ffn_norm.bias",
    "ffn_gate.weight",
    "ffn_up.weight",
    "ffn_up.bias",
    "ffn_down.weight",
    "ffn_down.bias",
    "post_ffw_norm.weight",
];

/// Converts the checkpoint in `dir` to an in-memory GGUF file.
pub fn hf_to_gguf(dir: impl AsRef<Path>) -> Result<GgufWriter, ModelError> {
    let dir = dir.as_ref();
    let hf = read_hf_config(dir)?;
    let set = SafetensorsSet::open_dir(dir)?;
    hf.check_tensors(&set)?;
    let md = &hf.metadata;
    let arch = md.str("general.architecture")?.to_string();
    let qk_permute = ArchDescriptor::by_gguf_name(&arch)?.qk_permute;
    if md.opt_u64(&format!("{arch}.expert_count"))?.unwrap_or(0) > 0 {
        return Err(ModelError::InvalidConfig(format!(
            "converting a mixture-of-experts checkpoint ({arch} with experts) to GGUF is not \
             supported; load the directory itself, or convert it with llama.cpp's converter"
        )));
    }
    let n_layer = md.u64(&format!("{arch}.block_count"))? as usize;
    let n_head = md.u64(&format!("{arch}.attention.head_count"))? as usize;
    let n_head_kv = md
        .opt_u64(&format!("{arch}.attention.head_count_kv"))?
        .map_or(n_head, |v| v as usize);

    let mut w = GgufWriter::new();
    for (k, v) in md.iter().filter(|(k, _)| *k != "general.source") {
        // llama.cpp reads hyperparameters as u32 (as gguf-py writes them) and refuses a
        // u64 ("wrong type u64 but expected type u32").
        let v = match *v {
            kiln_format::Value::U64(n) => u32::try_from(n).map_or(v.clone(), Into::into),
            _ => v.clone(),
        };
        w.add_metadata(k, v)?;
    }
    let mut names: Vec<String> = TOP.iter().map(|s| s.to_string()).collect();
    for il in 0..n_layer {
        names.extend(BLOCK.iter().map(|s| format!("blk.{il}.{s}")));
    }
    for name in names {
        let Some(t) = hf.names.lookup(&name) else {
            continue;
        };
        let Some(view) = t.candidates.iter().find_map(|c| set.tensor(c).ok()) else {
            continue;
        };
        let info = view.info;
        let ty = info
            .dtype
            .ggml_type()
            .ok_or_else(|| ModelError::unsupported_dtype(info.name.clone(), info.dtype.name()))?;
        let elem = ty.block_bytes();
        let mut dims = info.ggml_dims();
        if dims.is_empty() {
            dims.push(1);
        }
        let permute = qk_permute
            && (name.ends_with("attn_q.weight")
                || name.ends_with("attn_q.bias")
                || name.ends_with("attn_k.weight")
                || name.ends_with("attn_k.bias"));
        let (ty, data) = if dims.len() == 1 {
            // Vectors: F32, with Gemma's `1 + w`.
            let mut v = vec![0.0f32; info.n_elements() as usize];
            kiln_quant::dequantize_row(ty, view.data, &mut v)?;
            if t.transform == Transform::AddOne {
                v.iter_mut().for_each(|x| *x += 1.0);
            }
            let mut bytes: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
            if permute {
                let heads = if name.contains("attn_q") {
                    n_head
                } else {
                    n_head_kv
                };
                bytes = permute_rows(&bytes, 4, heads, v.len());
            }
            (GgmlType::F32, bytes)
        } else {
            let (cols, rows) = (dims[0] as usize, dims[1] as usize);
            let mut data = view.data.to_vec();
            if t.transform == Transform::Transpose {
                // Stored [in, out]: `cols` here is `out`.
                data = transpose(&data, elem, rows, cols);
                dims.swap(0, 1);
            }
            if permute {
                let heads = if name.contains("attn_q") {
                    n_head
                } else {
                    n_head_kv
                };
                data = permute_rows(&data, dims[0] as usize * elem, heads, dims[1] as usize);
            }
            (ty, data)
        };
        w.add_tensor(name.as_str(), ty, &dims, data)?;
    }
    for (name, v) in &hf.extra {
        w.add_tensor(
            name.as_str(),
            GgmlType::F32,
            &[v.len() as u64],
            v.iter().flat_map(|x| x.to_le_bytes()).collect(),
        )?;
    }
    Ok(w)
}

/// llama.cpp's Q/K permutation: within each head of `rows / heads` rows, row `i` of the
/// first half goes to `2i` and row `i` of the second half to `2i + 1`, so that rotate-half
/// pairs become adjacent pairs. `row_bytes` is the size of one row.
pub(crate) fn permute_rows(data: &[u8], row_bytes: usize, heads: usize, rows: usize) -> Vec<u8> {
    let per_head = rows / heads;
    let half = per_head / 2;
    let mut out = vec![0u8; data.len()];
    for h in 0..heads {
        for i in 0..half {
            for (j, src) in [(2 * i, i), (2 * i + 1, i + half)] {
                let s = (h * per_head + src) * row_bytes;
                let d = (h * per_head + j) * row_bytes;
                out[d..d + row_bytes].copy_from_slice(&data[s..s + row_bytes]);
            }
        }
    }
    out
}

/// `src` holds `rows` rows of `cols` elements of `elem` bytes; returns the transpose.
fn transpose(src: &[u8], elem: usize, rows: usize, cols: usize) -> Vec<u8> {
    let mut out = vec![0u8; src.len()];
    for r in 0..rows {
        for c in 0..cols {
            let s = (r * cols + c) * elem;
            let d = (c * rows + r) * elem;
            out[d..d + elem].copy_from_slice(&src[s..s + elem]);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn permutation_interleaves_the_halves_of_each_head() {
        // Two heads of four one-byte rows: [a0 a1 a2 a3 | b0 b1 b2 b3].
        let rows: Vec<u8> = (0..8).collect();
        assert_eq!(permute_rows(&rows, 1, 2, 8), [0, 2, 1, 3, 4, 6, 5, 7]);
    }

    #[test]
    fn transpose_swaps_rows_and_columns() {
        // 2×3 of one-byte elements.
        assert_eq!(transpose(&[1, 2, 3, 4, 5, 6], 1, 2, 3), [1, 4, 2, 5, 3, 6]);
    }
}
