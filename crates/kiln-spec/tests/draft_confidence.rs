//! A draft model's draft stops before the first token it gives less than `draft_p_min`:
//! tokens it is unsure of are the ones the target rejects, and each costs a draft pass and
//! a scored position.

mod common;

use std::sync::Arc;

use common::*;
use kiln_model::{Logits, Session};
use kiln_spec::DraftModel;
use rand::SeedableRng;
use rand_chacha::ChaCha20Rng;

const K: usize = 8;

/// `softmax(logits)` of the argmax, in `f64`.
fn top_probability(logits: &[f32]) -> f64 {
    let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    1.0 / logits
        .iter()
        .map(|&l| f64::from(l - max).exp())
        .sum::<f64>()
}

fn draft(l: &Loaded, history: &[u32], p_min: f32) -> Vec<u32> {
    let mut d = DraftModel::new(Arc::clone(&l.model), history.len() + K + 1);
    let mut rng = ChaCha20Rng::seed_from_u64(0);
    let (mut out, mut q) = (Vec::new(), Vec::new());
    d.draft(history, K, 0.0, p_min, &mut rng, &mut out, &mut q)
        .expect("draft");
    assert!(q.is_empty(), "greedy drafts keep no distributions");
    out
}

#[test]
fn a_draft_stops_before_the_first_token_below_the_confidence_floor() {
    let l = load("smollm2-135m");
    let mut cuts = Vec::new();
    for text in PROMPTS {
        let history = prompt(&l, text);
        let full = draft(&l, &history, 0.0);
        assert_eq!(
            full.len(),
            K,
            "{text:?}: without a floor the whole draft is made"
        );
        // The draft model's confidence in each drafted token, evaluated one token at a
        // time as a draft is.
        let mut s = Session::new(Arc::clone(&l.model), history.len() + K + 1, 512);
        let mut logits = s.forward(&history, Logits::Last).expect("prompt").to_vec();
        let mut p = Vec::with_capacity(K);
        for &tok in &full {
            p.push(top_probability(&logits));
            logits = s.forward(&[tok], Logits::Last).expect("decode").to_vec();
        }
        // A floor just above the least confident position after the first: the draft
        // must end at the first position below it.
        let least = p[1..].iter().copied().fold(f64::INFINITY, f64::min);
        let floor = (least * 1.001) as f32;
        let want = p.iter().position(|&pi| pi < f64::from(floor)).unwrap_or(K);
        assert!(want < K, "{text:?}: the floor cuts the draft");
        let got = draft(&l, &history, floor);
        assert_eq!(
            got,
            full[..want],
            "{text:?}: probabilities {p:?}, floor {floor}"
        );
        cuts.push(want);
    }
    // Some drafts are cut after a few tokens, not all at their first.
    assert!(cuts.iter().any(|&c| c > 0), "cuts {cuts:?}");
    // A floor of 1 admits no token the model is not certain of.
    let history = prompt(&l, PROMPTS[4]);
    assert!(draft(&l, &history, 1.0).len() < K);
}
