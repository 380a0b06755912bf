//! Helpers shared by the model-level tests: fixture paths, golden logits, forward passes.

#![allow(dead_code)] // each test binary uses a different subset

use std::path::PathBuf;
use std::sync::Arc;

use kiln_model::{Logits, Model, Session};
use serde_json::Value;

/// `testdata/<rel>` of the repository.
pub fn testdata(rel: &str) -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../../testdata")).join(rel)
}

pub fn read_json(path: &std::path::Path) -> Value {
    let text = std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    serde_json::from_str(&text).expect("valid JSON")
}

pub fn ids(v: &Value) -> Vec<u32> {
    v.as_array()
        .expect("array of ids")
        .iter()
        .map(|x| x.as_u64().expect("id") as u32)
        .collect()
}

/// Logits of every position from one forward pass over `tokens`.
pub fn logits_all(model: &Arc<Model>, tokens: &[u32]) -> Vec<Vec<f32>> {
    let vocab = model.config().vocab_size;
    let mut s = Session::new(Arc::clone(model), tokens.len(), 64);
    let l = s.forward(tokens, Logits::All).expect("forward");
    l.chunks_exact(vocab).map(|r| r.to_vec()).collect()
}

/// Logits of every position, feeding one token at a time (the KV-cache path).
pub fn logits_stepwise(model: &Arc<Model>, tokens: &[u32]) -> Vec<Vec<f32>> {
    let mut s = Session::new(Arc::clone(model), tokens.len(), 1);
    tokens
        .iter()
        .map(|&t| s.forward(&[t], Logits::Last).expect("forward").to_vec())
        .collect()
}

/// Greedy continuation of `prompt` by `n` tokens.
pub fn greedy(model: &Arc<Model>, prompt: &[u32], n: usize) -> (Vec<u32>, Vec<Vec<f32>>) {
    let mut s = Session::new(Arc::clone(model), prompt.len() + n, 64);
    let mut out = Vec::new();
    let mut steps = Vec::new();
    let mut logits = s.forward(prompt, Logits::Last).expect("prefill").to_vec();
    for i in 0..n {
        let next = argmax(&logits) as u32;
        out.push(next);
        steps.push(logits.clone());
        if i + 1 < n {
            logits = s.forward(&[next], Logits::Last).expect("decode").to_vec();
        }
    }
    (out, steps)
}

pub fn argmax(v: &[f32]) -> usize {
    let mut best = 0;
    for i in 1..v.len() {
        if v[i] > v[best] {
            best = i;
        }
    }
    best
}

/// Largest absolute difference between two logit matrices.
pub fn max_abs_diff(a: &[Vec<f32>], b: &[Vec<f32>]) -> f32 {
    a.iter()
        .zip(b)
        .flat_map(|(x, y)| x.iter().zip(y).map(|(p, q)| (p - q).abs()))
        .fold(0.0, f32::max)
}

/// Margin between the best and second-best logit.
pub fn top2_margin(v: &[f32]) -> f32 {
    let b = argmax(v);
    let second = v
        .iter()
        .enumerate()
        .filter(|(i, _)| *i != b)
        .map(|(_, &x)| x)
        .fold(f32::NEG_INFINITY, f32::max);
    v[b] - second
}
