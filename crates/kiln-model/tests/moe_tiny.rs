//! The mixture-of-experts fixtures of `testdata/hf-tiny/` (`qwen3moe`, `qwen2moe`,
//! `mixtral`, `olmoe`: random weights, 4–8 experts, top-2) through both of Kiln's loaders:
//! the Hugging Face directory (per-expert safetensors tensors) against transformers'
//! logits (`golden.json`), and the f32 GGUF that llama.cpp's converter made of the same
//! directory (`model-f32.gguf`: 3-D expert tensors, mapped) against llama.cpp's logits on
//! it (`llamacpp.json`).
//!
//! Tolerances come from the noise-floor table of docs/correctness.md: how far llama.cpp
//! (f16 KV cache and attention, the arithmetic Kiln shares) is from transformers (f32) on
//! each fixture. Each bound is stated beside its fixture with its basis. Routing is not a
//! source of difference: every fixture's k-th and (k+1)-th router logits differ by at
//! least 0.011, so every correct implementation picks the same experts, and a wrong
//! gating, renormalisation or expert layout moves logits by 0.9 to 4 (docs/correctness.md).

mod common;

use std::sync::Arc;

use common::*;
use kiln_model::{BatchSeq, KvOptions, Logits, Model, SeqId, Session, SourceKind};
use serde_json::Value;

fn matrix(v: &Value) -> Vec<Vec<f32>> {
    v.as_array()
        .expect("rows")
        .iter()
        .map(|r| {
            r.as_array()
                .expect("row")
                .iter()
                .map(|x| x.as_f64().expect("number") as f32)
                .collect()
        })
        .collect()
}

/// A reference: the ids it evaluated and its logits at every position.
fn reference(name: &str, file: &str) -> (Vec<u32>, Vec<Vec<f32>>) {
    let v = read_json(&testdata(&format!("hf-tiny/{name}/{file}")));
    (ids(&v["ids"]), matrix(&v["logits"]))
}

fn log_softmax(row: &[f32]) -> Vec<f64> {
    let m = row.iter().fold(f32::NEG_INFINITY, |a, &b| a.max(b)) as f64;
    let z = row.iter().map(|&x| (x as f64 - m).exp()).sum::<f64>().ln();
    row.iter().map(|&x| x as f64 - m - z).collect()
}

fn top10(row: &[f32]) -> Vec<usize> {
    let mut idx: Vec<usize> = (0..row.len()).collect();
    idx.sort_by(|&a, &b| row[b].total_cmp(&row[a]));
    idx.truncate(10);
    idx
}

/// The largest |Δ log-prob| over each position's top-10 tokens (the union of both sides').
fn max_top10_logprob_diff(ours: &[Vec<f32>], theirs: &[Vec<f32>]) -> f64 {
    let mut worst = 0.0f64;
    for (a, b) in ours.iter().zip(theirs) {
        let (la, lb) = (log_softmax(a), log_softmax(b));
        for t in top10(a).into_iter().chain(top10(b)) {
            worst = worst.max((la[t] - lb[t]).abs());
        }
    }
    worst
}

/// Bounds on one comparison: max |Δ logit| and max top-10 |Δ log-prob|.
struct Bound {
    logit: f32,
    logprob: f64,
}

/// Compares `model`'s logits on the reference's ids, in one pass and one token at a time,
/// with the reference: the greedy token at every position, and both distances within
/// `bound`.
fn compare(
    name: &str,
    what: &str,
    model: &Arc<Model>,
    reference: &(Vec<u32>, Vec<Vec<f32>>),
    bound: &Bound,
) {
    let (ids, want) = reference;
    for (how, got) in [
        ("one pass", logits_all(model, ids)),
        ("token by token", logits_stepwise(model, ids)),
    ] {
        let d = max_abs_diff(&got, want);
        let lp = max_top10_logprob_diff(&got, want);
        eprintln!("{name} {what} ({how}): max |Δ logit| {d:.2e}, max top-10 |Δ log-prob| {lp:.2e}");
        for (t, (g, w)) in got.iter().zip(want).enumerate() {
            assert_eq!(
                argmax(g),
                argmax(w),
                "{name} {what} ({how}): greedy token at position {t}"
            );
        }
        assert!(
            d <= bound.logit,
            "{name} {what} ({how}): logits differ by {d}, bound {}",
            bound.logit
        );
        assert!(
            lp <= bound.logprob,
            "{name} {what} ({how}): top-10 log-probs differ by {lp}, bound {}",
            bound.logprob
        );
    }
}

fn hf(name: &str) -> Arc<Model> {
    let m = Model::open(testdata(&format!("hf-tiny/{name}"))).expect("checkpoint loads");
    assert_eq!(m.source_kind(), SourceKind::Safetensors);
    Arc::new(m)
}

fn gguf(name: &str) -> Arc<Model> {
    let m = Model::open(testdata(&format!("hf-tiny/{name}/model-f32.gguf"))).expect("GGUF loads");
    assert_eq!(m.source_kind(), SourceKind::Gguf);
    Arc::new(m)
}

fn check(name: &str, vs_transformers: Bound, vs_llamacpp: Bound) {
    compare(
        name,
        "safetensors vs transformers",
        &hf(name),
        &reference(name, "golden.json"),
        &vs_transformers,
    );
    compare(
        name,
        "GGUF vs llama.cpp",
        &gguf(name),
        &reference(name, "llamacpp.json"),
        &vs_llamacpp,
    );
}

// Kiln's GGUF path against llama.cpp on the same f32 file: Kiln computes attention as
// llama.cpp does (f16 K/V, f16 one-row arithmetic), so what is left is summation order. It
// measures ≤ 1.9e-5 (qwen2moe) here, the size of the f32-KV llama.cpp-vs-transformers
// floor (≤ 1.8e-5, docs/correctness.md); the bound is 5× that and 30–90× below the f16
// noise floor of the table (0.0034–0.0091), which a wrong routing would exceed by 100×.
const VS_LLAMACPP: Bound = Bound {
    logit: 1e-4,
    logprob: 1e-4,
};

// The safetensors path against transformers (f32 arithmetic on the BF16 values): the
// table's floor (llama.cpp's f16 attention: 0.0034–0.0091 logit, 0.0023–0.0061 log-prob)
// plus what Kiln's BF16 matmuls add by rounding activations to BF16 as llama.cpp does for
// BF16 weights (the GGUF path on the same values in f32 has none of it). Measured 0.029–
// 0.053 logit and 0.021–0.037 log-prob; each bound is about 1.5× its fixture's figure,
// and 10–80× below what a routing mistake moves (0.87–4.2).

#[test]
fn qwen3moe_renormalised_top2_matches_transformers_and_llamacpp() {
    // Measured 0.051 / 0.030.
    check(
        "qwen3moe",
        Bound {
            logit: 0.08,
            logprob: 0.05,
        },
        VS_LLAMACPP,
    );
}

#[test]
fn qwen2moe_unnormalised_top2_with_a_gated_shared_expert_matches_transformers_and_llamacpp() {
    // Measured 0.029 / 0.022.
    check(
        "qwen2moe",
        Bound {
            logit: 0.05,
            logprob: 0.035,
        },
        VS_LLAMACPP,
    );
}

#[test]
fn mixtral_as_llama_with_experts_matches_transformers_and_llamacpp() {
    // Measured 0.053 / 0.037.
    check(
        "mixtral",
        Bound {
            logit: 0.08,
            logprob: 0.055,
        },
        VS_LLAMACPP,
    );
}

#[test]
fn olmoe_unnormalised_top2_with_whole_projection_qk_norm_matches_transformers_and_llamacpp() {
    // Measured 0.052 / 0.023.
    check(
        "olmoe",
        Bound {
            logit: 0.08,
            logprob: 0.035,
        },
        VS_LLAMACPP,
    );
}

/// A deterministic token stream inside the fixtures' vocabulary of 512.
fn tokens(n: usize, seed: u32) -> Vec<u32> {
    (0..n as u32)
        .map(|i| {
            3 + (i
                .wrapping_mul(2654435761)
                .wrapping_add(seed.wrapping_mul(40503))
                >> 7)
                % 509
        })
        .collect()
}

fn bits(x: &[f32]) -> Vec<u32> {
    x.iter().map(|v| v.to_bits()).collect()
}

const STEPS: usize = 8;

/// Greedy decoding of `prompt` alone: the logits of every step, as bits.
fn alone(model: &Arc<Model>, prompt: &[u32]) -> Vec<Vec<u32>> {
    let mut s = Session::new(Arc::clone(model), 64, 64);
    let mut out = Vec::new();
    let mut l = s.forward(prompt, Logits::Last).expect("prompt").to_vec();
    for _ in 0..STEPS {
        out.push(bits(&l));
        let next = argmax(&l) as u32;
        l = s.forward(&[next], Logits::Last).expect("decode").to_vec();
    }
    out.push(bits(&l));
    out
}

/// Eight sequences in one session, joining one per step, their prompts fed in chunks of at
/// most 5 tokens while the others decode: every pass mixes prefill chunks and decode rows,
/// so an expert's grouped rows come from several sequences. Each sequence's logits must be
/// the ones it gets alone, bit for bit.
fn batched_equals_alone(model: &Arc<Model>) {
    let prompts: Vec<Vec<u32>> = [
        (3, 1),
        (11, 2),
        (26, 3),
        (1, 4),
        (17, 5),
        (8, 6),
        (30, 7),
        (5, 8),
    ]
    .iter()
    .map(|&(n, seed)| tokens(n, seed))
    .collect();
    let expected: Vec<Vec<Vec<u32>>> = prompts.iter().map(|p| alone(model, p)).collect();
    let kv = KvOptions {
        memory: Some(8 << 20),
        ..KvOptions::default()
    };
    let mut s = Session::with_kv(Arc::clone(model), 64, 64, &kv).expect("session");
    struct Row {
        seq: SeqId,
        prompt: Vec<u32>,
        fed: usize,
        next: Vec<u32>,
        logits: Vec<Vec<u32>>,
    }
    let mut rows: Vec<Row> = prompts
        .iter()
        .map(|p| Row {
            seq: s.new_sequence(),
            prompt: p.clone(),
            fed: 0,
            next: Vec::new(),
            logits: Vec::new(),
        })
        .collect();
    let vocab = model.config().vocab_size;
    let mut max_rows = 0;
    for step in 0.. {
        let members: Vec<usize> = (0..rows.len())
            .filter(|&i| i <= step && rows[i].logits.len() <= STEPS)
            .collect();
        if members.is_empty() {
            break;
        }
        for &i in &members {
            let r = &mut rows[i];
            if r.fed < r.prompt.len() {
                let n = (r.prompt.len() - r.fed).min(5);
                r.next = r.prompt[r.fed..r.fed + n].to_vec();
                r.fed += n;
            }
        }
        let batch: Vec<BatchSeq> = members
            .iter()
            .map(|&i| BatchSeq {
                seq: rows[i].seq,
                tokens: &rows[i].next,
                logits: rows[i].fed == rows[i].prompt.len(),
                prompt_rows: 0,
            })
            .collect();
        max_rows = max_rows.max(batch.len());
        let wants: Vec<bool> = batch.iter().map(|b| b.logits).collect();
        let logits = s.forward_batch(&batch).expect("batched pass").to_vec();
        let mut k = 0;
        for (&i, want) in members.iter().zip(wants) {
            if want {
                let l = &logits[k * vocab..(k + 1) * vocab];
                k += 1;
                rows[i].logits.push(bits(l));
                rows[i].next = vec![argmax(l) as u32];
            }
        }
    }
    assert_eq!(max_rows, 8, "some pass holds all eight sequences");
    for (i, r) in rows.iter().enumerate() {
        assert_eq!(r.logits.len(), STEPS + 1, "sequence {i} ran every step");
        for (step, (got, want)) in r.logits.iter().zip(&expected[i]).enumerate() {
            assert!(
                got == want,
                "sequence {i}, step {step}: batched logits differ from alone"
            );
        }
    }
}

#[test]
fn moe_logits_are_bit_for_bit_the_same_alone_and_in_a_batch_of_eight() {
    // Routed experts only (qwen3moe, GGUF: 3-D expert tensors), and with a shared expert
    // (qwen2moe, safetensors: per-expert tensors).
    batched_equals_alone(&gguf("qwen3moe"));
    batched_equals_alone(&hf("qwen2moe"));
}

#[test]
fn inspect_figures_count_only_the_routed_experts_per_token() {
    for name in ["qwen3moe", "qwen2moe", "mixtral", "olmoe"] {
        let m = gguf(name);
        let e = m.experts().expect("a mixture of experts");
        let c = m.config();
        let (n_expert, n_shared, n_ff_exp) = match name {
            "qwen3moe" => (8, 0, 16),
            "qwen2moe" => (4, 1, 16),
            "mixtral" => (4, 0, 16),
            _ => (8, 0, 16),
        };
        assert_eq!(
            (
                e.moe_layers,
                e.n_expert,
                e.n_expert_used,
                e.n_shared,
                e.n_ff_exp
            ),
            (c.n_layer, n_expert, 2, n_shared, n_ff_exp),
            "{name}"
        );
        // Every weight is f32 here: an unused expert is 3 matrices of n_ff_exp × n_embd.
        let expert = 3 * 4 * (n_ff_exp * c.n_embd) as u64;
        let unused = c.n_layer as u64 * (n_expert - 2) as u64 * expert;
        let embd_rest = 4 * ((c.vocab_size - 1) * c.n_embd) as u64;
        let per_token = m.weight_bytes_per_token();
        // What a token does not read: the unused experts, all embedding rows but its own,
        // and the norm and bias vectors (not counted as matrices).
        let vectors: u64 = m
            .gguf()
            .expect("a GGUF model")
            .tensors()
            .iter()
            .filter(|t| t.name.contains("norm") || t.name.ends_with(".bias"))
            .map(|t| t.n_bytes)
            .sum();
        assert_eq!(
            per_token + unused + embd_rest + vectors,
            m.weight_bytes(),
            "{name}: {per_token} bytes per token"
        );
    }
    assert!(hf("qwen3moe").experts().is_some());
}
