//! Speculative decoding inside the engine: n-gram drafts scored in the step's batched pass
//! change nothing a client sees. Greedy output under 8 concurrent streams equals plain
//! greedy decoding on the three shipped models (and drafts were accepted, so the check is
//! not vacuous); seeded sampling, stop strings and log-probabilities are exactly those of
//! a request that opts out.

mod common;

use std::sync::Arc;

use common::{Outcome, collect, config, encode, greedy, reference};
use kiln_engine::{Engine, Event, Request, SamplerConfig, SpecConfig, SpecMethod};
use kiln_model::Model;
use kiln_tokenizer::Tokenizer;

const MODELS: [&str; 3] = ["smollm2-135m", "qwen2.5-coder-0.5b", "gemma3-270m"];

/// Mixed prompts: some repeat themselves (drafts get accepted), some do not.
const PROMPTS: [&str; 8] = [
    "Repeat exactly: the quick brown fox jumps over the lazy dog. The quick brown fox jumps over the lazy dog. The quick brown fox",
    "def add(a, b):\n    return a + b\n\ndef sub(a, b):\n    return a - b\n\ndef mul(a, b):\n",
    "1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12,",
    "The capital of France is",
    "Once upon a time, in a small village by the sea, there lived",
    "for (int i = 0; i < n; i++) {\n    sum += a[i];\n}\nfor (int i = 0; i < n; i++) {\n",
    "Q: What is two plus two?\nA: Four.\nQ: What is three plus three?\nA: Six.\nQ: What is four plus four?\nA:",
    "<ul>\n  <li>apple</li>\n  <li>banana</li>\n  <li>cherry</li>\n",
];

const MAX_TOKENS: usize = 40;

fn load(name: &str) -> (Arc<Model>, Arc<Tokenizer>) {
    let model = Arc::new(Model::open(kiln_testkit::model_path(name)).expect("model loads"));
    let md = model.gguf().expect("a GGUF model").metadata();
    let tok = Arc::new(Tokenizer::from_gguf(md).expect("tokenizer"));
    (model, tok)
}

/// An engine whose requests speculate unless they opt out.
fn speculating(model: &Arc<Model>, tok: &Arc<Tokenizer>) -> Engine {
    let mut cfg = config(model);
    cfg.spec = Some(SpecConfig::new(SpecMethod::Ngram));
    Engine::start(Arc::clone(model), Arc::clone(tok), cfg).expect("engine starts")
}

/// Submits every request at once and collects their outcomes, in order.
fn run_all(engine: &Engine, requests: Vec<Request>) -> Vec<Outcome> {
    let handles: Vec<_> = requests
        .into_iter()
        .map(|r| engine.submit(r).expect("submitted"))
        .collect();
    handles.iter().map(collect).collect()
}

#[test]
fn greedy_output_with_ngram_drafts_equals_plain_greedy_under_8_concurrent_streams() {
    for name in MODELS {
        let (model, tok) = load(name);
        let engine = speculating(&model, &tok);
        let prompts: Vec<Vec<u32>> = PROMPTS.iter().map(|p| encode(&tok, p)).collect();
        let out = run_all(
            &engine,
            prompts
                .iter()
                .map(|p| greedy(p.clone(), MAX_TOKENS, false))
                .collect(),
        );
        for (i, (p, o)) in prompts.iter().zip(&out).enumerate() {
            let want = reference(&model, &tok, p, MAX_TOKENS, false);
            assert_eq!(o.ids, want, "{name}: prompt {i} differs from plain greedy");
            assert_eq!(o.usage.completion_tokens, want.len());
        }
        let m = engine.metrics();
        eprintln!("{name}: {:?}", m.spec);
        assert!(m.spec.draft_steps > 0, "{name}: nothing was drafted");
        assert!(m.spec.accepted > 0, "{name}: no draft was accepted");
        assert!(m.spec.accepted <= m.spec.drafted);
        assert_eq!(m.kv_blocks_used, 0, "{name}: blocks leaked");
    }
}

/// The same requests twice in one engine, speculating and opted out, all concurrent.
fn with_and_without(engine: &Engine, make: impl Fn() -> Request) -> (Outcome, Outcome) {
    let mut on = make();
    on.speculate = Some(true);
    let mut off = make();
    off.speculate = Some(false);
    let mut out = run_all(engine, vec![on, off]);
    let off = out.pop().expect("two outcomes");
    let on = out.pop().expect("two outcomes");
    (on, off)
}

#[test]
fn seeded_sampling_stop_strings_and_logprobs_are_those_of_a_request_that_opts_out() {
    let (model, tok) = load("smollm2-135m");
    let engine = speculating(&model, &tok);
    let fox = encode(&tok, PROMPTS[0]);
    // Seeded sampling: the same tokens, drafted or not.
    for seed in [1, 7, 42] {
        let (on, off) = with_and_without(&engine, || {
            let mut r = greedy(fox.clone(), MAX_TOKENS, true);
            r.sampling = SamplerConfig {
                temperature: 0.8,
                top_k: 20,
                seed,
                ..SamplerConfig::greedy()
            };
            r
        });
        assert_eq!(on.ids, off.ids, "seed {seed}");
        assert_eq!(on.text, off.text, "seed {seed}");
    }
    // A stop string inside a run of accepted drafts cuts the output there.
    let (on, off) = with_and_without(&engine, || {
        let mut r = greedy(fox.clone(), MAX_TOKENS, true);
        r.stop = vec!["lazy".to_string()];
        r
    });
    assert_eq!(
        (&on.ids, &on.text, on.finish),
        (&off.ids, &off.text, off.finish)
    );
    // Log-probabilities come from each token's own position.
    let logprobs = |speculate: bool| {
        let mut r = greedy(fox.clone(), MAX_TOKENS, true);
        r.logprobs = Some(3);
        r.speculate = Some(speculate);
        let h = engine.submit(r).expect("submitted");
        let mut got = Vec::new();
        while let Some(ev) = h.recv() {
            match ev {
                Event::Token { logprob, top, .. } => got.push((logprob, top)),
                Event::Done { .. } => break,
                Event::Error(e) => panic!("{e}"),
            }
        }
        got
    };
    let (a, b) = (logprobs(true), logprobs(false));
    assert_eq!(a.len(), MAX_TOKENS);
    assert_eq!(a, b);
    let m = engine.metrics();
    assert!(m.spec.accepted > 0, "no draft was accepted: {:?}", m.spec);
    assert_eq!(m.kv_blocks_used, 0);
}
