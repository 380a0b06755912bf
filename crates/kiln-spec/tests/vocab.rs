//! A draft model must share the target's vocabulary: an incompatible one is refused with
//! the difference named, a compatible one is accepted.

mod common;

use common::load;
use kiln_spec::{SpecError, check_vocab};

#[test]
fn a_draft_with_another_vocabulary_is_refused_naming_the_sizes() {
    let target = load("qwen2.5-coder-0.5b");
    let draft = load("smollm2-135m");
    let err = check_vocab(&target.vocab, &target.model, &draft.vocab, &draft.model).unwrap_err();
    assert!(
        matches!(err, SpecError::VocabSize { target: t, draft: d } if t == target.vocab.len() && d == draft.vocab.len()),
        "{err:?}"
    );
    let msg = err.to_string();
    assert!(
        msg.contains(&target.vocab.len().to_string())
            && msg.contains(&draft.vocab.len().to_string()),
        "{msg}"
    );
}

#[test]
fn a_draft_with_the_same_vocabulary_is_accepted() {
    let l = load("smollm2-135m");
    check_vocab(&l.vocab, &l.model, &l.vocab, &l.model).unwrap();
}

#[test]
fn a_draft_with_one_token_changed_is_refused_naming_the_token() {
    let l = load("smollm2-135m");
    let n = l.vocab.len() as u32;
    let changed = kiln_sample::Vocab::new(
        (0..n).map(|id| {
            if id == 100 {
                b"<changed>".to_vec()
            } else {
                l.vocab.token_bytes(id).to_vec()
            }
        }),
        l.vocab.eog_ids(),
    );
    let err = check_vocab(&l.vocab, &l.model, &changed, &l.model).unwrap_err();
    match &err {
        SpecError::VocabToken { id: 100, draft, .. } if draft == "<changed>" => {}
        other => panic!("{other:?}"),
    }
}
