//! The tokenizer files that `gguf_to_hf_safetensors.py` (a conversion script kept outside
//! the repository) writes for a byte-level BPE GGUF, rebuilt here from the same metadata
//! (the real files are 2–7 MB, so tests make them rather than commit them). The fixtures' ids come from Hugging Face
//! `tokenizers` on the script's own output, so any drift between the two shows up as a
//! fixture mismatch.

use kiln_format::Metadata;
use kiln_tokenizer::HfTokenizerConfig;
use serde_json::{Value, json};

/// `tokenizer.ggml.pre` → the script's `pre_tokenizer` object.
fn pre_tokenizer(pre: &str) -> Value {
    match pre {
        "smollm" => json!({"type": "Sequence", "pretokenizers": [
            {"type": "Digits", "individual_digits": true},
            {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": true}]}),
        "qwen2" => json!({"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"},
             "behavior": "Isolated", "invert": false},
            {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": false, "use_regex": false}]}),
        other => panic!("the script has no pre-tokenizer for {other}"),
    }
}

/// The script's `tokenizer.json`, as bytes.
pub fn tokenizer_json(md: &Metadata) -> Vec<u8> {
    let tokens = md.str_array("tokenizer.ggml.tokens").expect("tokens");
    let types = md
        .opt_i32_array("tokenizer.ggml.token_type")
        .expect("token types")
        .expect("token types present");
    let merges = md.str_array("tokenizer.ggml.merges").expect("merges");
    let pre = md.str("tokenizer.ggml.pre").expect("pre");
    let mut vocab = serde_json::Map::new();
    for (i, t) in tokens.iter().enumerate() {
        vocab.insert(t.clone(), json!(i));
    }
    let added: Vec<Value> = tokens
        .iter()
        .zip(types)
        .enumerate()
        .filter(|&(_, (t, &ty))| (ty == 3 || ty == 4) && !t.starts_with("[PAD"))
        .map(|(i, (t, _))| {
            json!({"id": i, "content": t, "single_word": false, "lstrip": false,
                   "rstrip": false, "normalized": false, "special": true})
        })
        .collect();
    let merges: Vec<Value> = merges
        .iter()
        .map(|m| {
            let (a, b) = m.split_once(' ').expect("a merge has a space");
            json!([a, b])
        })
        .collect();
    let doc = json!({
        "version": "1.0", "truncation": null, "padding": null, "added_tokens": added,
        "normalizer": if pre == "qwen2" { json!({"type": "NFC"}) } else { Value::Null },
        "pre_tokenizer": pre_tokenizer(pre),
        "post_processor": {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": false, "use_regex": false},
        "decoder": {"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": true, "use_regex": true},
        "model": {"type": "BPE", "dropout": null, "unk_token": null, "continuing_subword_prefix": null,
                  "end_of_word_suffix": null, "fuse_unk": false, "byte_fallback": false,
                  "ignore_merges": false, "vocab": vocab, "merges": merges},
    });
    serde_json::to_vec(&doc).expect("serializable")
}

/// The special tokens of the script's `tokenizer_config.json` and `generation_config.json`.
pub fn config(md: &Metadata) -> HfTokenizerConfig {
    let tokens = md.str_array("tokenizer.ggml.tokens").expect("tokens");
    let id = |k: &str| md.opt_u32(k).expect("an id");
    let text = |i: Option<u32>| i.map(|i| tokens[i as usize].clone());
    let arch = md.str("general.architecture").expect("arch");
    let bos = id("tokenizer.ggml.bos_token_id");
    let add_bos = md
        .opt_bool("tokenizer.ggml.add_bos_token")
        .expect("bool")
        .unwrap_or(false);
    let eos = id("tokenizer.ggml.eos_token_id");
    HfTokenizerConfig {
        bos_token: if add_bos || arch == "llama" {
            text(bos)
        } else {
            None
        },
        eos_token: text(eos),
        unk_token: text(id("tokenizer.ggml.unknown_token_id")),
        pad_token: text(id("tokenizer.ggml.padding_token_id")),
        eos_token_ids: eos.into_iter().collect(),
    }
}
