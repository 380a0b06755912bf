//! The engine on a real model (SmolLM2): greedy tokens equal the single-session path
//! alone, with 8 requests at once, after a prefix hit and under preemption; prefix reuse is
//! counted once per request; cancellation frees the KV blocks; refusals are typed.

mod common;

use std::sync::Arc;

use common::{collect, config, encode, greedy, load, reference, wait_for};
use kiln_engine::{Engine, EngineError, Event, FinishReason};
use kiln_model::Model;
use kiln_tokenizer::Tokenizer;

const PROMPTS: [&str; 8] = [
    "The capital of France is",
    "Once upon a time, in a small village by the sea, there lived",
    "def fibonacci(n):",
    "The three primary colors are",
    "Water boils at",
    "A haiku about autumn leaves:",
    "To make a cup of tea, first",
    "The largest planet in the solar system is",
];

#[test]
fn greedy_tokens_equal_the_single_session_path_alone_and_with_eight_at_once() {
    let (model, tok) = load();
    let engine =
        Engine::start(Arc::clone(&model), Arc::clone(&tok), config(&model)).expect("engine");
    let prompts: Vec<Vec<u32>> = PROMPTS.iter().map(|p| encode(&tok, p)).collect();
    let max = 12;
    let expected: Vec<Vec<u32>> = prompts
        .iter()
        .map(|p| reference(&model, &tok, p, max, false))
        .collect();

    let alone = collect(
        &engine
            .submit(greedy(prompts[1].clone(), max, false))
            .expect("submit"),
    );
    assert_eq!(alone.ids, expected[1], "alone");
    assert_eq!(alone.usage.completion_tokens, alone.ids.len());
    assert_eq!(alone.usage.prompt_tokens, prompts[1].len());

    let handles: Vec<_> = prompts
        .iter()
        .map(|p| {
            engine
                .submit(greedy(p.clone(), max, false))
                .expect("submit")
        })
        .collect();
    for (i, h) in handles.iter().enumerate() {
        let out = collect(h);
        assert_eq!(out.ids, expected[i], "request {i} among 8");
        let want = if out.ids.len() == max && !tok.is_eog(out.ids[max - 1]) {
            FinishReason::Length
        } else {
            FinishReason::Stop
        };
        assert_eq!(out.finish, want, "request {i}");
    }
    let m = engine.metrics();
    assert_eq!(m.requests_finished, 9);
    assert!(
        m.steps < 9 * max as u64,
        "requests shared steps ({} steps for 9 requests of up to {max} tokens)",
        m.steps
    );
    assert!(wait_for(&engine, |m| m.kv_blocks_used == 0 && m.running == 0));
}

#[test]
fn a_repeated_prompt_hits_the_prefix_cache_and_yields_the_same_tokens() {
    let (model, tok) = load();
    let engine =
        Engine::start(Arc::clone(&model), Arc::clone(&tok), config(&model)).expect("engine");
    let prompt = encode(
        &tok,
        "You are a helpful assistant. Answer briefly and precisely, in one sentence, \
         without lists, and say so when you do not know. \
         Question: which gas do plants absorb from the air, and which one do they release \
         into it during the day?",
    );
    assert!(prompt.len() > 32, "the prompt spans whole KV blocks");
    let first = collect(
        &engine
            .submit(greedy(prompt.clone(), 10, false))
            .expect("submit"),
    );
    assert_eq!(first.usage.cached_tokens, 0);
    let second = collect(
        &engine
            .submit(greedy(prompt.clone(), 10, false))
            .expect("submit"),
    );
    let m = engine.metrics();
    assert_eq!(m.prefix_hits, 1, "the second request hit the prefix cache");
    assert!(second.usage.cached_tokens >= 16);
    assert_eq!(m.prefix_tokens_saved, second.usage.cached_tokens as u64);
    assert_eq!(second.ids, first.ids);
    assert_eq!(first.ids, reference(&model, &tok, &prompt, 10, false));
}

#[test]
fn cancelling_or_dropping_a_request_frees_its_kv_blocks() {
    let (model, tok) = load();
    let engine =
        Engine::start(Arc::clone(&model), Arc::clone(&tok), config(&model)).expect("engine");
    let prompt = encode(&tok, PROMPTS[1]);

    let h = engine
        .submit(greedy(prompt.clone(), 200, true))
        .expect("submit");
    assert!(matches!(h.recv(), Some(Event::Token { .. })));
    assert!(
        wait_for(&engine, |m| m.kv_blocks_used > 0),
        "the running request holds blocks"
    );
    h.cancel();
    let mut finish = None;
    while let Some(ev) = h.recv() {
        if let Event::Done { finish: f, .. } = ev {
            finish = Some(f);
        }
    }
    assert_eq!(finish, Some(FinishReason::Cancelled));
    assert!(
        wait_for(&engine, |m| m.kv_blocks_used == 0),
        "blocks freed after cancel()"
    );

    let h = engine.submit(greedy(prompt, 200, true)).expect("submit");
    assert!(matches!(h.recv(), Some(Event::Token { .. })));
    // Token events go out during a step, the metrics snapshot at its end: wait for the
    // snapshot that shows this request running before dropping it.
    assert!(
        wait_for(&engine, |m| m.kv_blocks_used > 0 && m.running == 1),
        "the second request holds blocks"
    );
    drop(h);
    assert!(
        wait_for(&engine, |m| m.kv_blocks_used == 0 && m.running == 0),
        "blocks freed after drop"
    );
    assert_eq!(engine.metrics().requests_cancelled, 2);
}

#[test]
fn a_full_queue_and_a_too_long_prompt_are_refused() {
    let (model, tok) = load();
    let mut cfg = config(&model);
    cfg.max_running = 1;
    cfg.max_queue = 1;
    let engine = Engine::start(Arc::clone(&model), Arc::clone(&tok), cfg).expect("engine");
    let prompt = encode(&tok, PROMPTS[0]);

    assert_eq!(
        engine.submit(greedy(prompt.clone(), 256, false)).err(),
        Some(EngineError::PromptTooLong {
            prompt_tokens: prompt.len(),
            max_tokens: 256,
            n_ctx: 256
        })
    );
    assert_eq!(
        engine.submit(greedy(Vec::new(), 4, false)).err(),
        Some(EngineError::EmptyPrompt)
    );

    let running = engine
        .submit(greedy(prompt.clone(), 200, true))
        .expect("first");
    assert!(matches!(running.recv(), Some(Event::Token { .. })));
    let waiting = engine
        .submit(greedy(prompt.clone(), 4, false))
        .expect("second waits");
    assert_eq!(
        engine.submit(greedy(prompt.clone(), 4, false)).err(),
        Some(EngineError::QueueFull {
            waiting: 1,
            max_queue: 1
        })
    );
    running.cancel();
    let out = collect(&waiting);
    assert_eq!(out.ids, reference(&model, &tok, &prompt, 4, false));
    engine.shutdown(true);
    assert_eq!(
        engine.submit(greedy(prompt, 4, false)).err(),
        Some(EngineError::ShuttingDown)
    );
}

/// An engine with a 64-token context and seven 16-token KV blocks: one 64-token sequence
/// fits, four at once do not.
fn tiny_budget_engine(model: &Arc<Model>, tok: &Arc<Tokenizer>) -> Engine {
    let mut cfg = config(model);
    cfg.n_ctx = 64;
    let block = cfg.kv.config(model.config(), 1).block_bytes();
    cfg.kv.memory = Some(7 * block);
    Engine::start(Arc::clone(model), Arc::clone(tok), cfg).expect("engine")
}

#[test]
fn preemption_under_a_tiny_kv_budget_still_yields_the_same_tokens() {
    let (model, tok) = load();
    let engine = tiny_budget_engine(&model, &tok);
    let prompts: Vec<Vec<u32>> = PROMPTS[..4].iter().map(|p| encode(&tok, p)).collect();
    let max = 40;
    let handles: Vec<_> = prompts
        .iter()
        .map(|p| engine.submit(greedy(p.clone(), max, true)).expect("submit"))
        .collect();
    for (i, h) in handles.iter().enumerate() {
        let out = collect(h);
        assert_eq!(out.ids.len(), max);
        assert_eq!(
            out.ids,
            reference(&model, &tok, &prompts[i], max, true),
            "request {i}"
        );
    }
    let m = engine.metrics();
    assert!(m.preemptions > 0, "the budget forced preemption");
    assert!(wait_for(&engine, |m| m.kv_blocks_used == 0));
}

#[test]
fn prefix_reuse_is_counted_once_per_request_and_a_preempted_requests_relookup_apart() {
    let (model, tok) = load();
    // Four requests of up to 64 tokens each cannot run at once, so some are preempted and
    // admitted (and looked up) again.
    let engine = tiny_budget_engine(&model, &tok);
    // A shared head of more than one block, so later requests can reuse the first's.
    let head = "You are a helpful assistant. Answer briefly and precisely, in one sentence.";
    let prompts: Vec<Vec<u32>> = PROMPTS[..4]
        .iter()
        .map(|p| encode(&tok, &format!("{head} {p}")))
        .collect();
    let longest = prompts.iter().map(Vec::len).max().unwrap_or(0);
    assert!(prompts.iter().all(|p| p.len() > 16), "{prompts:?}");
    // Each request fills its context: four blocks each, sixteen in all.
    let max = 64 - longest;
    assert!(max >= 24, "the prompts leave room to generate: {prompts:?}");
    let handles: Vec<_> = prompts
        .iter()
        .map(|p| engine.submit(greedy(p.clone(), max, true)).expect("submit"))
        .collect();
    let outs: Vec<_> = handles.iter().map(collect).collect();
    let m = engine.metrics();
    assert!(m.preemptions > 0, "the budget forced preemption");
    assert_eq!(m.prefix_queries, 4, "one lookup per request: {m:?}");
    let prompt_tokens: usize = prompts.iter().map(Vec::len).sum();
    assert_eq!(m.prefix_query_tokens, prompt_tokens as u64, "{m:?}");
    let cached: usize = outs.iter().map(|o| o.usage.cached_tokens).sum();
    assert_eq!(
        m.prefix_tokens_saved, cached as u64,
        "reuse is each request's cached prompt tokens, once: {m:?}"
    );
    assert!(m.prefix_tokens_saved > 0, "later requests reused the head");
    assert_eq!(
        m.prefix_hits + m.prefix_miss_short + m.prefix_miss_evicted + m.prefix_miss_never_seen,
        4,
        "{m:?}"
    );
    // Every preemption is followed by one re-admission, counted apart; it looks up the
    // prompt and the tokens generated before the preemption.
    assert_eq!(m.prefix_preempted_queries, m.preemptions, "{m:?}");
    assert!(m.prefix_preempted_query_tokens > m.prefix_preempted_queries * 16);
    assert!(m.prefix_preempted_tokens_saved <= m.prefix_preempted_query_tokens);
}

#[test]
fn a_stop_string_ends_the_text_just_before_it() {
    let (model, tok) = load();
    let engine =
        Engine::start(Arc::clone(&model), Arc::clone(&tok), config(&model)).expect("engine");
    let prompt = encode(&tok, PROMPTS[1]);
    let free = collect(
        &engine
            .submit(greedy(prompt.clone(), 24, true))
            .expect("submit"),
    );
    assert_eq!(free.finish, FinishReason::Length);
    let chars: Vec<char> = free.text.chars().collect();
    assert!(chars.len() > 12, "generated some text: {:?}", free.text);
    let stop: String = chars[chars.len() / 2..chars.len() / 2 + 3].iter().collect();
    let cut = free
        .text
        .find(&stop)
        .expect("the stop string is in the text");

    let mut req = greedy(prompt, 24, true);
    req.stop = vec![stop.clone()];
    let stopped = collect(&engine.submit(req).expect("submit"));
    assert_eq!(stopped.finish, FinishReason::Stop);
    assert_eq!(stopped.text, free.text[..cut], "text before {stop:?}");
    assert_eq!(stopped.ids[..], free.ids[..stopped.ids.len()]);
}
