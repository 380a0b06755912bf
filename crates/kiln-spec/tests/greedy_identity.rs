//! Greedy output with speculation is byte-identical to greedy output without it, on the
//! three real models and eight prompts each, with n-gram drafts and with a draft model:
//! verification scores drafts in the decode arithmetic, and a row's logits do not depend
//! on the batch, so every accepted token is the token plain decoding picks.

mod common;

use std::sync::Arc;

use common::*;
use kiln_spec::{DraftModel, DraftSource, SpecConfig, SpecDecoder, SpecMethod, SpecStats};

const N: usize = 40;

#[test]
fn ngram_speculation_matches_plain_greedy_on_every_model_and_prompt() {
    for name in MODELS {
        let l = load(name);
        let mut total = SpecStats::default();
        for text in PROMPTS {
            let p = prompt(&l, text);
            let want = plain(&l, &p, N, &greedy());
            let cfg = SpecConfig::new(SpecMethod::Ngram);
            let mut spec = SpecDecoder::ngram(&cfg, l.model.config().vocab_size).unwrap();
            let got = speculative(&l, &p, N, &greedy(), &mut spec);
            assert_eq!(got, want, "{name}: {text:?}");
            total.add(&spec.stats());
        }
        // The comparison means something only if drafts were made and accepted.
        assert!(
            total.accepted > 20 && total.drafted > total.accepted,
            "{name}: {total:?}"
        );
    }
}

#[test]
fn draft_model_speculation_matches_plain_greedy_on_every_model_and_prompt() {
    for name in MODELS {
        let l = load(name);
        let mut total = SpecStats::default();
        for text in PROMPTS {
            let p = prompt(&l, text);
            let want = plain(&l, &p, N, &greedy());
            let mut cfg = SpecConfig::new(SpecMethod::Draft);
            cfg.draft_max = 4;
            // The model drafting for itself: the draft's catch-up passes run the prompt
            // arithmetic, so its tokens can differ from the target's now and then.
            let draft = DraftModel::new(Arc::clone(&l.model), p.len() + N + 8);
            let src = DraftSource::Model(Box::new(draft));
            let mut spec = SpecDecoder::new(&cfg, src, l.model.config().vocab_size, 1).unwrap();
            let got = speculative(&l, &p, N, &greedy(), &mut spec);
            assert_eq!(got, want, "{name}: {text:?}");
            total.add(&spec.stats());
        }
        assert!(total.accepted > 100, "{name}: {total:?}");
    }
}
