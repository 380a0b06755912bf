//! `kiln quantize`'s conversion (`kiln_bench::convert::quantize_model`) on the real SmolLM2:
//! the written GGUF keeps metadata and tokenizer, holds the target type where rows fit
//! (llama-quantize's fallbacks elsewhere, F32 vectors), and loads and predicts like the
//! source. Release mode.

use std::sync::Arc;

use kiln_bench::convert::quantize_model;
use kiln_format::{GgmlType, GgufFile};
use kiln_model::{Logits, Model, Session};
use kiln_tokenizer::Tokenizer;

fn argmax(v: &[f32]) -> usize {
    let mut best = 0;
    for (i, x) in v.iter().enumerate() {
        if *x > v[best] {
            best = i;
        }
    }
    best
}

fn next_token(file: Arc<GgufFile>, prompt: &str) -> usize {
    let tok = Tokenizer::from_gguf(file.metadata()).expect("tokenizer from the written file");
    let ids = tok.encode(prompt, true, false).expect("tokenizes");
    let model = Arc::new(Model::from_gguf(file).expect("the written file loads"));
    let mut s = Session::new(model, ids.len() + 1, 64);
    argmax(s.forward(&ids, Logits::Last).expect("forward"))
}

#[test]
fn a_q4_k_copy_of_smollm2_keeps_metadata_and_predicts_paris() {
    let path = kiln_hub::resolve("smollm2-135m")
        .unwrap_or_else(|e| panic!("smollm2-135m is missing ({e}); run `cargo xtask models`"));
    let src = Arc::new(GgufFile::open(&path).expect("the cached model opens"));
    let dir = tempfile::tempdir().expect("temp dir");
    let out = dir.path().join("smollm2-q4_k.gguf");
    let (plan, bytes) = quantize_model(&src, GgmlType::Q4_K, &out).expect("quantizes");
    assert!(bytes > 0);
    assert_eq!(plan.len(), src.tensors().len());

    let written = Arc::new(GgufFile::open(&out).expect("the written file opens"));
    assert_eq!(
        written
            .metadata()
            .opt_u32("general.file_type")
            .ok()
            .flatten(),
        Some(15)
    );
    assert_eq!(
        written
            .metadata()
            .opt_str("tokenizer.ggml.model")
            .ok()
            .flatten(),
        src.metadata()
            .opt_str("tokenizer.ggml.model")
            .ok()
            .flatten()
    );
    for info in written.tensors() {
        // As llama-quantize: the tied head (token_embd) is Q6_K, Q8_0 when its 576-wide
        // rows do not fit; other 576-wide rows fall back from Q4_K to Q5_0.
        let want = if info.dims.len() == 1 {
            GgmlType::F32
        } else if info.name == "token_embd.weight" {
            GgmlType::Q8_0
        } else if info.dims[0] % 256 == 0 {
            GgmlType::Q4_K
        } else {
            GgmlType::Q5_0
        };
        assert_eq!(info.ty, want, "{}", info.name);
    }
    // SmolLM2's FFN down projection has 1536-wide rows: those are the Q4_K ones.
    assert_eq!(
        written.tensor_info("blk.0.ffn_down.weight").map(|t| t.ty),
        Some(GgmlType::Q4_K)
    );

    let prompt = "The capital of France is";
    let want = next_token(Arc::clone(&src), prompt);
    assert_eq!(next_token(written, prompt), want, "same greedy next token");
}
