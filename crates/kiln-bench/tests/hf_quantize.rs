//! `kiln quantize DIR OUT --type T` from Hugging Face checkpoints: the written GGUF must run
//! as the directory does (real weights: stories260K, the f32 SmolLM2 checkpoint made from its
//! GGUF, the tiny per-architecture checkpoints of `testdata/hf-tiny`), carry a tokenizer that
//! encodes as the directory's, and unsupported or incomplete checkpoints must be refused by
//! name.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use kiln_bench::BenchError;
use kiln_bench::convert::convert_hf_dir;
use kiln_format::{GgmlType, GgufFile};
use kiln_model::{Logits, Model, Session};
use kiln_testkit::{hf_model as model_to_hf, hf_tokenizer as tokenizer_to_hf};
use kiln_tokenizer::Tokenizer;

fn testdata(rel: &str) -> PathBuf {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../../testdata")).join(rel)
}

fn argmax(v: &[f32]) -> u32 {
    let mut best = 0;
    for i in 1..v.len() {
        if v[i] > v[best] {
            best = i;
        }
    }
    best as u32
}

/// Greedy continuation of `prompt` by `n` tokens, with the logits of each step.
fn greedy(model: &Arc<Model>, prompt: &[u32], n: usize) -> (Vec<u32>, Vec<Vec<f32>>) {
    let mut s = Session::new(Arc::clone(model), prompt.len() + n, 64);
    let mut logits = s.forward(prompt, Logits::Last).expect("prefill").to_vec();
    let (mut out, mut steps) = (Vec::new(), Vec::new());
    for _ in 0..n {
        let next = argmax(&logits);
        out.push(next);
        steps.push(logits.clone());
        logits = s.forward(&[next], Logits::Last).expect("decode").to_vec();
    }
    (out, steps)
}

/// Logits of every position of `tokens`, one forward pass.
fn logits_all(model: &Arc<Model>, tokens: &[u32]) -> Vec<Vec<f32>> {
    let vocab = model.config().vocab_size;
    let mut s = Session::new(Arc::clone(model), tokens.len(), 64);
    let l = s.forward(tokens, Logits::All).expect("forward");
    l.chunks_exact(vocab).map(<[f32]>::to_vec).collect()
}

fn max_abs_diff(a: &[Vec<f32>], b: &[Vec<f32>]) -> f32 {
    a.iter()
        .zip(b)
        .flat_map(|(x, y)| x.iter().zip(y).map(|(p, q)| (p - q).abs()))
        .fold(0.0, f32::max)
}

const TEXTS: &[&str] = &[
    "Once upon a time, there was a little girl named Lily.",
    "The capital of France is",
    "  two  spaces, digits 12345 and ünïcödé!",
    "line\nbreaks\n\nand\ttabs",
    "<s>special</s> tokens",
];

#[test]
fn stories260k_written_as_f32_gguf_runs_and_tokenizes_as_the_hf_directory() {
    let dir = testdata("hf/stories260K");
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("stories260K-f32.gguf");
    let done = convert_hf_dir(&dir, GgmlType::F32, &out).expect("converts");
    assert!(done.tokenizer);
    assert!(done.plan.iter().all(|t| t.to == GgmlType::F32));

    let file = GgufFile::open(&out).unwrap();
    let md = file.metadata();
    assert_eq!(md.str("general.architecture").unwrap(), "llama");
    assert_eq!(md.u64("llama.block_count").unwrap(), 5);
    assert_eq!(md.u64("llama.attention.head_count_kv").unwrap(), 4);
    assert_eq!(md.u32("general.file_type").unwrap(), 0);
    // llama.cpp refuses hyperparameters stored as u64 ("wrong type u64 but expected u32").
    assert!(matches!(
        md.get("llama.context_length"),
        Some(kiln_format::Value::U32(_))
    ));
    let gguf_tok = Tokenizer::from_gguf(md).unwrap();
    let hf_tok = Tokenizer::from_hf_dir(&dir).unwrap();
    for t in TEXTS {
        for parse_special in [false, true] {
            assert_eq!(
                gguf_tok.encode(t, true, parse_special).unwrap(),
                hf_tok.encode(t, true, parse_special).unwrap(),
                "{t:?}"
            );
        }
    }

    let hf = Arc::new(Model::open(&dir).expect("directory loads"));
    let gguf = Arc::new(Model::open(&out).expect("written GGUF loads"));
    let prompt = hf_tok.encode(TEXTS[0], true, false).unwrap();
    let (a, la) = greedy(&hf, &prompt, 48);
    let (b, lb) = greedy(&gguf, &prompt, 48);
    assert_eq!(
        a, b,
        "greedy tokens differ between the directory and its GGUF"
    );
    // Same f32 weights; the GGUF's permuted Q/K rows with adjacent-pair RoPE sum the
    // attention dot products in another order than rotate-half on the checkpoint's rows,
    // and the f16 KV cache rounds those slightly different values: measured 4.8e-3 over
    // 48 steps (the one-pass tiny llama below: 1.2e-6).
    let worst = max_abs_diff(&la, &lb);
    eprintln!("stories260K dir vs F32 GGUF: 48/48 greedy tokens, max |Δlogit| {worst:e}");
    assert!(worst <= 1e-2, "logits differ by {worst}");
}

/// A copy of the cached f32 SmolLM2 checkpoint (weights linked) with the tokenizer.json and
/// tokenizer_config.json of its GGUF.
fn smollm2_dir(tmp: &Path) -> PathBuf {
    let src = model_to_hf::dequantized_hf_dir("smollm2-135m");
    let dir = tmp.join("smollm2-135m-hf");
    std::fs::create_dir_all(&dir).unwrap();
    for f in ["config.json", "model.safetensors"] {
        std::os::unix::fs::symlink(src.join(f), dir.join(f)).unwrap();
    }
    let path = kiln_hub::resolve("smollm2-135m").expect("smollm2-135m is required");
    let gguf = GgufFile::open(path).unwrap();
    let md = gguf.metadata();
    std::fs::write(
        dir.join("tokenizer.json"),
        tokenizer_to_hf::tokenizer_json(md),
    )
    .unwrap();
    let c = tokenizer_to_hf::config(md);
    let config = serde_json::json!({
        "bos_token": c.bos_token, "eos_token": c.eos_token,
        "unk_token": c.unk_token, "pad_token": c.pad_token,
        "chat_template": md.opt_str("tokenizer.chat_template").unwrap(),
    });
    std::fs::write(dir.join("tokenizer_config.json"), config.to_string()).unwrap();
    dir
}

#[test]
fn smollm2_checkpoint_written_as_q8_0_keeps_the_vocabulary_and_follows_the_checkpoint() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = smollm2_dir(tmp.path());
    let out = tmp.path().join("smollm2-q8_0.gguf");
    let done = convert_hf_dir(&dir, GgmlType::Q8_0, &out).expect("converts");
    assert!(done.tokenizer);
    let q8 = done.plan.iter().filter(|t| t.to == GgmlType::Q8_0).count();
    assert_eq!(
        q8,
        1 + 30 * 7,
        "token_embd and the 7 matrices of each of 30 blocks"
    );

    let file = GgufFile::open(&out).unwrap();
    let md = file.metadata();
    let orig_path = kiln_hub::resolve("smollm2-135m").unwrap();
    let orig = GgufFile::open(&orig_path).unwrap();
    for key in [
        "tokenizer.ggml.model",
        "tokenizer.ggml.pre",
        "tokenizer.chat_template",
    ] {
        assert_eq!(
            md.str(key).unwrap(),
            orig.metadata().str(key).unwrap(),
            "{key}"
        );
    }
    assert_eq!(md.u32("general.file_type").unwrap(), 7);
    let tok = Tokenizer::from_gguf(md).unwrap();
    let orig_tok = Tokenizer::from_gguf(orig.metadata()).unwrap();
    for t in TEXTS {
        assert_eq!(
            tok.encode(t, true, true).unwrap(),
            orig_tok.encode(t, true, true).unwrap(),
            "{t:?}"
        );
    }

    // Teacher-forced on the checkpoint's greedy continuation: the Q8_0 file's argmax must
    // agree at most steps (Q8_0 weights and Q8 activations round what the f32 run keeps).
    let hf = Arc::new(Model::open(&dir).expect("checkpoint loads"));
    let q = Arc::new(Model::open(&out).expect("Q8_0 GGUF loads"));
    let prompt = tok.encode("The capital of France is", true, false).unwrap();
    let (cont, _) = greedy(&hf, &prompt, 32);
    let mut seq = prompt.clone();
    seq.extend(&cont);
    let logits = logits_all(&q, &seq);
    let agree = (0..cont.len())
        .filter(|&i| argmax(&logits[prompt.len() - 1 + i]) == cont[i])
        .count();
    eprintln!(
        "smollm2 checkpoint vs its Q8_0 GGUF: {agree}/{} greedy steps agree ({})",
        cont.len(),
        tok.decode(&cont)
    );
    assert!(
        agree * 10 >= cont.len() * 9,
        "only {agree}/{} agree",
        cont.len()
    );
}

#[test]
fn tiny_llama_qwen2_and_gemma3_checkpoints_written_as_f32_give_the_directory_logits() {
    let tokens: Vec<u32> = vec![1, 5, 9, 2, 7, 3, 11, 4];
    // Every architecture the converter writes (llama, qwen2 and gemma3).
    let archs = kiln_bench::convert::hf_convert_archs();
    assert_eq!(archs, ["llama", "qwen2", "gemma3"]);
    for arch in archs {
        let dir = testdata(&format!("hf-tiny/{arch}"));
        let tmp = tempfile::tempdir().unwrap();
        let out = tmp.path().join("tiny.gguf");
        let done = convert_hf_dir(&dir, GgmlType::F32, &out).expect("converts");
        assert!(
            !done.tokenizer,
            "{arch}: the tiny checkpoints have no tokenizer"
        );
        let hf = Arc::new(Model::open(&dir).unwrap());
        let gguf = Arc::new(Model::open(&out).unwrap());
        let worst = max_abs_diff(&logits_all(&hf, &tokens), &logits_all(&gguf, &tokens));
        eprintln!("hf-tiny/{arch}: dir vs F32 GGUF max |Δlogit| {worst:e}");
        // Only llama's Q/K rows are permuted (summation order changes); qwen2 and gemma3
        // tensors are the checkpoint's bytes (norms + 1 in f32 either way): bit-identical.
        let permuted = kiln_model::ArchDescriptor::by_gguf_name(arch)
            .unwrap()
            .qk_permute;
        let bound = if permuted { 1e-4 } else { 0.0 };
        assert!(worst <= bound, "{arch}: logits differ by {worst}");
    }
}

#[test]
fn architectures_without_a_gguf_writer_are_refused_naming_the_supported_ones() {
    let tmp = tempfile::tempdir().unwrap();
    let err = convert_hf_dir(
        &testdata("hf-tiny/phi3"),
        GgmlType::Q8_0,
        &tmp.path().join("x.gguf"),
    )
    .unwrap_err();
    assert!(
        matches!(&err, BenchError::UnsupportedHfArchitecture { arch, .. } if arch == "phi3"),
        "{err}"
    );
    let msg = err.to_string();
    assert!(
        msg.contains("llama") && msg.contains("qwen2") && msg.contains("gemma3"),
        "{msg}"
    );
    assert!(!tmp.path().join("x.gguf").exists());
}

#[test]
fn a_config_missing_a_required_field_is_refused_naming_the_field() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("broken");
    std::fs::create_dir_all(&dir).unwrap();
    let src = testdata("hf-tiny/qwen2");
    let mut config: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(src.join("config.json")).unwrap()).unwrap();
    config.as_object_mut().unwrap().remove("hidden_size");
    std::fs::write(dir.join("config.json"), config.to_string()).unwrap();
    std::fs::copy(src.join("model.safetensors"), dir.join("model.safetensors")).unwrap();
    let err = convert_hf_dir(&dir, GgmlType::F32, &tmp.path().join("x.gguf")).unwrap_err();
    assert!(err.to_string().contains("hidden_size"), "{err}");
}
