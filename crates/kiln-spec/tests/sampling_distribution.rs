//! With sampling, speculative decoding cannot be told apart from plain decoding: over many
//! seeded runs on SmolLM2 with the chain cut to a small vocabulary slice (top-k 4), a
//! chi-square test of homogeneity (significance 0.001) finds the same distribution of
//! generated token pairs with n-gram drafts and with a draft model as without drafts.

mod common;

use std::collections::BTreeMap;
use std::sync::Arc;

use common::*;
use kiln_sample::SamplerConfig;
use kiln_spec::{DraftModel, DraftSource, SpecConfig, SpecDecoder, SpecMethod, SpecStats};

const RUNS: u64 = 400;
/// A prompt that repeats itself, so the n-gram source drafts at every step.
const PROMPT: &str = "red green blue red green blue red green blue red green blue red";

fn cfg(seed: u64) -> SamplerConfig {
    SamplerConfig {
        temperature: 1.0,
        top_k: 4,
        top_p: 1.0,
        min_p: 0.0,
        seed,
        ..SamplerConfig::default()
    }
}

/// Wilson–Hilferty approximation of the chi-square quantile at 1 − 0.001.
fn critical(df: usize) -> f64 {
    let z = 3.0902;
    let d = df as f64;
    d * (1.0 - 2.0 / (9.0 * d) + z * (2.0 / (9.0 * d)).sqrt()).powi(3)
}

/// The chi-square statistic of homogeneity of two samples over the same cells, with cells
/// expected below 5 pooled, and its degrees of freedom.
fn homogeneity(a: &BTreeMap<Vec<u32>, u64>, b: &BTreeMap<Vec<u32>, u64>) -> (f64, usize) {
    let (na, nb) = (
        a.values().sum::<u64>() as f64,
        b.values().sum::<u64>() as f64,
    );
    let mut cells: Vec<(f64, f64)> = Vec::new();
    let mut pooled = (0.0, 0.0);
    let keys: std::collections::BTreeSet<_> = a.keys().chain(b.keys()).collect();
    for k in keys {
        let x = *a.get(k).unwrap_or(&0) as f64;
        let y = *b.get(k).unwrap_or(&0) as f64;
        if (x + y) * na.min(nb) / (na + nb) < 5.0 {
            pooled.0 += x;
            pooled.1 += y;
        } else {
            cells.push((x, y));
        }
    }
    if pooled.0 + pooled.1 > 0.0 {
        cells.push(pooled);
    }
    let chi2 = cells
        .iter()
        .map(|&(x, y)| {
            let (ea, eb) = ((x + y) * na / (na + nb), (x + y) * nb / (na + nb));
            (x - ea).powi(2) / ea + (y - eb).powi(2) / eb
        })
        .sum();
    (chi2, cells.len().saturating_sub(1).max(1))
}

#[test]
fn speculative_sampling_has_the_distribution_of_plain_sampling() {
    let l = load("smollm2-135m");
    let p = prompt(&l, PROMPT);
    let vocab = l.model.config().vocab_size;
    let mut plain_counts = BTreeMap::new();
    for seed in 0..RUNS {
        *plain_counts
            .entry(plain(&l, &p, 3, &cfg(seed)))
            .or_insert(0) += 1;
    }
    for method in [SpecMethod::Ngram, SpecMethod::Draft] {
        let mut counts = BTreeMap::new();
        let mut stats = SpecStats::default();
        // The draft model's confidence floor is on, below its confidence here (its first
        // drafted token has a probability between 0.2 and 0.35 at temperature 1), so
        // drafts are made; where it cuts a draft is `draft_confidence.rs`.
        let spec_cfg = SpecConfig {
            adaptive: false,
            draft_max: 2,
            draft_p_min: 0.2,
            ..SpecConfig::new(method)
        };
        for seed in 0..RUNS {
            let mut spec = match method {
                SpecMethod::Ngram => SpecDecoder::ngram(&spec_cfg, vocab).unwrap(),
                SpecMethod::Draft => {
                    let d = DraftModel::new(Arc::clone(&l.model), p.len() + 8);
                    let src = DraftSource::Model(Box::new(d));
                    SpecDecoder::new(&spec_cfg, src, vocab, 1000 + seed).unwrap()
                }
            };
            let got = speculative(&l, &p, 3, &cfg(10_000 + seed), &mut spec);
            *counts.entry(got).or_insert(0) += 1;
            stats.add(&spec.stats());
        }
        // Drafts were made and both accepted and rejected, or the test shows nothing.
        assert!(
            stats.accepted > RUNS / 8 && stats.drafted > stats.accepted,
            "{method:?}: {stats:?}"
        );
        let (chi2, df) = homogeneity(&plain_counts, &counts);
        assert!(
            chi2 < critical(df),
            "{method:?}: chi2 {chi2:.1} ≥ {:.1} (df {df}); plain {plain_counts:?}, speculative {counts:?}",
            critical(df)
        );
    }
}
