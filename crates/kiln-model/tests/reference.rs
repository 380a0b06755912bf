//! Greedy decoding of the three real models against llama.cpp's recorded outputs
//! (`testdata/ref/*.json`): the same tokens up to 32, or up to a step where llama.cpp's two
//! best candidates are nearly tied (a near-tie that rounding may legitimately flip), and
//! where tokens agree, llama.cpp's top-10 probabilities close to ours.
//!
//! The tolerances are those that llama.cpp itself meets on this machine, not tighter:
//! `docs/correctness.md` shows that llama.cpp built here, with flash attention on or off,
//! differs from these same references (and from itself) by up to 0.144 in a top-10
//! probability (Kiln: 0.177), by 0.03–0.08 on average over a prompt's steps, and diverges at margins up to
//! 0.153 nats. These small Q4 models amplify any rounding difference (f16 KV, Q8
//! activations) into such deltas. A real bug — wrong RoPE pairing, a missing norm, SiLU for
//! GELU — moves probabilities by far more and diverges at clear margins early.

use std::sync::Arc;

use kiln_model::{Logits, Model, Session};
use serde_json::Value;

/// A greedy divergence is accepted only where llama.cpp's two best candidates were closer
/// than this.
const NEAR_TIE_NATS: f64 = 0.2;
/// Largest accepted difference of one top-10 probability.
const PROB_TOLERANCE: f64 = 0.2;
/// Largest accepted mean, over a model's prompts, of each prompt's largest probability
/// difference.
const MEAN_MAX_PROB_TOLERANCE: f64 = 0.09;

struct Outcome {
    prompt: String,
    matched: usize,
    expected: usize,
    /// Step where a near-tie flipped the greedy choice.
    near_tie_at: Option<usize>,
    max_prob_delta: f64,
    /// Why the prompt fails the criteria, if it does.
    failure: Option<String>,
}

fn log_softmax(logits: &[f32]) -> Vec<f64> {
    let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max) as f64;
    let z: f64 = logits
        .iter()
        .map(|&v| (v as f64 - max).exp())
        .sum::<f64>()
        .ln()
        + max;
    logits.iter().map(|&v| v as f64 - z).collect()
}

fn argmax(v: &[f64]) -> usize {
    let mut best = 0;
    for i in 1..v.len() {
        if v[i] > v[best] {
            best = i;
        }
    }
    best
}

fn check_model(model_name: &str, reference: &str) {
    let path =
        kiln_hub::resolve(model_name).expect("model must be available (fetched on first use)");
    let model = Arc::new(Model::open(&path).expect("model loads"));
    let text = std::fs::read_to_string(format!(
        "{}/../../testdata/ref/{reference}",
        env!("CARGO_MANIFEST_DIR")
    ))
    .expect("reference file");
    let refs: Value = serde_json::from_str(&text).expect("reference JSON");
    let mut outcomes = Vec::new();
    for r in refs["results"].as_array().expect("results") {
        let prompt_tokens: Vec<u32> = r["prompt_tokens"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_u64().unwrap() as u32)
            .collect();
        let ref_tokens: Vec<u32> = r["tokens"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_u64().unwrap() as u32)
            .collect();
        let probs = r["completion_probabilities"].as_array().unwrap();
        let mut session = Session::new(
            Arc::clone(&model),
            prompt_tokens.len() + ref_tokens.len() + 1,
            512,
        );
        let mut logits = session
            .forward(&prompt_tokens, Logits::Last)
            .expect("prefill")
            .to_vec();
        let mut out = Outcome {
            prompt: r["prompt"].as_str().unwrap().to_string(),
            matched: 0,
            expected: ref_tokens.len(),
            near_tie_at: None,
            max_prob_delta: 0.0,
            failure: None,
        };
        let mut aligned = true;
        for (step, &want) in ref_tokens.iter().enumerate() {
            let lp = log_softmax(&logits);
            let got = argmax(&lp) as u32;
            // The probability list lines up with the tokens until a multi-token character.
            let entry = probs
                .get(step)
                .filter(|e| aligned && e["id"].as_u64() == Some(want as u64));
            aligned = entry.is_some();
            if got != want {
                let (first, second) = match entry {
                    Some(e) => {
                        let tl = e["top_logprobs"].as_array().unwrap();
                        (
                            tl[0]["logprob"].as_f64().unwrap(),
                            tl[1]["logprob"].as_f64().unwrap(),
                        )
                    }
                    // Without llama.cpp's margins, judge by ours.
                    None => {
                        let mut s = lp.clone();
                        s.sort_by(|a, b| b.total_cmp(a));
                        (s[0], s[1])
                    }
                };
                if first - second >= NEAR_TIE_NATS {
                    out.failure = Some(format!(
                        "diverges at step {step} at a clear margin ({:.3} nats): llama.cpp chose {want}, we chose {got}",
                        first - second
                    ));
                } else {
                    out.near_tie_at = Some(step);
                }
                break;
            }
            if let Some(e) = entry {
                for alt in e["top_logprobs"].as_array().unwrap() {
                    let id = alt["id"].as_u64().unwrap() as usize;
                    let p_ref = alt["logprob"].as_f64().unwrap().exp();
                    let p_ours = lp[id].exp();
                    let delta = (p_ref - p_ours).abs();
                    out.max_prob_delta = out.max_prob_delta.max(delta);
                    if delta > PROB_TOLERANCE && out.failure.is_none() {
                        out.failure = Some(format!(
                            "step {step}: p(token {id}) = {p_ours:.4}, llama.cpp {p_ref:.4}"
                        ));
                    }
                }
            }
            out.matched += 1;
            if step + 1 < ref_tokens.len() {
                logits.copy_from_slice(session.forward(&[want], Logits::Last).expect("decode"));
            }
        }
        outcomes.push(out);
    }
    eprintln!("{model_name}: greedy tokens matched / reference, max |Δp| over top-10");
    for o in &outcomes {
        eprintln!(
            "  {:>2}/{:<2} {}  max|Δp| {:.4}  {:?}{}",
            o.matched,
            o.expected,
            o.near_tie_at
                .map_or(String::from("       "), |s| format!("tie@{s:<3}")),
            o.max_prob_delta,
            o.prompt,
            o.failure
                .as_ref()
                .map_or(String::new(), |f| format!("  FAIL: {f}"))
        );
    }
    assert_eq!(outcomes.len(), 8, "all eight reference prompts are checked");
    let mean_max = outcomes.iter().map(|o| o.max_prob_delta).sum::<f64>() / outcomes.len() as f64;
    let matched: usize = outcomes.iter().map(|o| o.matched).sum();
    let expected: usize = outcomes.iter().map(|o| o.expected).sum();
    eprintln!("  total {matched}/{expected} tokens, mean of per-prompt max|Δp| {mean_max:.4}");
    assert!(
        mean_max <= MEAN_MAX_PROB_TOLERANCE,
        "{model_name}: mean per-prompt max|Δp| {mean_max:.4} exceeds {MEAN_MAX_PROB_TOLERANCE}"
    );
    let failures: Vec<String> = outcomes
        .iter()
        .filter_map(|o| o.failure.as_ref().map(|f| format!("{:?}: {f}", o.prompt)))
        .collect();
    assert!(
        failures.is_empty(),
        "{model_name} differs from llama.cpp:\n{}",
        failures.join("\n")
    );
}

#[test]
fn smollm2_greedy_matches_llama_cpp() {
    check_model("smollm2-135m", "smollm2.json");
}

#[test]
fn qwen2_5_coder_greedy_matches_llama_cpp() {
    check_model("qwen2.5-coder-0.5b", "qwen2.5.json");
}

#[test]
fn gemma3_greedy_matches_llama_cpp() {
    check_model("gemma3-270m", "gemma3.json");
}
