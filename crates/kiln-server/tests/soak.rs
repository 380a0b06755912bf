//! A short soak of the server in-process on 127.0.0.1 with SmolLM2-135M: 64 streaming
//! clients (greedy streams checked against lone references, streams dropped mid-way) plus
//! 16 clients of the whole mix (non-streaming, bursts of choices, malformed JSON, requests
//! over every limit, a short queue that overflows) for ~12 s. Nothing may be lost, no
//! answer may differ from its lone reference, every refusal must name the right limit, and
//! the KV blocks, running and waiting counts return to 0. The long run with RSS figures is
//! `cargo xtask bench soak`; both use the same load generator (`kiln_testkit::soak`).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use kiln_engine::{Engine, EngineConfig};
use kiln_server::{AppState, Backend, ServerConfig};
use kiln_testkit::server::Loaded;
use kiln_testkit::soak::{self, Limits, Plan};

const LIMITS: Limits = Limits {
    n_ctx: 256,
    max_n: 4,
    max_body_bytes: 16 << 10,
    max_prompt_tokens: 128,
};

fn start() -> SocketAddr {
    let Loaded {
        model,
        tokenizer: tok,
        template,
    } = kiln_testkit::server::load("smollm2-135m");
    let mut cfg = EngineConfig::for_model(&model);
    cfg.n_ctx = LIMITS.n_ctx;
    cfg.threads = 2;
    cfg.max_running = 64;
    cfg.max_queue = 16;
    let shape = cfg.kv.config(model.config(), 0);
    // Room for 64 sequences of 96 tokens (prompt + completion) and a block of headroom
    // each: admission is bounded by max_running, not by the pool.
    cfg.kv.memory = Some((shape.blocks_for_tokens(96) + 1) * 64 * shape.block_bytes());
    let engine = Engine::start(model, Arc::clone(&tok), cfg).expect("engine");
    let state = AppState::ready(
        ServerConfig {
            max_n: LIMITS.max_n,
            max_body_bytes: LIMITS.max_body_bytes,
            max_prompt_tokens: Some(LIMITS.max_prompt_tokens),
            ..ServerConfig::default()
        },
        Backend {
            engine,
            tokenizer: tok,
            template: Some(template),
            model_id: "smollm2-135m".into(),
            aliases: Vec::new(),
        },
    );
    kiln_testkit::server::serve(state)
}

#[test]
fn sixty_four_streams_with_disconnects_malformed_and_over_limit_requests_lose_nothing() {
    let addr = start();
    let base = format!("http://{addr}");
    let refs = soak::references(&base).expect("lone references");
    let plan = Plan {
        base: base.clone(),
        clients: 64,
        mixed_clients: 16,
        duration: Duration::from_secs(12),
        seed: 42,
        limits: LIMITS,
        pid: None,
    };
    let t = soak::run(&plan, &refs);
    eprintln!("{}", serde_json::to_string_pretty(&t).unwrap());
    assert_eq!(t.lost, 0, "lost requests: {:#?}", t.failures);
    assert!(t.clean(), "failures: {:#?}", t.failures);
    assert!(t.peak_open_streams >= 64, "{t:?}");
    assert!(
        t.checked_against_reference > 0 && t.completed_streams > 0,
        "{t:?}"
    );
    assert!(t.disconnected_by_client > 0, "{t:?}");
    for limit in [
        "malformed_json",
        "request_too_large",
        "prompt_too_long",
        "context_length_exceeded",
        "n",
        "max_tokens",
    ] {
        assert!(
            t.refused.get(limit).is_some_and(|&n| n > 0),
            "no {limit} refusal: {t:?}"
        );
    }
    assert_eq!(
        t.sent,
        t.completed + t.refused_total() + t.disconnected_by_client,
        "every request is accounted for"
    );
    let end = soak::settle(&base, Duration::from_secs(60)).expect("metrics");
    assert_eq!(
        end,
        (0.0, 0.0, 0.0),
        "KV blocks used, running, waiting at the end"
    );
}
