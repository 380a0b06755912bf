//! The grammar mask over Qwen2.5's 151,936-token vocabulary: sound along a real tokenized
//! document (every next token allowed), consistent with stepping each token directly, and
//! its cost printed per step (no timing assertion: see `benches/grammar_mask.rs`).

mod common;

use std::sync::Arc;
use std::time::Instant;

use kiln_sample::{Grammar, Matcher, TokenMask};

const SCHEMA: &str = r#"{
  "type": "object",
  "properties": {
    "name": {"type": "string"},
    "age": {"type": "integer"},
    "email": {"type": "string"},
    "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 4},
    "active": {"type": "boolean"},
    "score": {"type": "number"}
  },
  "required": ["name", "age", "active"]
}"#;

const DOC: &str = "{\n  \"name\": \"Ada Lovelace, née Byron 🧮\",\n  \"age\": 36,\n  \"tags\": [\"math\", \"poetry\"],\n  \"active\": false,\n  \"score\": -12.5e2\n}";

#[test]
fn qwen_mask_admits_a_real_document_and_agrees_with_direct_stepping() {
    let file = common::open("qwen2.5-coder-0.5b");
    let tok = common::tokenizer(&file);
    let vocab = common::vocab(&tok);
    assert!(vocab.len() >= 151_000, "{}", vocab.len());
    let grammar = Arc::new(Grammar::from_json_schema(SCHEMA).unwrap());
    assert!(grammar.matches(DOC.as_bytes()));

    let t0 = Instant::now();
    let mut m = Matcher::new(Arc::clone(&grammar), Arc::clone(&vocab)).unwrap();
    let mut mask = TokenMask::default();
    m.fill_mask_uncached(&mut mask).unwrap();
    let first = t0.elapsed();

    let ids = tok.encode(DOC, false, false).unwrap();
    let mut cold = Vec::new();
    let mut warm = Vec::new();
    let mut probe_state = 0x9E37_79B9u32;
    for (step, &id) in ids.iter().enumerate() {
        let t = Instant::now();
        m.fill_mask_uncached(&mut mask).unwrap();
        cold.push(t.elapsed());
        m.fill_mask(&mut mask).unwrap();
        let t = Instant::now();
        m.fill_mask(&mut mask).unwrap();
        warm.push(t.elapsed());
        if std::env::var_os("KILN_MASK_TRACE").is_some() {
            eprintln!(
                "step {step:3} {:?}: walk {:.3} ms, {} allowed, {} configurations",
                String::from_utf8_lossy(vocab.token_bytes(id)),
                cold[step].as_secs_f64() * 1e3,
                mask.count(),
                m.num_configurations()
            );
        }
        assert!(
            mask.contains(id),
            "step {step}: token {id} {:?} rejected",
            String::from_utf8_lossy(vocab.token_bytes(id))
        );
        // Spot-check the walk against stepping tokens one by one.
        for _ in 0..500 {
            probe_state ^= probe_state << 13;
            probe_state ^= probe_state >> 17;
            probe_state ^= probe_state << 5;
            let p = probe_state % vocab.len() as u32;
            assert_eq!(
                mask.contains(p),
                m.allows_token(p).unwrap(),
                "step {step}: token {p} {:?}",
                String::from_utf8_lossy(vocab.token_bytes(p))
            );
        }
        m.accept_token(id).unwrap();
    }
    m.fill_mask(&mut mask).unwrap();
    let eos = tok.eog_ids()[0];
    assert!(mask.contains(eos), "the document is complete: EOG allowed");
    m.accept_token(eos).unwrap();

    let ms = |d: &std::time::Duration| d.as_secs_f64() * 1e3;
    let mean = |v: &[std::time::Duration]| v.iter().map(ms).sum::<f64>() / v.len() as f64;
    let max = |v: &[std::time::Duration]| v.iter().map(ms).fold(0.0, f64::max);
    eprintln!(
        "qwen2.5 mask over {} tokens, {} steps: first (cold tables) {:.2} ms; trie walk mean {:.3} ms, max {:.3} ms; cached mean {:.4} ms; {} configurations",
        vocab.len(),
        ids.len(),
        ms(&first),
        mean(&cold),
        max(&cold),
        mean(&warm),
        m.num_configurations()
    );
}
