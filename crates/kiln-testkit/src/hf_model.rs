//! A Hugging Face directory made from a GGUF file by dequantizing every tensor to f32 (what
//! the `gguf_to_hf_safetensors.py` conversion script does, written independently in Rust
//! so tests need no Python): GGUF names → transformers names, llama Q/K rows un-permuted back to the
//! rotate-half layout, a `config.json` from the metadata. Made once per model into the
//! kiln cache (`derived/<name>-hf-f32/`) and reused.

use std::path::{Path, PathBuf};

use kiln_format::{Dtype, GgufFile, SafetensorsWriter};
use serde_json::json;

/// The transformers name of a GGUF tensor of a llama / qwen2 model.
fn hf_name(gguf: &str) -> String {
    match gguf {
        "token_embd.weight" => return "model.embed_tokens.weight".into(),
        "output_norm.weight" => return "model.norm.weight".into(),
        "output.weight" => return "lm_head.weight".into(),
        _ => {}
    }
    let rest = gguf.strip_prefix("blk.").expect("a block tensor");
    let (il, rest) = rest.split_once('.').expect("blk.N.name");
    let part = match rest {
        "attn_norm.weight" => "input_layernorm.weight",
        "ffn_norm.weight" => "post_attention_layernorm.weight",
        "attn_q.weight" => "self_attn.q_proj.weight",
        "attn_k.weight" => "self_attn.k_proj.weight",
        "attn_v.weight" => "self_attn.v_proj.weight",
        "attn_q.bias" => "self_attn.q_proj.bias",
        "attn_k.bias" => "self_attn.k_proj.bias",
        "attn_v.bias" => "self_attn.v_proj.bias",
        "attn_output.weight" => "self_attn.o_proj.weight",
        "ffn_gate.weight" => "mlp.gate_proj.weight",
        "ffn_up.weight" => "mlp.up_proj.weight",
        "ffn_down.weight" => "mlp.down_proj.weight",
        other => panic!("no transformers name for {other}"),
    };
    format!("model.layers.{il}.{part}")
}

/// Inverse of llama.cpp's permutation: within each head, row `2i` back to `i` and row
/// `2i + 1` back to `i + half`.
fn unpermute(x: &[f32], cols: usize, heads: usize) -> Vec<f32> {
    let rows = x.len() / cols;
    let per_head = rows / heads;
    let half = per_head / 2;
    let mut out = vec![0.0; x.len()];
    for h in 0..heads {
        for i in 0..half {
            for (src, dst) in [(2 * i, i), (2 * i + 1, i + half)] {
                let s = (h * per_head + src) * cols;
                let d = (h * per_head + dst) * cols;
                out[d..d + cols].copy_from_slice(&x[s..s + cols]);
            }
        }
    }
    out
}

fn write_dir(gguf: &GgufFile, out: &Path) {
    let md = gguf.metadata();
    let arch = md.str("general.architecture").unwrap().to_string();
    assert!(arch == "llama" || arch == "qwen2", "{arch}");
    let key = |k: &str| format!("{arch}.{k}");
    let n_head = md.u64(&key("attention.head_count")).unwrap() as usize;
    let n_kv = md
        .opt_u64(&key("attention.head_count_kv"))
        .unwrap()
        .map_or(n_head, |v| v as usize);
    let n_embd = md.u64(&key("embedding_length")).unwrap() as usize;
    let mut w = SafetensorsWriter::new();
    w.set_metadata("format", "pt");
    let mut vocab = 0;
    for t in gguf.tensors() {
        let n = t.n_elements() as usize;
        let mut x = vec![0.0f32; n];
        kiln_quant::dequantize_row(t.ty, gguf.tensor_data(t), &mut x).unwrap();
        let cols = t.dims[0] as usize;
        if arch == "llama" && t.name.ends_with("attn_q.weight") {
            x = unpermute(&x, cols, n_head);
        } else if arch == "llama" && t.name.ends_with("attn_k.weight") {
            x = unpermute(&x, cols, n_kv);
        }
        if t.name == "token_embd.weight" {
            vocab = t.dims[1];
        }
        let shape: Vec<u64> = t.dims.iter().rev().copied().collect();
        let bytes = x.iter().flat_map(|v| v.to_le_bytes()).collect();
        w.add_tensor(hf_name(&t.name), Dtype::F32, &shape, bytes)
            .unwrap();
    }
    w.write(out.join("model.safetensors")).unwrap();
    let config = json!({
        "architectures": [if arch == "llama" { "LlamaForCausalLM" } else { "Qwen2ForCausalLM" }],
        "model_type": arch,
        "hidden_size": n_embd,
        "intermediate_size": md.u64(&key("feed_forward_length")).unwrap(),
        "num_hidden_layers": md.u64(&key("block_count")).unwrap(),
        "num_attention_heads": n_head,
        "num_key_value_heads": n_kv,
        "head_dim": n_embd / n_head,
        "hidden_act": "silu",
        "max_position_embeddings": md.u64(&key("context_length")).unwrap(),
        "rms_norm_eps": md.f32(&key("attention.layer_norm_rms_epsilon")).unwrap(),
        "rope_theta": md.opt_f32(&key("rope.freq_base")).unwrap().unwrap_or(10000.0),
        "rope_scaling": null,
        "tie_word_embeddings": gguf.tensor_info("output.weight").is_none(),
        "vocab_size": vocab,
        "torch_dtype": "float32",
    });
    std::fs::write(out.join("config.json"), config.to_string()).unwrap();
}

/// The f32 Hugging Face form of a known GGUF model, made on first use.
pub fn dequantized_hf_dir(model: &str) -> PathBuf {
    let gguf_path = crate::model_path(model);
    let root = kiln_hub::cache_dir().join("derived");
    let out = root.join(format!("{model}-hf-f32"));
    if out.join("config.json").is_file() {
        return out;
    }
    std::fs::create_dir_all(&root).unwrap();
    let tmp = root.join(format!("{model}-hf-f32.tmp-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&tmp);
    std::fs::create_dir_all(&tmp).unwrap();
    let gguf = GgufFile::open(&gguf_path).unwrap();
    write_dir(&gguf, &tmp);
    // Another test process may have finished first; either copy is complete.
    if std::fs::rename(&tmp, &out).is_err() {
        let _ = std::fs::remove_dir_all(&tmp);
    }
    out
}

#[cfg(test)]
#[test]
fn unpermute_inverts_the_converter_permutation() {
    // One head of 4 rows of 1 column: GGUF order [r0, r2, r1, r3] → [r0, r1, r2, r3].
    assert_eq!(unpermute(&[0.0, 2.0, 1.0, 3.0], 1, 1), [0.0, 1.0, 2.0, 3.0]);
}
