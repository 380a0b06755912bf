//! The same real model from GGUF and from safetensors. SmolLM2-135M-Instruct's Q4_1 GGUF is
//! dequantized to an f32 Hugging Face directory (`kiln_testkit::hf_model`, cached); then
//! - that checkpoint must give HF transformers' greedy tokens (`testdata/hf-refs/…/
//!   reference.json`, transformers on the same dequantized weights, CPU f32), and
//! - the checkpoint (f32 weights, f32 activations) and the GGUF (Q4_1 weights, Q8_1
//!   activations) must give the same greedy tokens on most of the eight reference prompts:
//!   they hold the same weight values, and differ only in how activations are rounded.

mod common;

use std::sync::Arc;

use common::*;
use kiln_model::{Model, SourceKind};
use kiln_testkit::hf_model as gguf_to_hf;

#[test]
fn dequantized_smollm2_checkpoint_matches_transformers_greedy_tokens() {
    let dir = gguf_to_hf::dequantized_hf_dir("smollm2-135m");
    let model = Arc::new(Model::open(&dir).expect("checkpoint loads"));
    assert_eq!(model.source_kind(), SourceKind::Safetensors);
    let reference = read_json(&testdata(
        "hf-refs/smollm2-135m-instruct-q41deq/reference.json",
    ));
    let prompt = ids(&reference["prompt_ids"]);
    let expected = ids(&reference["generated_ids"]);
    let (got, steps) = greedy(&model, &prompt, expected.len());
    let mut worst = 0.0f64;
    for (i, step) in reference["steps"].as_array().unwrap().iter().enumerate() {
        for alt in step["top10"].as_array().unwrap() {
            let id = alt["id"].as_u64().unwrap() as usize;
            worst = worst.max((steps[i][id] as f64 - alt["logit"].as_f64().unwrap()).abs());
        }
    }
    eprintln!(
        "smollm2 checkpoint vs transformers: {}/{} greedy tokens, max top-10 |Δlogit| {worst:.4}",
        got.iter().zip(&expected).filter(|(a, b)| a == b).count(),
        expected.len()
    );
    assert_eq!(got, expected);
    assert!(worst < 0.1, "top-10 logits differ by {worst}");
}

/// Near-tie: a greedy choice that flips between the formats is accepted only where both
/// models' two best logits are closer than this (measured: ≤ 0.33 on these prompts; a wrong
/// graph diverges at margins of several logits).
const NEAR_TIE_LOGITS: f32 = 0.5;

#[test]
fn dequantized_smollm2_checkpoint_and_q4_1_gguf_agree_on_most_prompts() {
    let dir = gguf_to_hf::dequantized_hf_dir("smollm2-135m");
    let st = Arc::new(Model::open(&dir).expect("checkpoint loads"));
    let gguf = Arc::new(Model::open(kiln_hub::resolve("smollm2-135m").unwrap()).unwrap());
    let refs = read_json(&testdata("ref/smollm2.json"));
    let results = refs["results"].as_array().unwrap();
    let (mut identical, mut steps, mut steps_same) = (0, 0, 0);
    let mut prefixes = Vec::new();
    for r in results {
        let prompt = ids(&r["prompt_tokens"]);
        // The GGUF generates freely; the checkpoint reads the same sequence in one batch
        // and its greedy choice is compared at every step. The first step where they differ
        // is where two free-running generations would part.
        let (b, lb) = greedy(&gguf, &prompt, 32);
        let mut seq = prompt.clone();
        seq.extend_from_slice(&b[..31]);
        let all = logits_all(&st, &seq);
        let la = &all[prompt.len() - 1..];
        let mut first_diff = None;
        for (i, &t) in b.iter().enumerate() {
            steps += 1;
            if argmax(&la[i]) == t as usize {
                steps_same += 1;
                continue;
            }
            first_diff.get_or_insert(i);
            let (ma, mb) = (top2_margin(&la[i]), top2_margin(&lb[i]));
            assert!(
                ma < NEAR_TIE_LOGITS && mb < NEAR_TIE_LOGITS,
                "prompt {:?} step {i}: checkpoint picks {} over the GGUF's {t} at margins {ma} / {mb}",
                r["prompt"],
                argmax(&la[i])
            );
        }
        identical += usize::from(first_diff.is_none());
        prefixes.push(first_diff.unwrap_or(32));
    }
    eprintln!(
        "smollm2 checkpoint vs Q4_1 GGUF: identical 32-token continuations on {identical}/{} prompts \
         (agreeing prefixes {prefixes:?}, each divergence at a near-tie); same greedy token at \
         {steps_same}/{steps} teacher-forced steps",
        results.len()
    );
    assert!(
        steps_same * 10 >= steps * 9,
        "the GGUF agrees with the checkpoint at only {steps_same} of {steps} steps"
    );
}
