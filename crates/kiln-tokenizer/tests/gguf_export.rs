//! tokenizer.json → `tokenizer.ggml.*` metadata (what `kiln quantize` writes for a Hugging
//! Face directory): the exported vocabulary, read back with `Tokenizer::from_gguf`, must
//! encode exactly as the tokenizer.json it came from — on stories260K's SentencePiece-style
//! BPE, and on the byte-level tokenizer.json files made from the SmolLM2 and Qwen2.5 GGUFs,
//! where it must also reproduce the original GGUF's pre-tokenizer name, tokens and merges.

mod common;

use std::path::{Path, PathBuf};

use common::gguf;
use kiln_testkit::hf_tokenizer as gguf_to_hf;
use kiln_tokenizer::{EXPORT_PROBES, Tokenizer, gguf_metadata_from_hf_dir};
use serde_json::json;
use unicode_normalization::UnicodeNormalization;

/// Texts of the tokenizer.json fixtures of `model` plus the export probes.
fn texts(model: &str) -> Vec<String> {
    let path =
        Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("tests/fixtures/hf/{model}.json"));
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    let doc: serde_json::Value = serde_json::from_str(&text).expect("fixture is JSON");
    let mut out: Vec<String> = doc["cases"]
        .as_array()
        .expect("cases")
        .iter()
        .map(|c| c["text"].as_str().expect("text").to_owned())
        .collect();
    out.extend(EXPORT_PROBES.iter().map(|s| s.to_string()));
    assert!(out.len() > 20, "{model}: only {} texts", out.len());
    out
}

fn assert_same_ids(a: &Tokenizer, b: &Tokenizer, texts: &[String], modes: &[bool], what: &str) {
    for t in texts {
        for &parse_special in modes {
            assert_eq!(
                a.encode(t, true, parse_special).unwrap(),
                b.encode(t, true, parse_special).unwrap(),
                "{what}: {t:?} (parse_special {parse_special})"
            );
        }
    }
}

#[test]
fn stories260k_sentencepiece_vocabulary_exports_to_gguf_keys_that_encode_alike() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/hf/stories260K");
    let md = gguf_metadata_from_hf_dir(&dir, None).expect("exports");
    assert_eq!(md.str("tokenizer.ggml.model").unwrap(), "llama");
    assert!(md.bool("tokenizer.ggml.add_space_prefix").unwrap());
    assert!(md.bool("tokenizer.ggml.add_bos_token").unwrap());
    assert_eq!(md.u32("tokenizer.ggml.bos_token_id").unwrap(), 1);
    assert_eq!(md.u32("tokenizer.ggml.eos_token_id").unwrap(), 2);
    assert_eq!(md.u32("tokenizer.ggml.unknown_token_id").unwrap(), 0);
    let types = md.i32_array("tokenizer.ggml.token_type").unwrap();
    assert_eq!(&types[..4], &[2, 3, 3, 6], "unk, bos, eos, <0x00>");
    let hf = Tokenizer::from_hf_dir(&dir).unwrap();
    let back = Tokenizer::from_gguf(&md).unwrap();
    assert_eq!(back.vocab_size(), hf.vocab_size());
    assert_same_ids(
        &hf,
        &back,
        &texts("stories260K"),
        &[false, true],
        "stories260K",
    );
}

/// A directory holding the tokenizer.json and tokenizer_config.json of a cached GGUF model.
fn hf_tokenizer_dir(model: &str, tmp: &Path) -> PathBuf {
    let md = gguf(model).metadata();
    let dir = tmp.join(model);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("tokenizer.json"), gguf_to_hf::tokenizer_json(md)).unwrap();
    let c = gguf_to_hf::config(md);
    let config = json!({
        "bos_token": c.bos_token, "eos_token": c.eos_token,
        "unk_token": c.unk_token, "pad_token": c.pad_token,
        "chat_template": md.opt_str("tokenizer.chat_template").unwrap(),
    });
    std::fs::write(dir.join("tokenizer_config.json"), config.to_string()).unwrap();
    dir
}

fn byte_level_export_reproduces_the_gguf(model: &str, fixture: &str) {
    let tmp = tempfile::tempdir().unwrap();
    let dir = hf_tokenizer_dir(model, tmp.path());
    let orig = gguf(model).metadata();
    let md = gguf_metadata_from_hf_dir(&dir, None).expect("exports");
    assert_eq!(md.str("tokenizer.ggml.model").unwrap(), "gpt2");
    for key in ["tokenizer.ggml.pre", "tokenizer.chat_template"] {
        assert_eq!(
            md.str(key).unwrap(),
            orig.str(key).unwrap(),
            "{model}: {key}"
        );
    }
    for key in ["tokenizer.ggml.tokens", "tokenizer.ggml.merges"] {
        assert_eq!(
            md.str_array(key).unwrap(),
            orig.str_array(key).unwrap(),
            "{model}: {key}"
        );
    }
    let orig_tok = Tokenizer::from_gguf(orig).unwrap();
    let hf = Tokenizer::from_hf_dir(&dir).unwrap();
    let back = Tokenizer::from_gguf(&md).unwrap();
    assert_eq!(back.eos(), orig_tok.eos(), "{model}: eos");
    let texts = texts(fixture);
    // With special parsing the GGUF loaders (llama.cpp's and Kiln's) also match tokens
    // they recognise by text (`</s>` ends generation, so it becomes a control token),
    // which `tokenizers` does not: compare with the tokenizer.json without it …
    // Qwen's tokenizer.json NFC-normalizes, which GGUF cannot say (llama.cpp applies no
    // normalizer): on text already in NFC the two agree.
    let nfc: Vec<String> = texts
        .iter()
        .filter(|t| t.nfc().collect::<String>() == **t)
        .cloned()
        .collect();
    assert!(nfc.len() >= 20, "{model}: only {} NFC texts", nfc.len());
    assert_same_ids(&hf, &back, &nfc, &[false], model);
    // … and with the original GGUF with it (the fixture tokenizer.json marks every added
    // token special, so without special parsing it differs from the GGUF, whose tool
    // tokens are user-defined, by construction).
    assert_same_ids(&orig_tok, &back, &texts, &[true], model);
}

#[test]
fn smollm2_byte_level_export_reproduces_the_original_gguf_vocabulary() {
    byte_level_export_reproduces_the_gguf("smollm2-135m", "smollm2-135m");
}

#[test]
fn qwen25_byte_level_export_reproduces_the_original_gguf_vocabulary() {
    byte_level_export_reproduces_the_gguf("qwen2.5-coder-0.5b", "qwen2.5-coder-0.5b");
}

#[test]
fn export_pads_the_vocabulary_to_the_embedding_rows_with_unused_tokens() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/hf/stories260K");
    let n = Tokenizer::from_hf_dir(&dir).unwrap().vocab_size();
    let md = gguf_metadata_from_hf_dir(&dir, Some(n + 3)).expect("exports");
    let tokens = md.str_array("tokenizer.ggml.tokens").unwrap();
    assert_eq!(tokens.len(), n + 3);
    assert_eq!(tokens[n], format!("[PAD{n}]"));
    assert_eq!(md.i32_array("tokenizer.ggml.token_type").unwrap()[n + 2], 5);
}

#[test]
fn a_directory_without_tokenizer_json_is_refused_naming_the_file() {
    let tmp = tempfile::tempdir().unwrap();
    let err = gguf_metadata_from_hf_dir(tmp.path(), None).unwrap_err();
    assert!(err.to_string().contains("tokenizer.json"), "{err}");
}
