//! Shared helpers: the model, its tokenizer, the single-session reference path and a
//! request runner.

#![allow(dead_code)]

use std::sync::Arc;

use kiln_engine::{Engine, EngineConfig, Event, FinishReason, Request, Usage};
use kiln_model::{Logits, Model, Session};
use kiln_tokenizer::Tokenizer;

pub fn load() -> (Arc<Model>, Arc<Tokenizer>) {
    let path = kiln_testkit::model_path("smollm2-135m");
    let model = Arc::new(Model::open(path).expect("model loads"));
    let md = model.gguf().expect("a GGUF model").metadata();
    let tok = Arc::new(Tokenizer::from_gguf(md).expect("tokenizer"));
    (model, tok)
}

/// Engine settings for tests: a 256-token context, 32 MiB of KV, two threads.
pub fn config(model: &Model) -> EngineConfig {
    let mut cfg = EngineConfig::for_model(model);
    cfg.n_ctx = 256;
    cfg.kv.memory = Some(32 << 20);
    cfg.threads = 2;
    cfg
}

pub fn encode(tok: &Tokenizer, text: &str) -> Vec<u32> {
    tok.encode(text, true, false).expect("encodes")
}

/// Greedy decoding alone through `Session::forward`, as `kiln generate` does: the
/// generated ids, ending with the end-of-generation token if one came first.
pub fn reference(
    model: &Arc<Model>,
    tok: &Tokenizer,
    prompt: &[u32],
    max_tokens: usize,
    ignore_eos: bool,
) -> Vec<u32> {
    let mut s = Session::new(Arc::clone(model), prompt.len() + max_tokens, 512);
    let mut logits = s.forward(prompt, Logits::Last).expect("prompt").to_vec();
    let mut out = Vec::new();
    loop {
        let id = kiln_sample::argmax(&logits);
        out.push(id);
        if out.len() == max_tokens || (!ignore_eos && tok.is_eog(id)) {
            return out;
        }
        logits = s.forward(&[id], Logits::Last).expect("decode").to_vec();
    }
}

/// What a request produced.
pub struct Outcome {
    pub ids: Vec<u32>,
    pub text: String,
    pub finish: FinishReason,
    pub usage: Usage,
}

/// Reads a request's events to the end.
pub fn collect(h: &kiln_engine::RequestHandle) -> Outcome {
    let (mut ids, mut text) = (Vec::new(), String::new());
    loop {
        match h.recv() {
            Some(Event::Token { id, text: t, .. }) => {
                ids.push(id);
                text.push_str(&t);
            }
            Some(Event::Done { finish, usage, .. }) => {
                assert!(h.recv().is_none(), "nothing follows Done");
                return Outcome {
                    ids,
                    text,
                    finish,
                    usage,
                };
            }
            Some(Event::Error(e)) => panic!("request failed: {e}"),
            None => panic!("the stream ended without Done"),
        }
    }
}

pub fn greedy(prompt: Vec<u32>, max_tokens: usize, ignore_eos: bool) -> Request {
    let mut r = Request::greedy(prompt, max_tokens);
    r.ignore_eos = ignore_eos;
    r
}

/// Waits (up to 10 s) until `f(metrics)` holds.
pub fn wait_for(engine: &Engine, f: impl Fn(&kiln_engine::EngineMetrics) -> bool) -> bool {
    let t0 = std::time::Instant::now();
    while t0.elapsed().as_secs() < 10 {
        if f(&engine.metrics()) {
            return true;
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    false
}
