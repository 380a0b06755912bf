//! The sampler on real models (release builds; a few seconds each):
//!
//! - the same seed gives the same 32 sampled tokens on one thread and on two (the model's
//!   logits are bit-identical across thread counts and the sampler is deterministic);
//! - 20 generations per model under a JSON schema all parse and validate. The validator
//!   here is written from the JSON-schema specification for the subset the schema uses,
//!   independently of the grammar compiler.

mod common;

use std::sync::Arc;

use kiln_model::{Logits, Model, Session};
use kiln_sample::{Grammar, Matcher, Sampler, SamplerConfig, StopReason, Vocab};
use kiln_tokenizer::Tokenizer;
use serde_json::Value;

struct Loaded {
    model: Arc<Model>,
    tok: Tokenizer,
    vocab: Arc<Vocab>,
}

fn load(name: &str) -> Loaded {
    let file = common::open(name);
    let tok = common::tokenizer(&file);
    let vocab = common::vocab(&tok);
    let model = Arc::new(Model::from_gguf(file).expect("model"));
    Loaded { model, tok, vocab }
}

/// Samples up to `max` tokens after `prompt_logits` (the session holds the prompt).
fn generate(
    l: &Loaded,
    session: &mut Session,
    prompt_logits: &[f32],
    sampler: &mut Sampler,
    max: usize,
) -> (Vec<u32>, StopReason) {
    let mut out = Vec::new();
    let mut logits = prompt_logits.to_vec();
    loop {
        let id = sampler.try_sample(&logits).expect("sample");
        if l.tok.is_eog(id) {
            return (out, StopReason::EndOfGeneration { token: id });
        }
        out.push(id);
        sampler.accept(id);
        if out.len() == max {
            return (out, StopReason::Length);
        }
        logits.clear();
        logits.extend_from_slice(session.forward(&[id], Logits::Last).expect("forward"));
    }
}

#[test]
fn same_seed_gives_the_same_tokens_on_one_and_two_threads() {
    let l = load("smollm2-135m");
    let prompt = l
        .tok
        .encode("Once upon a time, in a village by the sea,", true, true)
        .unwrap();
    let run = |threads: usize| {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .unwrap();
        pool.install(|| {
            let mut session = Session::new(Arc::clone(&l.model), 256, 64);
            let logits = session.forward(&prompt, Logits::Last).unwrap().to_vec();
            let mut sampler = Sampler::with_vocab(
                SamplerConfig {
                    seed: 1234,
                    temperature: 1.0,
                    repeat_penalty: 1.1,
                    ..SamplerConfig::default()
                },
                Arc::clone(&l.vocab),
            );
            for &t in &prompt {
                sampler.accept(t);
            }
            generate(&l, &mut session, &logits, &mut sampler, 32).0
        })
    };
    let one = run(1);
    let two = run(2);
    assert_eq!(
        one.len(),
        32,
        "no early end-of-generation: {:?}",
        l.tok.decode(&one)
    );
    assert_eq!(
        one,
        two,
        "{:?}\nvs\n{:?}",
        l.tok.decode(&one),
        l.tok.decode(&two)
    );
}

const SCHEMA: &str = r#"{
  "type": "object",
  "properties": {
    "name": {"type": "string", "maxLength": 12},
    "age": {"type": "integer"},
    "pets": {"type": "array", "items": {"enum": ["cat", "dog", "fish"]}, "maxItems": 2}
  },
  "required": ["name", "age"]
}"#;

/// JSON-schema validation for the keywords `SCHEMA` uses, from the specification.
fn validate(v: &Value, s: &Value, path: &str) -> Result<(), String> {
    if let Some(e) = s.get("enum").and_then(Value::as_array) {
        return if e.contains(v) {
            Ok(())
        } else {
            Err(format!("{path}: {v} not in enum"))
        };
    }
    let ty = s.get("type").and_then(Value::as_str);
    let ok = match ty {
        Some("object") => v.is_object(),
        Some("array") => v.is_array(),
        Some("string") => v.is_string(),
        Some("integer") => v.is_i64() || v.is_u64(),
        Some("number") => v.is_number(),
        Some("boolean") => v.is_boolean(),
        Some("null") => v.is_null(),
        _ => true,
    };
    if !ok {
        return Err(format!("{path}: {v} is not of type {ty:?}"));
    }
    if let (Some(max), Some(text)) = (s.get("maxLength").and_then(Value::as_u64), v.as_str())
        && text.chars().count() as u64 > max
    {
        return Err(format!("{path}: longer than {max}"));
    }
    if let Some(items) = v.as_array() {
        if let Some(max) = s.get("maxItems").and_then(Value::as_u64)
            && items.len() as u64 > max
        {
            return Err(format!("{path}: more than {max} items"));
        }
        if let Some(item_schema) = s.get("items") {
            for (i, item) in items.iter().enumerate() {
                validate(item, item_schema, &format!("{path}/{i}"))?;
            }
        }
    }
    if let Some(obj) = v.as_object() {
        for r in s
            .get("required")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let r = r.as_str().unwrap();
            if !obj.contains_key(r) {
                return Err(format!("{path}: missing required {r}"));
            }
        }
        let props = s.get("properties").and_then(Value::as_object);
        for (k, val) in obj {
            if let Some(ps) = props.and_then(|p| p.get(k)) {
                validate(val, ps, &format!("{path}/{k}"))?;
            }
        }
    }
    Ok(())
}

#[test]
fn the_validator_rejects_what_the_schema_forbids() {
    let s: Value = serde_json::from_str(SCHEMA).unwrap();
    let good: Value = serde_json::from_str(r#"{"name":"a","age":3,"pets":["cat"]}"#).unwrap();
    assert!(validate(&good, &s, "#").is_ok());
    for bad in [
        r#"{"name":"a"}"#,
        r#"{"name":"a","age":3.5}"#,
        r#"{"name":"abcdefghijklm","age":3}"#,
        r#"{"name":"a","age":3,"pets":["cow"]}"#,
        r#"{"name":"a","age":3,"pets":["cat","dog","fish"]}"#,
    ] {
        let v: Value = serde_json::from_str(bad).unwrap();
        assert!(validate(&v, &s, "#").is_err(), "{bad}");
    }
}

/// For the larger model: fewer tokens per generation keep the test to seconds.
const SMALL_SCHEMA: &str = r#"{
  "type": "object",
  "properties": {"name": {"type": "string", "maxLength": 12}, "age": {"type": "integer"}},
  "required": ["name", "age"]
}"#;

fn twenty_valid_generations(name: &str, schema_text: &str) {
    let l = load(name);
    let schema: Value = serde_json::from_str(schema_text).unwrap();
    let grammar = Arc::new(Grammar::from_json_schema(schema_text).unwrap());
    let prompt = l
        .tok
        .encode(
            "<|im_start|>user\nDescribe a fictional person as JSON with their name, age and pets.<|im_end|>\n<|im_start|>assistant\n",
            true,
            true,
        )
        .unwrap();
    let mut session = Session::new(Arc::clone(&l.model), prompt.len() + 160, 64);
    let prompt_logits = session.forward(&prompt, Logits::Last).unwrap().to_vec();
    let mut valid = 0;
    let mut masks = (0u64, std::time::Duration::ZERO, std::time::Duration::ZERO);
    for seed in 0..20u64 {
        session.truncate(prompt.len());
        let mut sampler = Sampler::with_vocab(
            SamplerConfig {
                seed,
                ..SamplerConfig::default()
            },
            Arc::clone(&l.vocab),
        );
        sampler.set_grammar(Matcher::new(Arc::clone(&grammar), Arc::clone(&l.vocab)).unwrap());
        for &t in &prompt {
            sampler.accept(t);
        }
        let (ids, reason) = generate(&l, &mut session, &prompt_logits, &mut sampler, 150);
        let text = l.tok.decode(&ids);
        let st = sampler.mask_stats();
        masks.0 += st.steps;
        masks.1 += st.total;
        masks.2 = masks.2.max(st.max);
        assert!(
            matches!(reason, StopReason::EndOfGeneration { .. }),
            "{name} seed {seed}: no end of generation within 150 tokens: {text:?}"
        );
        assert!(sampler.matcher().unwrap().is_finished());
        let v: Value = serde_json::from_str(&text)
            .unwrap_or_else(|e| panic!("{name} seed {seed}: {e}: {text:?}"));
        validate(&v, &schema, "#").unwrap_or_else(|e| panic!("{name} seed {seed}: {e}: {text}"));
        valid += 1;
        if std::env::var_os("KILN_SHOW").is_some() {
            eprintln!("{name} seed {seed} ({} tokens): {text}", ids.len());
        }
    }
    eprintln!(
        "{name}: {valid}/20 generations valid; grammar mask {} steps, mean {:.3} ms, max {:.3} ms",
        masks.0,
        masks.1.as_secs_f64() * 1e3 / masks.0.max(1) as f64,
        masks.2.as_secs_f64() * 1e3
    );
}

#[test]
fn smollm2_json_schema_generations_all_validate() {
    twenty_valid_generations("smollm2-135m", SCHEMA);
}

#[test]
fn qwen_json_schema_generations_all_validate() {
    twenty_valid_generations("qwen2.5-coder-0.5b", SMALL_SCHEMA);
}
