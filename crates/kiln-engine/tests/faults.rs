//! Panics never cross a request's boundary: a panic injected (test-only `FaultPlan`) inside
//! one request's sampling fails that request with `EngineError::Panic`, while the requests
//! sharing its steps finish with the reference tokens, its KV blocks are freed, and the
//! engine keeps serving.

mod common;

use std::sync::Arc;

use common::{collect, config, encode, greedy, load, reference, wait_for};
use kiln_engine::{Engine, EngineError, Event, FaultPlan};

#[test]
fn a_panic_in_one_requests_work_fails_only_that_request_and_the_engine_keeps_serving() {
    let (model, tok) = load();
    let victim = encode(&tok, "Tell me a story about a zebra");
    let others = [
        encode(&tok, "The capital of France is"),
        encode(&tok, "Water boils at"),
    ];
    let marker = *victim.last().expect("a non-empty prompt");
    assert!(
        others.iter().all(|p| !p.contains(&marker)),
        "the fault must target the victim only"
    );
    let mut cfg = config(&model);
    cfg.fault = Some(FaultPlan {
        prompt_token: marker,
        after_tokens: 3,
    });
    let engine = Engine::start(Arc::clone(&model), Arc::clone(&tok), cfg).expect("engine");
    let max = 10;
    let expected: Vec<Vec<u32>> = others
        .iter()
        .map(|p| reference(&model, &tok, p, max, true))
        .collect();

    // The victim shares its steps with the others.
    let v = engine
        .submit(greedy(victim.clone(), max, true))
        .expect("submit");
    let hs: Vec<_> = others
        .iter()
        .map(|p| engine.submit(greedy(p.clone(), max, true)).expect("submit"))
        .collect();
    let mut tokens_before = 0;
    let err = loop {
        match v.recv() {
            Some(Event::Token { .. }) => tokens_before += 1,
            Some(Event::Error(e)) => break e,
            Some(Event::Done { .. }) => panic!("the victim must fail"),
            None => panic!("the victim's stream ended without its error"),
        }
    };
    assert_eq!(tokens_before, 3, "the fault fires after 3 tokens");
    match &err {
        EngineError::Panic(m) => assert!(m.contains("injected fault"), "{m}"),
        e => panic!("expected a Panic error, got {e:?}"),
    }
    assert!(v.recv().is_none(), "nothing follows the error");
    for (h, want) in hs.iter().zip(&expected) {
        assert_eq!(&collect(h).ids, want, "a neighbour of the panic");
    }
    assert!(
        wait_for(&engine, |m| m.kv_blocks_used == 0 && m.running == 0),
        "KV blocks return to 0: {:?}",
        engine.metrics()
    );
    assert_eq!(engine.metrics().requests_failed, 1);

    // Later requests (and the victim's prompt again) keep being served.
    let again = collect(
        &engine
            .submit(greedy(others[0].clone(), max, true))
            .expect("submit"),
    );
    assert_eq!(again.ids, expected[0]);
    let v2 = engine
        .submit(greedy(victim, max, true))
        .expect("submit after a panic");
    assert!(matches!(
        std::iter::from_fn(|| v2.recv()).last(),
        Some(Event::Error(EngineError::Panic(_)))
    ));
}
