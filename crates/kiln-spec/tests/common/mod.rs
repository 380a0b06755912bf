//! What the speculative-decoding tests share: real models, prompts, plain and speculative
//! greedy generation.

#![allow(dead_code)]

use std::sync::Arc;

use kiln_model::{Logits, Model, Session};
use kiln_sample::{Sampler, SamplerConfig, Vocab};
use kiln_spec::SpecDecoder;
use kiln_tokenizer::Tokenizer;

pub const MODELS: [&str; 3] = ["smollm2-135m", "qwen2.5-coder-0.5b", "gemma3-270m"];

/// Eight prompts: some repeat themselves (so n-gram drafts are found and accepted), some
/// do not (so drafts are rejected or absent).
pub const PROMPTS: [&str; 8] = [
    "Repeat exactly: the quick brown fox jumps over the lazy dog. The quick brown fox jumps over the lazy dog. The quick brown fox",
    "def add(a, b):\n    return a + b\n\ndef sub(a, b):\n    return a - b\n\ndef mul(a, b):\n",
    "1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12,",
    "The capital of France is",
    "Once upon a time, in a small village by the sea, there lived",
    "for (int i = 0; i < n; i++) {\n    sum += a[i];\n}\nfor (int i = 0; i < n; i++) {\n",
    "Q: What is two plus two?\nA: Four.\nQ: What is three plus three?\nA: Six.\nQ: What is four plus four?\nA:",
    "<ul>\n  <li>apple</li>\n  <li>banana</li>\n  <li>cherry</li>\n",
];

pub struct Loaded {
    pub model: Arc<Model>,
    pub tokenizer: Tokenizer,
    pub vocab: Arc<Vocab>,
}

pub fn load(name: &str) -> Loaded {
    let model = Arc::new(Model::open(kiln_testkit::model_path(name)).expect("model loads"));
    let tokenizer =
        Tokenizer::from_gguf(model.gguf().expect("a GGUF model").metadata()).expect("tokenizer");
    let vocab = kiln_engine::sampler_vocab(&tokenizer);
    Loaded {
        model,
        tokenizer,
        vocab,
    }
}

pub fn prompt(l: &Loaded, text: &str) -> Vec<u32> {
    l.tokenizer.encode(text, true, false).expect("encodes")
}

pub fn greedy() -> SamplerConfig {
    SamplerConfig {
        temperature: 0.0,
        ..SamplerConfig::default()
    }
}

/// Plain decoding: one token per pass.
pub fn plain(l: &Loaded, prompt: &[u32], n: usize, cfg: &SamplerConfig) -> Vec<u32> {
    let mut s = Session::new(Arc::clone(&l.model), prompt.len() + n + 1, 512);
    let mut sampler = Sampler::with_vocab(cfg.clone(), Arc::clone(&l.vocab));
    prompt.iter().for_each(|&t| sampler.accept(t));
    let mut out = Vec::with_capacity(n);
    let mut logits = s.forward(prompt, Logits::Last).expect("prompt");
    loop {
        let id = sampler.try_sample(logits).expect("sample");
        sampler.accept(id);
        out.push(id);
        if out.len() == n || l.tokenizer.is_eog(id) {
            return out;
        }
        logits = s.forward(&[id], Logits::Last).expect("decode");
    }
}

/// Speculative decoding with `spec`: as many tokens per pass as the target accepts.
pub fn speculative(
    l: &Loaded,
    prompt: &[u32],
    n: usize,
    cfg: &SamplerConfig,
    spec: &mut SpecDecoder,
) -> Vec<u32> {
    let mut s = Session::new(Arc::clone(&l.model), prompt.len() + n + 1, 512);
    let mut sampler = Sampler::with_vocab(cfg.clone(), Arc::clone(&l.vocab));
    prompt.iter().for_each(|&t| sampler.accept(t));
    let logits = s.forward(prompt, Logits::Last).expect("prompt");
    let first = sampler.try_sample(logits).expect("sample");
    sampler.accept(first);
    let mut history = prompt.to_vec();
    history.push(first);
    let mut step = Vec::new();
    let ends = |id: u32| l.tokenizer.is_eog(id);
    while history.len() - prompt.len() < n && !ends(*history.last().unwrap()) {
        let limit = n - (history.len() - prompt.len());
        spec.step(&mut s, &mut sampler, &history, limit, &ends, &mut step)
            .expect("step");
        assert!(!step.is_empty() && step.len() <= limit);
        history.extend_from_slice(&step);
        assert_eq!(
            s.pos(),
            history.len() - 1,
            "the session holds all but the last token"
        );
    }
    history.split_off(prompt.len())
}
