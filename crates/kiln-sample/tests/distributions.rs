//! Each stage of the chain, alone, against the distribution it should produce: a fixed-seed
//! chi-square goodness-of-fit test (significance 0.001) on 40,000 draws, plus "never" checks
//! for tokens a stage must remove. The expected distributions are computed here from the
//! definitions, independently of the crate's code.

use std::sync::Arc;

use kiln_sample::{Grammar, Matcher, Sampler, SamplerConfig, Stage, Vocab};

const DRAWS: usize = 40_000;
const LOGITS: [f32; 8] = [2.0, 1.6, 1.1, 0.7, 0.2, -0.4, -1.0, -2.5];

/// Only the stages a test names, everything else neutral.
fn cfg(order: &[Stage]) -> SamplerConfig {
    SamplerConfig {
        temperature: 1.0,
        top_k: 0,
        top_p: 1.0,
        min_p: 0.0,
        typical_p: 1.0,
        order: order.to_vec(),
        seed: 20240611,
        ..SamplerConfig::default()
    }
}

fn softmax(l: &[f64]) -> Vec<f64> {
    let m = l.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let e: Vec<f64> = l.iter().map(|&x| (x - m).exp()).collect();
    let s: f64 = e.iter().sum();
    e.iter().map(|x| x / s).collect()
}

fn base() -> Vec<f64> {
    LOGITS.iter().map(|&x| x as f64).collect()
}

/// Keep only `keep` (others get probability 0) and renormalise.
fn restrict(p: &[f64], keep: &[bool]) -> Vec<f64> {
    let s: f64 = p
        .iter()
        .zip(keep)
        .filter(|(_, k)| **k)
        .map(|(p, _)| p)
        .sum();
    p.iter()
        .zip(keep)
        .map(|(p, &k)| if k { p / s } else { 0.0 })
        .collect()
}

fn counts(mut s: Sampler, logits: &[f32]) -> Vec<usize> {
    let mut c = vec![0usize; logits.len()];
    for _ in 0..DRAWS {
        c[s.try_sample(logits).unwrap() as usize] += 1;
    }
    c
}

/// Wilson–Hilferty approximation of the chi-square quantile at 1 − 0.001.
fn critical(df: usize) -> f64 {
    let z = 3.0902;
    let d = df as f64;
    d * (1.0 - 2.0 / (9.0 * d) + z * (2.0 / (9.0 * d)).sqrt()).powi(3)
}

fn assert_fits(name: &str, got: &[usize], expected: &[f64]) {
    let n = got.iter().sum::<usize>() as f64;
    let mut chi2 = 0.0;
    let mut df = 0usize;
    for (i, (&g, &p)) in got.iter().zip(expected).enumerate() {
        if p == 0.0 {
            assert_eq!(
                g, 0,
                "{name}: token {i} has probability 0 but was drawn {g} times"
            );
            continue;
        }
        let e = n * p;
        chi2 += (g as f64 - e).powi(2) / e;
        df += 1;
    }
    let df = df.saturating_sub(1).max(1);
    assert!(
        chi2 < critical(df),
        "{name}: chi2 = {chi2:.2} ≥ {:.2} (df {df}); got {got:?}, expected {:?}",
        critical(df),
        expected.iter().map(|p| (p * n).round()).collect::<Vec<_>>()
    );
}

#[test]
fn plain_draws_follow_the_softmax() {
    let s = Sampler::new(cfg(&[]));
    assert_fits("softmax", &counts(s, &LOGITS), &softmax(&base()));
}

#[test]
fn temperature_scales_the_logits() {
    for t in [0.5f32, 1.7] {
        let s = Sampler::new(SamplerConfig {
            temperature: t,
            ..cfg(&[Stage::Temperature])
        });
        let l: Vec<f64> = base().iter().map(|x| x / t as f64).collect();
        assert_fits(
            &format!("temperature {t}"),
            &counts(s, &LOGITS),
            &softmax(&l),
        );
    }
}

#[test]
fn top_k_keeps_the_k_best() {
    let s = Sampler::new(SamplerConfig {
        top_k: 3,
        ..cfg(&[Stage::TopK])
    });
    let keep: Vec<bool> = (0..8).map(|i| i < 3).collect();
    assert_fits(
        "top-k 3",
        &counts(s, &LOGITS),
        &restrict(&softmax(&base()), &keep),
    );
}

#[test]
fn top_p_keeps_the_smallest_prefix_reaching_the_mass() {
    let p = softmax(&base());
    for top_p in [0.5f32, 0.8, 0.95] {
        let mut cum = 0.0;
        let mut keep = vec![false; 8];
        for i in 0..8 {
            keep[i] = true;
            cum += p[i];
            if cum >= top_p as f64 {
                break;
            }
        }
        let s = Sampler::new(SamplerConfig {
            top_p,
            ..cfg(&[Stage::TopP])
        });
        assert_fits(
            &format!("top-p {top_p}"),
            &counts(s, &LOGITS),
            &restrict(&p, &keep),
        );
    }
}

#[test]
fn min_p_drops_tokens_below_a_fraction_of_the_best() {
    let p = softmax(&base());
    let min_p = 0.2f32;
    let keep: Vec<bool> = p.iter().map(|&x| x >= min_p as f64 * p[0]).collect();
    assert!(keep.iter().filter(|k| !**k).count() >= 2);
    let s = Sampler::new(SamplerConfig {
        min_p,
        ..cfg(&[Stage::MinP])
    });
    assert_fits("min-p", &counts(s, &LOGITS), &restrict(&p, &keep));
}

#[test]
fn typical_p_keeps_the_tokens_closest_to_the_entropy() {
    let p = softmax(&base());
    let h: f64 = -p.iter().map(|x| x * x.ln()).sum::<f64>();
    let mut order: Vec<usize> = (0..8).collect();
    order.sort_by(|&a, &b| (-p[a].ln() - h).abs().total_cmp(&(-p[b].ln() - h).abs()));
    let typical_p = 0.3f32;
    let mut keep = vec![false; 8];
    let mut cum = 0.0;
    for &i in &order {
        keep[i] = true;
        cum += p[i];
        if cum > typical_p as f64 {
            break;
        }
    }
    assert!(
        !keep[0] && keep[1],
        "the most likely token is not typical here"
    );
    let s = Sampler::new(SamplerConfig {
        typical_p,
        ..cfg(&[Stage::TypicalP])
    });
    assert_fits("typical-p", &counts(s, &LOGITS), &restrict(&p, &keep));
}

#[test]
fn penalties_apply_repeat_frequency_and_presence() {
    let mut s = Sampler::new(SamplerConfig {
        repeat_penalty: 1.3,
        frequency_penalty: 0.2,
        presence_penalty: 0.3,
        repeat_last_n: 4,
        ..cfg(&[Stage::Penalties])
    });
    // Window of 4: [5, 0, 0, 7] (the 6 falls out).
    for t in [6, 5, 0, 0, 7] {
        s.accept(t);
    }
    let mut l = base();
    let pen = |x: f64, count: f64| {
        let r = if x <= 0.0 { x * 1.3 } else { x / 1.3 };
        r - count * 0.2 - 0.3
    };
    l[0] = pen(l[0], 2.0);
    l[5] = pen(l[5], 1.0);
    l[7] = pen(l[7], 1.0);
    assert_fits("penalties", &counts(s, &LOGITS), &softmax(&l));
}

#[test]
fn dry_penalises_the_token_that_would_extend_a_repeat() {
    let mut s = Sampler::new(SamplerConfig {
        dry_multiplier: 0.8,
        dry_base: 1.75,
        dry_allowed_length: 2,
        dry_last_n: 64,
        ..cfg(&[Stage::Dry])
    });
    // 1 2 3 4 … 1 2 3: token 4 would extend a 3-token repeat.
    for t in [1, 2, 3, 4, 6, 1, 2, 3] {
        s.accept(t);
    }
    let mut l = base();
    l[4] -= 0.8 * 1.75f64.powi(3 - 2);
    assert_fits("dry", &counts(s, &LOGITS), &softmax(&l));
}

#[test]
fn logit_bias_shifts_and_bans() {
    let s = Sampler::new(SamplerConfig {
        logit_bias: vec![(0, f32::NEG_INFINITY), (6, 2.5)],
        ..cfg(&[])
    });
    let mut l = base();
    l[6] += 2.5;
    let keep: Vec<bool> = (0..8).map(|i| i != 0).collect();
    assert_fits(
        "logit bias",
        &counts(s, &LOGITS),
        &restrict(&softmax(&l), &keep),
    );
}

#[test]
fn a_grammar_restricts_draws_to_allowed_tokens() {
    // Tokens 0..8 are the digits "0".."7"; the grammar allows odd digits only.
    let vocab = Arc::new(Vocab::new((0..8).map(|d| d.to_string()), &[]));
    let g = Arc::new(Grammar::from_gbnf("root ::= [1357]+").unwrap());
    let mut s = Sampler::with_vocab(cfg(&[]), Arc::clone(&vocab));
    s.set_grammar(Matcher::new(g, vocab).unwrap());
    let keep: Vec<bool> = (0..8).map(|i| i % 2 == 1).collect();
    assert_fits(
        "grammar",
        &counts(s, &LOGITS),
        &restrict(&softmax(&base()), &keep),
    );
}

#[test]
fn the_default_chain_matches_its_definition() {
    // top-k 5 → top-p 0.9 → min-p 0.1 → temperature 0.7, as llama.cpp's default order does.
    let s = Sampler::new(SamplerConfig {
        top_k: 5,
        top_p: 0.9,
        min_p: 0.1,
        temperature: 0.7,
        seed: 5,
        ..SamplerConfig::default()
    });
    let p = softmax(&base());
    let mut keep = vec![false; 8];
    let mut cum = 0.0;
    let z: f64 = p[..5].iter().sum();
    for i in 0..5 {
        keep[i] = true;
        cum += p[i] / z;
        if cum >= 0.9 {
            break;
        }
    }
    for i in 0..8 {
        keep[i] &= p[i] >= 0.1 * p[0];
    }
    let l: Vec<f64> = base().iter().map(|x| x / 0.7).collect();
    assert_fits(
        "default chain",
        &counts(s, &LOGITS),
        &restrict(&softmax(&l), &keep),
    );
}

#[test]
fn greedy_takes_the_best_after_penalties_and_ties_go_to_the_lowest_id() {
    let mut s = Sampler::new(SamplerConfig {
        repeat_penalty: 2.0,
        ..SamplerConfig::greedy()
    });
    s.accept(0);
    // 2.0 / 2 = 1.0 < 1.6.
    assert_eq!(s.try_sample(&LOGITS).unwrap(), 1);
    let mut t = Sampler::new(SamplerConfig::greedy());
    assert_eq!(t.try_sample(&[0.5, 3.0, 3.0, 1.0]).unwrap(), 1);
}

#[test]
fn same_seed_same_tokens_and_forks_draw_other_streams() {
    let c = SamplerConfig {
        seed: 99,
        ..cfg(&[])
    };
    let draw = |mut s: Sampler| {
        (0..64)
            .map(|_| s.try_sample(&LOGITS).unwrap())
            .collect::<Vec<_>>()
    };
    let a = draw(Sampler::new(c.clone()));
    assert_eq!(a, draw(Sampler::new(c.clone())));
    let base = Sampler::new(c.clone());
    assert_eq!(a, draw(base.fork(0)), "stream 0 is the plain sampler's");
    let f1 = draw(base.fork(1));
    assert_ne!(a, f1);
    assert_eq!(f1, draw(base.fork(1)));
    assert_ne!(a, draw(Sampler::new(SamplerConfig { seed: 100, ..c })));
}

#[test]
fn sampler_order_parses_llama_cpp_names_and_rejects_others() {
    assert_eq!(
        Stage::parse_order("penalties;dry;top_k;typ_p;top_p;min_p;temperature").unwrap(),
        Stage::DEFAULT_ORDER.to_vec()
    );
    assert_eq!(
        Stage::parse_order("top-k, temp").unwrap(),
        vec![Stage::TopK, Stage::Temperature]
    );
    assert!(Stage::parse_order("top_k;xtc").is_err());
}

/// A draft distribution unlike the target's (the draft model's `q`).
const Q: [f32; 8] = [0.05, 0.30, 0.05, 0.25, 0.05, 0.20, 0.05, 0.05];

/// Draws a token from `q` with a plain uniform (the draft's own stream).
fn draw_q(u: f64) -> u32 {
    let mut cum = 0.0;
    for (i, &p) in Q.iter().enumerate() {
        cum += f64::from(p);
        if u < cum {
            return i as u32;
        }
    }
    Q.len() as u32 - 1
}

#[test]
fn speculative_verification_of_a_fixed_draft_emits_the_target_distribution() {
    // An n-gram draft is deterministic (q one-hot): whatever token it proposes, accepted
    // or replaced, the emitted token follows the chain's distribution.
    for (draft, order) in [(0u32, vec![]), (5, vec![]), (1, vec![Stage::TopK])] {
        let mut c = cfg(&order);
        c.top_k = 4;
        let mut s = Sampler::new(c);
        let mut got = vec![0usize; LOGITS.len()];
        for _ in 0..DRAWS {
            got[s.verify_draft(&LOGITS, draft, None).unwrap() as usize] += 1;
        }
        let p = softmax(&base());
        let expected = if order.is_empty() {
            p
        } else {
            restrict(&p, &[true, true, true, true, false, false, false, false])
        };
        assert_fits(&format!("one-hot draft {draft}"), &got, &expected);
    }
}

#[test]
fn speculative_verification_of_a_sampled_draft_emits_the_target_distribution() {
    // A draft drawn from q, verified with q: the rejection rule makes the emitted token
    // follow p, not q and not a mixture.
    use rand::{RngExt, SeedableRng};
    let mut rng = rand_chacha::ChaCha20Rng::seed_from_u64(7);
    let mut s = Sampler::new(cfg(&[Stage::Temperature]));
    let mut got = vec![0usize; LOGITS.len()];
    let mut accepted = 0usize;
    for _ in 0..DRAWS {
        let d = draw_q(rng.random::<f64>());
        let id = s.verify_draft(&LOGITS, d, Some(&Q)).unwrap();
        accepted += usize::from(id == d);
        got[id as usize] += 1;
    }
    assert_fits("sampled draft", &got, &softmax(&base()));
    // Σ min(p, q) is the acceptance probability.
    let p = softmax(&base());
    let want: f64 = p.iter().zip(Q).map(|(&p, q)| p.min(f64::from(q))).sum();
    let rate = accepted as f64 / DRAWS as f64;
    assert!(
        (rate - want).abs() < 0.02,
        "acceptance {rate:.3}, expected {want:.3}"
    );
}

#[test]
fn speculative_verification_is_greedy_at_temperature_zero() {
    let mut c = cfg(&[]);
    c.temperature = 0.0;
    let mut s = Sampler::new(c);
    assert_eq!(s.verify_draft(&LOGITS, 0, None).unwrap(), 0);
    assert_eq!(s.verify_draft(&LOGITS, 3, Some(&Q)).unwrap(), 0);
}

#[test]
fn speculative_verification_under_a_grammar_emits_the_masked_distribution() {
    // Tokens 0..8 are the digits "0".."7"; the grammar allows odd digits only, and the
    // draft proposes a forbidden one every time.
    let vocab = Arc::new(Vocab::new((0..8).map(|d| d.to_string()), &[]));
    let g = Arc::new(Grammar::from_gbnf("root ::= [1357]+").unwrap());
    let mut s = Sampler::with_vocab(cfg(&[]), Arc::clone(&vocab));
    s.set_grammar(Matcher::new(g, vocab).unwrap());
    let mut got = vec![0usize; LOGITS.len()];
    for _ in 0..DRAWS {
        got[s.verify_draft(&LOGITS, 0, None).unwrap() as usize] += 1;
    }
    let keep: Vec<bool> = (0..8).map(|i| i % 2 == 1).collect();
    assert_fits("grammar", &got, &restrict(&softmax(&base()), &keep));
}
